"""Issue 41's preemption attacked as a stranger would (review): raw FCALLs that used to write
what every later preemption choked on, and a preemptor deleted after evicting whose room stayed
held. Every backend (fakeredis, Redis, Redis Cluster)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from schedcache import Cache
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.errors import FitConflict
from schedcache.extender.service import Extender
from schedcache.model.values import Pod
from schedcache.scheduler.preemption import Preemption
from schedcache.store import nominations
from schedcache.store.budgets import read_budgets
from schedcache.store.commands import sync_pod, sync_pod_pending
from schedcache.store.library import function_name
from schedcache.views.snapshot import Snapshot
from tests.extender_server import RunningExtender
from tests.factories import keyspace, make_node, make_pod, pod_manifest
from tests.test_preemption import bound_pod


@pytest.fixture
def full(cache: Cache) -> Cache:
    """Node n1: 4 cpu, 2 of them taken by a bound pod."""
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    cache.add_pod(make_pod("bound", "n1", cpu="2", mem="1Gi"))
    return cache


def _fcall(cache: Cache, name: str, *args: object) -> object:
    return cache.client.fcall(function_name(name), 1, f"{{{cache.name}}}:", "r", "", *args)


def _refused_unchanged(cache: Cache, name: str, args: tuple[object, ...], answer: str) -> None:
    """A raw FCALL of ``name`` is refused ``answer`` and every key of the cache is unchanged."""
    before = keyspace(cache.client, f"{{{cache.name}}}:*")
    with pytest.raises(redis.ResponseError, match=answer):
        _fcall(cache, name, *args)
    assert keyspace(cache.client, f"{{{cache.name}}}:*") == before


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        # failed on 0ae1dd3: written, then every read_nominated (both preemptions) raised
        # UnicodeDecodeError, and explain on the victims
        ((b"u\xff", "n1", "1", "1000", "r:cpu 1"), "BADARG uid"),
        (("u", "n1", "1", "1000", "r:cpu 1", "", b"ns/v\xc3"), "BADARG victims"),
        (("u", "n1", "1", "1000", "r:cpu 1", "", b"ns/\xed\xa0\x80"), "BADARG victims"),
        # held on 0ae1dd3
        (("u", "n1", "inf", "1000", "r:cpu 1"), "BADARG priority"),
        (("u", "n1", "1.5", "1000", "r:cpu 1"), "BADARG priority"),
        (("u", "n1", str(-(2**31) - 1), "1000", "r:cpu 1"), "BADARG priority"),
        (("u", "n1", "1", "-5", "r:cpu 1"), "BADARG ttl"),
        (("u", "n1", "1", "1e9", "r:cpu 1"), "BADARG ttl"),
        (("u", "n1", "1", str(10**13), "r:cpu 1"), "BADARG ttl"),
        (("u", "n1", "1", "1000", "r:cpu 1", "-1"), "BADARG now"),
        (("u", "n1", "1", "1000", "r:cpu 1", str(10**14)), "BADARG now"),
        (
            ("u", "n1", "1", "1000", "r:cpu 1", "", "x" * (nominations.VICTIM_BYTES + 1)),
            "BADARG victims",
        ),
        (("u", "n1", "1", "1000", "r:cpu nan"), "BADARG contribution"),
    ],
)
def test_raw_nominations_with_bad_arguments_answer_badarg_and_write_nothing(
    full: Cache, args: tuple[object, ...], answer: str
) -> None:
    _refused_unchanged(full, "nominate_pod", args, answer)
    assert nominations.read_nominated(full.store) == {}


@pytest.mark.parametrize(
    ("args", "answer"),
    [(("u", "-1"), "BADARG now"), (("u x",), "BADARG uid"), (("",), "BADARG uid")],
)
def test_raw_denominations_with_bad_arguments_write_nothing(
    full: Cache, args: tuple[object, ...], answer: str
) -> None:
    nominations_pod = make_pod("pre", "", cpu="1", mem="1", priority=5)
    full.run(nominations.nominate_pod(nominations_pod, "n1"))
    _refused_unchanged(full, "denominate_pod", args, answer)


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        # failed on 0ae1dd3: stored, and read_budgets (both preemptions) raised on them
        (("5", "ns/b", "not json"), "BADARG body"),
        (("5", "ns/b", b'{"spec":"\xff"}'), "BADARG body"),
        (("5", b"ns/b\xff", "{}"), "BADARG key"),
        # held on 0ae1dd3
        (("-5", "ns/b", "{}"), "BADARG resourceVersion"),
        (("1.5", "ns/b", "{}"), "BADARG resourceVersion"),
        (("inf", "ns/b", "{}"), "BADARG resourceVersion"),
        (("5", "nsb", "{}"), "BADARG key"),
        (("5", "ns/b", "{" + " " * (1 << 20) + "}"), "BADARG body"),
    ],
)
def test_raw_budgets_with_bad_arguments_answer_badarg_and_write_nothing(
    full: Cache, args: tuple[object, ...], answer: str
) -> None:
    _refused_unchanged(full, "sync_budget", args, answer)
    assert read_budgets(full.store) == []


def test_a_budget_that_does_not_read_is_left_out_not_raised(
    full: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    """Failed on 0ae1dd3: a JSON budget whose expression has no key (sent by a raw FCALL)
    raised KeyError out of read_budgets, so every preemption of every replica failed."""
    bad = {
        "metadata": {"namespace": "ns", "name": "bad"},
        "spec": {"selector": {"matchExpressions": [{}]}},
    }
    good = {
        "metadata": {"namespace": "ns", "name": "good"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}},
        "status": {"disruptionsAllowed": 1},
    }
    _fcall(full, "sync_budget", "5", "ns/bad", json.dumps(bad))
    _fcall(full, "sync_budget", "5", "ns/good", json.dumps(good))
    with caplog.at_level(logging.WARNING):
        budgets = read_budgets(full.store)
    assert [(b.namespace, b.name, b.allowed) for b in budgets] == [("ns", "good", 1)]
    assert "ns/bad" in caplog.text


def test_a_preemptor_deleted_after_evicting_releases_its_room(full: Cache) -> None:
    """Failed on 0ae1dd3: the deleted preemptor's nomination held its room until the
    deadline (60 s), so a pod of lower priority could not take the room its victims freed;
    upstream's nominator forgets a deleted pod at once."""
    pre = make_pod("pre", "", cpu="2", mem="1Gi", priority=1000)
    full.run(sync_pod_pending(pre, "default-scheduler", "10"))
    full.run(nominations.nominate_pod(pre, "n1"))
    assert nominations.read_nomination(full.store, pre.uid) is not None
    full.run(sync_pod(pre, "11", present=False))
    assert nominations.read_nomination(full.store, pre.uid) is None
    assert nominations.read_nominated(full.store) == {}
    full.assume_pod(make_pod("low", "n1", cpu="2", mem="1Gi", priority=0), check_fit=True)
    assert full.pod_count() == 2


def test_a_stale_deletion_of_a_preemptor_keeps_its_nomination(full: Cache) -> None:
    """A deletion at or below the version applied is dropped, and drops nothing."""
    pre = make_pod("pre", "", cpu="2", mem="1Gi", priority=1000)
    full.run(sync_pod_pending(pre, "default-scheduler", "10"))
    full.run(nominations.nominate_pod(pre, "n1"))
    full.run(sync_pod(pre, "9", present=False))
    assert nominations.read_nomination(full.store, pre.uid) is not None


# -- the extender's preempt verb, through the real HTTP server ---------------------------------


def _pending(priority: object = 1000) -> dict[str, Any]:
    manifest = pod_manifest("pre", "", "2", "100Mi", namespace="default", uid="uid-pre")
    manifest["spec"]["priority"] = priority
    return {**manifest, "kind": "Pod"}


_MANY = {f"node-{i}": {"Pods": []} for i in range(10_000)}


@pytest.mark.parametrize(
    ("body", "raw"),
    [
        ({}, None),
        ({"NodeNameToMetaVictims": {"n1": {}}}, None),
        ({"Pod": [], "NodeNameToMetaVictims": {"n1": {}}}, None),
        ({"Pod": {"spec": "x"}, "NodeNameToMetaVictims": {"n1": {}}}, None),
        ({"Pod": _pending("high"), "NodeNameToMetaVictims": {"n1": {}}}, None),
        ({"Pod": _pending(2.5), "NodeNameToMetaVictims": {"n1": {}}}, None),
        ({"Pod": _pending(2**40), "NodeNameToMetaVictims": {"n1": {}}}, None),
        ({"Pod": _pending(), "NodeNameToMetaVictims": "n1"}, None),
        ({"Pod": _pending(), "NodeNameToVictims": {"n1": 1}, "NodeNameToMetaVictims": 3}, None),
        (None, b"[1, 2]"),
        (None, b'{"Pod": '),
        (None, b'{"Pod": {}, "NodeNameToMetaVictims": {"n1": Infinity}}'),
        (None, b"\xff\xfe"),
    ],
)
def test_the_preempt_verb_answers_malformed_args_with_a_clear_4xx_and_writes_nothing(
    full: Cache, body: Any, raw: bytes | None
) -> None:
    before = keyspace(full.client, f"{{{full.name}}}:*")
    with RunningExtender(Extender(full), "/scheduler") as server:
        status, answer = server.post("preempt", body, raw=raw)
    assert 400 <= status < 500, (status, answer)
    assert "Traceback" not in json.dumps(answer)
    assert keyspace(full.client, f"{{{full.name}}}:*") == before


def test_the_preempt_verb_drops_ten_thousand_unknown_nodes_and_writes_nothing(
    full: Cache,
) -> None:
    before = keyspace(full.client, f"{{{full.name}}}:*")
    meta = {**_MANY, "n1": {"Pods": []}}
    with RunningExtender(Extender(full), "/scheduler") as server:
        status, answer = server.post("preempt", {"Pod": _pending(), "NodeNameToMetaVictims": meta})
    assert status == 200
    assert list(answer["NodeNameToMetaVictims"]) == ["n1"]
    assert keyspace(full.client, f"{{{full.name}}}:*") == before


def test_a_node_full_of_lower_priority_nominations_takes_a_higher_priority_one(
    full: Cache,
) -> None:
    """Failed on 0ae1dd3: sixteen priority-0 nominations (which the new nominee clears, as
    upstream's prepareCandidate) refused a priority-1000 preemptor `nominations-full`."""
    for i in range(nominations.MAX_PER_NODE):
        low = make_pod(f"low{i}", "", cpu="1m", mem="1", priority=0)
        full.run(nominations.nominate_pod(low, "n1"))
    pre = make_pod("pre", "", cpu="2", mem="1Gi", priority=1000)
    full.run(nominations.nominate_pod(pre, "n1"))
    assert [p.uid for p in nominations.read_nominated(full.store)["n1"]] == [pre.uid]


def test_two_replicas_nominating_one_room_let_the_first_nominee_land(full: Cache) -> None:
    """Two replicas preempting for pods of equal priority from snapshots taken before either
    nomination both nominate n1, where the victims free room for one. Failed on 0ae1dd3: each
    nominee's claim counted the other's nomination, so neither landed until both lapsed (and
    neither preempts again while it holds one). Now the earlier nominee lands, the later one
    is refused (no room), and nothing is bound twice into one room."""
    now = time.time()
    first = make_pod("pre1", "", cpu="2", mem="1Gi", priority=1000)
    second = make_pod("pre2", "", cpu="2", mem="1Gi", priority=1000)
    full.run(nominations.nominate_pod(first, "n1", now=now))
    full.run(nominations.nominate_pod(second, "n1", now=now + 1))
    with pytest.raises(FitConflict):
        full.assume_pod(make_pod("pre2", "n1", cpu="2", mem="1Gi", priority=1000), check_fit=True)
    full.assume_pod(make_pod("pre1", "n1", cpu="2", mem="1Gi", priority=1000), check_fit=True)
    with pytest.raises(FitConflict):
        full.assume_pod(make_pod("pre2", "n1", cpu="2", mem="1Gi", priority=1000), check_fit=True)
    assert full.pod_count() == 2
    assert nominations.read_nomination(full.store, first.uid) is None


class _Api:
    """The API calls the PostFilter makes, recorded."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> None:
        self.deleted.append(f"{namespace}/{name}")

    def patch_namespaced_pod_status(self, *_: Any, **__: Any) -> None:
        return None


def test_a_preemptor_whose_nominated_node_died_preempts_again(cache: Cache) -> None:
    """Failed on 0ae1dd3: a preemptor nominated to a node since deleted kept "waiting for its
    room" there until its nomination lapsed (60 s), preempting nothing elsewhere; upstream's
    PodEligibleToPreemptOthers lets a pod whose nominated node is gone preempt again."""
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    cache.add_node(make_node("n2", cpu="2", mem="8Gi"))
    cache.add_pod(Pod.from_k8s(bound_pod("low", "2", 0, "2026-01-01T00:00:00Z", "n2")))
    pre = make_pod("pre", "", cpu="2", mem="1Gi", priority=1000)
    cache.run(nominations.nominate_pod(pre, "n1"))
    cache.remove_node("n1")
    api = _Api()
    preemption = Preemption(cache, api, "ref", budgets=list)  # type: ignore[arg-type]
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    decision = preemption.post_filter(pre, snapshot)
    assert decision.node == "n2"
    assert api.deleted == ["default/low"]
    assert nominations.read_nomination(cache.store, pre.uid) is not None
    assert nominations.read_nomination(cache.store, pre.uid)[0] == "n2"  # type: ignore[index]


def test_explain_json_of_a_preemptor_not_yet_claimed_shows_its_nomination(
    cache: Cache, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed on 0ae1dd3: text output showed the nomination, -o json answered "has no claim"
    and exit 1 for the same pod. Now the nomination goes to stderr, as a gang's wait does."""
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    pre = make_pod("pre", "", cpu="2", mem="1Gi", priority=1000)
    cache.run(nominations.nominate_pod(pre, "n1", victims=["default/low1"]))
    result = CliRunner().invoke(
        main, ["--cache", cache.name, "explain", "pod", "pre", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("nominated to node n1 (preemption) until ")
    assert "victims: default/low1" in result.stderr
