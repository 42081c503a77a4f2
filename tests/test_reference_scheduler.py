"""The reference scheduler's queue habits, as kube-scheduler's (issue 29, item 8; issue 34,
item 4): a pod no node can take is told why in upstream's words (a ``PodScheduled=False``
condition, reason ``Unschedulable``) and waits parked in the cache's queue until a cluster
change could help, then backs off; a failed Binding backs off 1 s doubling; with the queue
unreachable the loop backs off too.

The cache runs on every backend; the API server is tests/apiserver.py through the official
client, fed into the cache by ``sync`` (which queues the pending pods)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import urllib3

from schedcache import Cache, Pod
from schedcache.feed.sync import api_client
from schedcache.scheduler import loop
from schedcache.scheduler.loop import ReferenceScheduler, fit_error
from tests.apiserver import FakeApiServer
from tests.factories import make_node, make_pod
from tests.scheduling import eventually, fed_scheduler, node, pending


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def condition(server: FakeApiServer, name: str) -> dict[str, Any] | None:
    pod = server.get("Pod", name) or {}
    for found in (pod.get("status") or {}).get("conditions") or []:
        if found.get("type") == "PodScheduled":
            return dict(found)
    return None


def bound_to(server: FakeApiServer, name: str) -> str | None:
    return ((server.get("Pod", name) or {}).get("spec") or {}).get("nodeName")


@pytest.mark.parametrize(
    ("nodes", "reasons", "expected"),
    [
        (
            12,
            ["Insufficient cpu"] * 3 + ["node(s) had untolerated taint {dedicated: gpu}"] * 9,
            "0/12 nodes are available: 3 Insufficient cpu, "
            "9 node(s) had untolerated taint {dedicated: gpu}.",
        ),
        # Go's sort.Strings on "<count> <reason>": "12 ..." sorts before "3 ...".
        (
            15,
            ["node(s) didn't match Pod's node affinity/selector"] * 3 + ["Too many pods"] * 12,
            "0/15 nodes are available: 12 Too many pods, "
            "3 node(s) didn't match Pod's node affinity/selector.",
        ),
        # One node short of two resources counts in both (upstream's status has two reasons).
        (
            1,
            ["Insufficient cpu", "Insufficient memory"],
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.",
        ),
        (0, [], "no nodes available to schedule pods"),
    ],
)
def test_the_reasons_read_as_upstreams_fit_error(
    nodes: int, reasons: list[str], expected: str
) -> None:
    assert fit_error(nodes, reasons) == expected


def test_an_unschedulable_pod_is_told_why_and_waits_parked(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Before issue 34: retried every back-off (0.2, 0.4, 0.8 s ...) though nothing changed."""
    server.create(node("small", "1"))
    server.create(node("gpu", "8", taint="gpu"))
    server.create(pending("big", "2"))
    with fed_scheduler(cache, server, tmp_path, retry_delay=0.2, max_backoff=0.8) as scheduler:
        eventually(lambda: condition(server, "big") is not None)
        found = condition(server, "big")
        assert found is not None
        assert found["status"] == "False" and found["reason"] == "Unschedulable"
        # upstream's FitError with DefaultPreemption's PostFilter message (issue 41)
        assert found["message"] == (
            "0/2 nodes are available: 1 Insufficient cpu, "
            "1 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/2 nodes are "
            "available: 1 No preemption victims found for incoming pod, 1 Preemption is not "
            "helpful for scheduling."
        )
        time.sleep(2.0)
        # Nothing that could help happened (our own condition patch, a MODIFIED of the
        # pending pod, is none): one attempt, parked; one patch.
        assert scheduler.unschedulable == 1
        assert scheduler.queue.lengths()["parked"] == 1
        assert len([r for r in server.requests if r.method == "PATCH"]) == 1


def test_a_node_added_retries_a_parked_pod(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    server.create(node("small", "1"))
    server.create(pending("big", "2"))
    with fed_scheduler(cache, server, tmp_path, retry_delay=0.3, max_backoff=0.3) as scheduler:
        eventually(lambda: scheduler.unschedulable == 1)
        time.sleep(1.0)  # its back-off is over, but it stays parked
        assert scheduler.unschedulable == 1 and bound_to(server, "big") is None
        server.create(node("roomy", "4"))
        eventually(lambda: bound_to(server, "big") == "roomy", 5)
        eventually(lambda: scheduler.bound == 1)  # counted once its Binding answered
        assert scheduler.unschedulable == 1
        # sync saw it bound: out of the queue.
        eventually(lambda: sum(scheduler.queue.lengths().values()) == 0)


def test_with_the_queue_unreachable_the_loop_backs_off(
    cache: Cache, server: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A warning at 0, 1 and 3 s, not one every poll."""

    def unreachable(scheduler: ReferenceScheduler) -> None:
        def refuse(*_: Any, **__: Any) -> Any:
            raise redis.ConnectionError("connection refused")

        scheduler.queue.pop = refuse  # type: ignore[method-assign]

    with (
        caplog.at_level(logging.WARNING, logger="schedcache.scheduler.loop"),
        fed_scheduler(cache, server, tmp_path, prepare=unreachable) as scheduler,
    ):
        time.sleep(3.5)
    warnings = [r for r in caplog.records if "popping the scheduling queue" in r.getMessage()]
    assert len(warnings) == 3 and scheduler.cache_errors == 3


def test_a_binding_the_api_server_never_answers_forgets_the_claim_and_backs_off(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Before: a connection error from the Binding (not an ApiException) left the claim
    assumed and ended the scheduling loop."""
    server.create(node("roomy", "4"))
    calls: list[float] = []

    def unreachable(scheduler: ReferenceScheduler) -> None:
        def refuse(namespace: str, name: str, uid: str, node: str) -> None:
            calls.append(time.monotonic())
            raise urllib3.exceptions.MaxRetryError(None, "/binding", OSError("refused"))  # type: ignore[arg-type]

        scheduler.binder.bind = refuse  # type: ignore[method-assign]

    with fed_scheduler(
        cache, server, tmp_path, prepare=unreachable, retry_delay=0.2, max_backoff=0.4
    ):
        server.create(pending("p", "1"))
        eventually(lambda: len(calls) >= 4)  # tried again: the loop lives on
        eventually(lambda: cache.pod_state("uid-p") is None)  # the claim was forgotten
        assert cache.get_node_info("roomy").requested.milli_cpu == 0
    gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
    # Backing off 0.2, 0.4, 0.4 s (the queue's clock is Redis', in ms: a little slack).
    assert all(gap >= wanted - 0.05 for gap, wanted in zip(gaps, (0.2, 0.4, 0.4), strict=False))


def test_a_pod_repelled_by_anti_affinity_waits_parked_until_the_pod_leaves(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Issue 38: pods with inter-pod rules were never parked. Only pods leaving or nodes
    changing can help a pod that anti-affinity keeps away, and both wake parked pods."""
    only = node("only", "4")
    only["metadata"]["labels"] = {"kubernetes.io/hostname": "only"}
    server.create(only)
    running = pending("db-0", "100m")
    running["metadata"]["labels"] = {"app": "db"}
    running["spec"]["nodeName"] = "only"
    running["status"] = {"phase": "Running"}
    server.create(running)
    repelled = pending("db-1", "100m")
    repelled["metadata"]["labels"] = {"app": "db"}
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    repelled["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    server.create(repelled)
    with fed_scheduler(cache, server, tmp_path, retry_delay=0.2, max_backoff=0.4) as scheduler:
        eventually(lambda: scheduler.unschedulable == 1)
        time.sleep(1.5)  # backed off, it would have been tried 3 times or more
        assert scheduler.unschedulable == 1
        assert scheduler.queue.lengths()["parked"] == 1
        server.delete("Pod", "db-0")
        eventually(lambda: bound_to(server, "db-1") == "only", 5)


def test_a_pod_waiting_for_its_affinitys_anchor_waits_parked_until_one_arrives(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Issue 38 item 4: a pod with required pod affinity was never parked (only backed off:
    the arrival of an anchor woke no parked pod). Now it is parked after one back-off, a pod
    its selector does not select leaves it parked, and an anchor arriving wakes it."""
    only = node("only", "4")
    only["metadata"]["labels"] = {"kubernetes.io/hostname": "only"}
    server.create(only)
    web = pending("web-1", "100m")
    web["metadata"]["labels"] = {"app": "web"}
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    web["spec"]["affinity"] = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    server.create(web)

    def running(name: str, app: str) -> None:
        pod = pending(name, "100m")
        pod["metadata"]["labels"] = {"app": app}
        pod["spec"]["nodeName"] = "only"
        pod["status"] = {"phase": "Running"}
        server.create(pod)

    with fed_scheduler(cache, server, tmp_path, retry_delay=0.2, max_backoff=0.4) as scheduler:
        eventually(lambda: scheduler.queue.lengths()["parked"] == 1, 5)
        tries = scheduler.unschedulable
        assert tries <= 2  # the first give-back backs off, the second parks
        running("cache-0", "cache")  # not an anchor: it stays parked
        eventually(lambda: cache.get_node_info("only").requested.milli_cpu == 100, 5)
        time.sleep(1.0)  # backed off instead, it would have been tried twice more
        assert scheduler.unschedulable == tries
        assert scheduler.queue.lengths()["parked"] == 1
        running("db-0", "db")
        eventually(lambda: bound_to(server, "web-1") == "only", 5)


def test_claims_carry_the_next_best_nodes_only_while_replicas_race(
    cache: Cache, server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranked candidates cost every claim Redis' and the client's work: a replica sends them
    for RACING_SECONDS after a conflict (a race lost), and then takes the next best node in
    the same claim instead of deciding again."""
    for name in ("n1", "n2", "n3"):
        cache.add_node(make_node(name, "4", "8Gi"))
    api = api_client(str(server.kubeconfig(tmp_path / "kubeconfig")))
    scheduler = ReferenceScheduler(cache, api, "ref")  # (nothing is bound here)
    monkeypatch.setattr(scheduler, "_submit", lambda *args: None)
    sent: list[tuple[str, ...]] = []
    claim = cache.assume_pod

    def racing_claim(pod: Pod, **options: Any) -> str:
        sent.append(tuple(options["candidates"]))
        if len(sent) == 2:  # another replica fills the node this one chose
            claim(make_pod("other", pod.node_name, "4", "1Mi"), check_fit=True)
        return claim(pod, **options)

    monkeypatch.setattr(cache, "assume_pod", racing_claim)
    assert scheduler.schedule_one(make_pod("a", "", "1", "1Mi")).node
    assert sent == [()]  # alone: no candidates
    outcome = scheduler.schedule_one(make_pod("b", "", "1", "1Mi"))
    assert sent[1] == () and outcome.conflicts == 1  # the race lost, decided again...
    assert len(sent) == 3 and sent[2] != ()  # ...with the next best nodes along
    scheduler.schedule_one(make_pod("c", "", "1", "1Mi"))
    assert sent[3] != ()  # still racing
    monkeypatch.setattr(loop, "RACING_SECONDS", 0.0)
    scheduler._racing_until = 0.0
    scheduler.schedule_one(make_pod("d", "", "1", "1Mi"))
    assert sent[4] == ()
