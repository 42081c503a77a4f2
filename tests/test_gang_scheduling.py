"""Reference scheduler replicas placing pod groups (issue 41, items 2 and 3, and its "Done
when": three replicas racing two 8-member gangs where room exists for one). Groups are named by
Coscheduling's convention (label ``scheduling.x-k8s.io/pod-group``, PodGroup ``minMember``,
``scheduleTimeoutSeconds``); a group holds no room while it waits; a gang is claimed all or
nothing (docs/gangs.md).

The cache runs on every backend; the API server is tests/apiserver.py, fed into the cache by
``sync``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY

from schedcache import Cache
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.ops.gangwaits import GangWaits
from schedcache.scheduler.gang import POD_GROUP_LABEL
from tests.apiserver import FakeApiServer
from tests.factories import make_node, make_pod
from tests.racing import racing_schedulers
from tests.scheduling import eventually, fed_scheduler, node, pending


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def pod_group(name: str, min_member: int, timeout: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def member(name: str, group: str, cpu: str = "1") -> dict[str, Any]:
    manifest = pending(name, cpu)
    manifest["metadata"]["labels"] = {POD_GROUP_LABEL: group}
    return manifest


def bound(server: FakeApiServer, names: list[str]) -> list[str]:
    """Those of ``names`` the API server holds bound."""
    return [n for n in names if ((server.get("Pod", n) or {}).get("spec") or {}).get("nodeName")]


def in_cache(cache: Cache, names: list[str]) -> int:
    """How many of ``names`` the cache holds (claimed or bound), read at one instant (one
    MGET: the keys share the cache's hash tag)."""
    records = cache.client.mget([cache.keys.pod(f"uid-{n}") for n in names])
    return sum(record is not None for record in records)


def test_three_replicas_racing_two_gangs_place_exactly_one_whole(
    make_cache: Callable[..., Cache], server: FakeApiServer, tmp_path: Path
) -> None:
    """Room for 8 one-cpu pods (two 4-cpu nodes); gangs a and b of 8 each. Before issue 41
    the replicas placed pods one by one: 4 of a and 4 of b, say, both gangs broken."""
    server.create(node("n1", "4"))
    server.create(node("n2", "4"))
    gangs = {g: [f"{g}-{i}" for i in range(8)] for g in ("a", "b")}
    for g in gangs:
        server.create(pod_group(g, 8))
    for i in range(8):  # interleaved, as two jobs' pods arrive together
        for g, names in gangs.items():
            server.create(member(names[i], g))
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    watcher = make_cache(replica="watch")
    seen: set[int] = set()  # members of one gang the cache held at each look
    with racing_schedulers(make_cache, kubeconfig, 3) as replicas:

        def one_gang_bound() -> bool:
            seen.update(in_cache(watcher, names) for names in gangs.values())
            return any(len(bound(server, names)) == 8 for names in gangs.values())

        eventually(one_gang_bound, 30)
        deadline = time.monotonic() + 2.0  # the loser keeps trying: it never lands a member
        while time.monotonic() < deadline:
            seen.update(in_cache(watcher, names) for names in gangs.values())
            time.sleep(0.05)
        placed = sum(r.gangs.placed for r in replicas)
    counts = sorted(len(bound(server, names)) for names in gangs.values())
    assert counts == [0, 8]
    # Claims are whole: no look at the cache ever found a gang in part.
    assert seen == {0, 8}, seen
    assert placed == 1
    assert watcher.verify() == []


def counted(metric: str) -> float:
    """This process's value of a counter (the test's scheduler runs in it)."""
    return REGISTRY.get_sample_value(metric) or 0.0


def test_a_group_waits_for_min_member_holding_no_room(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    server.create(node("n1", "4"))
    server.create(pod_group("g", 3))
    server.create(member("g-0", "g"))
    server.create(member("g-1", "g"))
    waits_before = counted("schedcache_gang_waits_total")
    with fed_scheduler(cache, server, tmp_path, retry_delay=0.1, max_backoff=0.3) as scheduler:
        eventually(lambda: scheduler.gangs.waiting >= 3)
        assert counted("schedcache_gang_waits_total") - waits_before >= 3  # the metric says so
        assert in_cache(cache, ["g-0", "g-1"]) == 0
        # The waiting group holds nothing: a 2-cpu pod takes the room it would need.
        server.create(pending("plain", "2"))
        eventually(lambda: bound(server, ["plain"]) == ["plain"])
        assert bound(server, ["g-0", "g-1"]) == []
        server.delete("Pod", "plain")
        server.create(member("g-2", "g"))
        eventually(lambda: len(bound(server, ["g-0", "g-1", "g-2"])) == 3)
        assert scheduler.gangs.placed == 1


def test_a_group_that_cannot_fit_is_reported_and_claims_nothing(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    server.create(node("n1", "2"))
    server.create(pod_group("g", 3))
    for i in range(3):
        server.create(member(f"g-{i}", "g"))
    with fed_scheduler(cache, server, tmp_path, retry_delay=0.1, max_backoff=0.3):
        eventually(lambda: any(condition(server, f"g-{i}") for i in range(3)))
        reported = [condition(server, f"g-{i}") for i in range(3)]
        message = next(c for c in reported if c)["message"]
        assert message.startswith('pod group "default/g": member default/g-')
        assert "Insufficient cpu" in message
        assert in_cache(cache, [f"g-{i}" for i in range(3)]) == 0


def test_a_group_waiting_past_its_timeout_is_reported(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    server.create(node("n1", "4"))
    server.create(pod_group("g", 3, timeout=1))
    server.create(member("g-0", "g"))
    timeouts_before = counted("schedcache_gang_timeouts_total")
    with fed_scheduler(cache, server, tmp_path, retry_delay=0.2, max_backoff=0.4):
        eventually(lambda: condition(server, "g-0") is not None, 10)
        found = condition(server, "g-0")
        assert found is not None and found["reason"] == "Unschedulable"
        assert found["message"] == 'pod group "default/g" timed out waiting for 3 members'
        assert counted("schedcache_gang_timeouts_total") - timeouts_before >= 1


def test_a_group_over_the_gang_cap_is_reported_once_and_claims_nothing(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """minMember 300 > the 256 members one gang claim carries: before, the group was taken as
    256 (claimed in parts, or waiting forever); now it is refused whole, once."""
    server.create(node("n1", "4"))
    server.create(pod_group("big", 300))
    server.create(member("big-0", "big"))
    with fed_scheduler(cache, server, tmp_path, retry_delay=0.1, max_backoff=0.3) as scheduler:
        eventually(lambda: condition(server, "big-0") is not None, 10)
        found = condition(server, "big-0")
        assert found is not None and found["reason"] == "Unschedulable"
        assert found["message"] == (
            'pod group "default/big": minMember 300 is more than the 256 members '
            "one gang claim places all or nothing"
        )
        time.sleep(1.0)  # parked, not spinning through the wait
        assert scheduler.gangs.waiting == 0
        assert in_cache(cache, ["big-0"]) == 0
        assert GangWaits(cache).all() == []


def condition(server: FakeApiServer, name: str) -> dict[str, Any] | None:
    pod = server.get("Pod", name) or {}
    for found in (pod.get("status") or {}).get("conditions") or []:
        if found.get("type") == "PodScheduled":
            return dict(found)
    return None


def test_explain_shows_a_member_waiting_for_its_group(
    client: Any, cache: Cache, cache_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 4 of the issue: explain shows gang waits (before, a pod never assumed was an
    error: "has no claim")."""
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    cache.add_node(make_node("n1", "4", "8Gi"))
    waiting = make_pod("g-0", "", "1", "1Mi", namespace="default", uid="uid-g-0")
    GangWaits(cache).join("default/g", None, waiting, int(time.time() * 1000))
    result = CliRunner().invoke(main, ["--cache", cache_name, "explain", "pod", "default/g-0"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("gang: waits with pod group default/g for ")
    assert "holding no room; 1 members seen pending: default/g-0" in result.output
