"""``explain pod`` shows a preemptor's victims and ``whatif`` shows what preemption would
choose (issue 41 follow-up, item 3). Every backend."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from click.testing import CliRunner

from schedcache import Cache
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.model.values import Pod
from schedcache.sim.policies import least_allocated
from schedcache.sim.whatif import what_if
from schedcache.store import nominations
from tests.factories import make_node, make_pod
from tests.test_preemption import bound_pod
from tests.test_whatif import moment


def test_explain_shows_a_preemptors_victims(
    cache: Cache, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the nomination alone, the victims nowhere in the cache."""
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    pre = make_pod("pre", "", cpu="2", mem="1Gi", priority=1000)
    cache.run(nominations.nominate_pod(pre, "n1", victims=["default/low1", "default/low2"]))
    result = CliRunner().invoke(main, ["--cache", cache.name, "explain", "pod", "pre"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("nominated to node n1 (preemption) until ")
    assert lines[1] == "  victims: default/low1, default/low2"
    # the victims go with the nomination
    cache.run(nominations.denominate_pod(pre))
    assert cache.client.hget(cache.keys.nomination_victims, pre.uid) is None


def test_whatif_shows_the_node_and_victims_preemption_would_choose(cache: Cache) -> None:
    """A node full of priority-0 pods started one after the other and one a priority-2000 pod
    fills: the 2-cpu priority-1000 pod fits nowhere; preemption would evict the two latest
    started on n1 (upstream's reprieve order). Before: only "chose no node"."""
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    cache.add_node(make_node("n2", cpu="2", mem="8Gi"))
    for i, started in enumerate(["00:01", "00:02", "00:03", "00:04"]):
        cache.add_pod(Pod.from_k8s(bound_pod(f"low{i}", "1", 0, f"2026-01-01T{started}:00Z")))
    cache.add_pod(Pod.from_k8s(bound_pod("vip", "2", 2000, "2026-01-01T00:00:00Z", "n2")))
    at = moment(cache)
    pods: list[Any] = [make_pod("pre", "", cpu="2", mem="1Gi", priority=1000, uid="pre")]
    result = what_if(cache, at, {"least": least_allocated}, pods)
    least = result.outcome("least")
    assert least.unschedulable == ["pre"]
    assert least.preemptions["pre"] == {"node": "n1", "victims": ["default/low2", "default/low3"]}
    assert result.to_dict()["outcomes"][1]["preemptions"]["pre"]["node"] == "n1"
