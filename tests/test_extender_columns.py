"""The extender's filter and prioritize on the snapshot columns (issue 34) answer exactly what the
per-node plugin code answers: over random clusters that change between calls (pods land, a
node is tainted, one leaves and one joins), for plain pods and for pods the columns cannot
judge alone (host ports, inter-pod rules), with unknown and repeated node names, before and
after pods with affinity join the cluster. On every backend."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from schedcache import Cache
from schedcache.extender import protocol
from schedcache.extender.protocol import FilterArgs
from schedcache.extender.service import UNKNOWN_NODE, Extender, scores
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod
from schedcache.model.values import Node, Pod
from schedcache.views import columns as columns_module
from schedcache.views.columns import columnar
from tests.factories import node_manifest, pod_manifest
from tests.test_columns import ANTI, PREFERRED, TAINTS, random_node, random_pod


def per_node(ext: Extender, args: FilterArgs) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The filter and prioritize answers as the extender gave them node by node before the
    columns, on the extender's snapshot as it stands."""
    snap = ext.snapshot
    cycle = Cycle(
        args.pod,
        list(snap.node_infos.values()),
        anti_holders=snap.have_pods_with_required_anti_affinity_list,
    )
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name in args.node_names:
        info = snap.node_infos.get(name)
        if info is None or info.node is None:
            unresolvable[name] = UNKNOWN_NODE
            continue
        result = filter_pod(args.pod, info, cycle)
        if not result.reasons:
            passed.append(name)
        elif result.unresolvable:
            unresolvable[name] = ", ".join(result.reasons)
        else:
            failed[name] = ", ".join(result.reasons)
    infos = [(name, snap.node_infos.get(name)) for name in args.node_names]
    return (
        protocol.filter_result(args, passed, failed, unresolvable),
        protocol.host_priorities(scores(args.pod, infos, cycle)),
    )


def wired(answer: dict[str, Any] | bytes) -> bytes:
    """A verb's answer as the server writes it (bytes: written already)."""
    return answer if isinstance(answer, bytes) else protocol.encode(answer)


TINY = {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}


def incoming(rng: random.Random, i: int) -> dict[str, Any]:
    """A pending pod's manifest: mostly plain (the columns judge it: requests, tolerations, a
    node selector, an image), some with host ports or inter-pod rules (the per-node code)."""
    name, uid = f"in{i}", f"uid-in{i}"
    cpu = rng.choice(["100m", "500m", "1", "1500m", "3"])
    memory = rng.choice(["128Mi", "1Gi", "2Gi", "6Gi"])
    kind = rng.random()
    if kind < 0.15:
        ports = [{"containerPort": 80, "hostPort": 80}]
        return pod_manifest(name, "", cpu, memory, uid=uid, ports=ports)
    if kind < 0.25:
        return pod_manifest(name, "", cpu, memory, uid=uid, labels={"app": "web"}, affinity=ANTI)
    manifest = pod_manifest(name, "", cpu, memory, uid=uid)
    spec = manifest["spec"]
    spec["containers"][0]["image"] = rng.choice(["app:1", "pause"])
    if rng.random() < 0.4:
        spec["tolerations"] = [{"key": rng.choice(TAINTS)["key"], "operator": "Exists"}]
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"disk": rng.choice(["ssd", "hdd"])}
    return manifest


def test_filter_and_prioritize_equal_the_per_node_code_over_random_clusters(cache: Cache) -> None:
    rng = random.Random(34)
    nodes = [random_node(rng, i) for i in range(40)]
    for node in nodes:
        cache.add_node(node)
    for i in range(40):
        cache.add_pod(random_pod(rng, f"p{i}", rng.choice(nodes).name))
    ext = Extender(cache)
    judged = {"columnar": 0, "per-node": 0, "failed": 0, "passed": 0, "all passed": 0}
    for round_ in range(6):
        if round_ == 2:  # a node tainted, one gone, one new
            tainted = node_manifest(nodes[5].name, "4", "8Gi", labels={"zone": "z2"})
            tainted["spec"] = {"taints": [TAINTS[0], TAINTS[1]]}
            cache.update_node(nodes[5], Node.from_k8s(tainted))
            cache.remove_node(nodes[0])
            cache.add_node(random_node(rng, 99))
        if round_ == 4:  # pods with inter-pod rules in the cluster: the per-node code decides
            db = pod_manifest("db", nodes[7].name, "100m", "128Mi", labels={"app": "db"})
            db["spec"]["affinity"] = PREFERRED
            cache.add_pod(Pod.from_k8s(db))
        if round_ == 5:
            web = pod_manifest("web", nodes[8].name, "100m", "128Mi", labels={"app": "web"})
            web["spec"]["affinity"] = ANTI
            cache.add_pod(Pod.from_k8s(web))
        for i in range(12):
            manifest = incoming(rng, round_ * 100 + i)
            names = [n.name for n in rng.sample(nodes, 30)] + ["n999", nodes[1].name]
            args = protocol.filter_args({"Pod": manifest, "NodeNames": names})
            filtered, prioritized = ext.filter(args), ext.prioritize(args)
            expected_filter, expected_priorities = per_node(ext, args)
            assert json.dumps(filtered) == json.dumps(expected_filter)
            assert json.dumps(prioritized) == json.dumps(expected_priorities)
            # As the wire writes them (protocol.encode's own writer for the priorities, and
            # the server's: prioritize_answer, from the columns' rows when it can).
            wire = json.dumps(expected_priorities, separators=(",", ":")).encode()
            assert protocol.encode(prioritized) == wire
            assert ext.prioritize_answer(args) == wire
            assert wired(ext.filter_answer(args)) == protocol.encode(expected_filter)
            # A pod of 1m that tolerates every taint, then again on the nodes it passed, twice
            # over: every one passes (the columns' answer without a verdict per name).
            small = {
                **manifest,
                "spec": {"containers": [TINY], "tolerations": [{"operator": "Exists"}]},
            }
            known = [name for name in names if name != "n999"]
            for _ in range(2):
                again = protocol.filter_args({"Pod": small, "NodeNames": known})
                answers = (ext.filter(again), ext.prioritize(again))
                expected = tuple(map(json.dumps, per_node(ext, again)))
                assert tuple(map(json.dumps, answers)) == expected
                wire = json.dumps(per_node(ext, again)[1], separators=(",", ":")).encode()
                assert ext.prioritize_answer(again) == wire  # (the names twice, the second)
                assert wired(ext.filter_answer(again)) == protocol.encode(answers[0])
                known = answers[0]["NodeNames"] * 2
            judged["all passed"] += bool(known) and answers[0]["NodeNames"] == again.node_names
            judged["columnar" if columnar(args.pod) else "per-node"] += 1
            judged["failed"] += len(filtered["FailedNodes"]) + len(
                filtered["FailedAndUnresolvableNodes"]
            )
            judged["passed"] += len(filtered["NodeNames"])
            # The cluster moves on: a pod lands on a node that passed.
            if filtered["NodeNames"] and rng.random() < 0.5:
                cache.add_pod(random_pod(rng, f"q{round_}-{i}", filtered["NodeNames"][0]))
    # Both paths, and both verdicts, were compared.
    assert judged["columnar"] > 40 and judged["per-node"] > 5
    assert judged["failed"] > 100 and judged["passed"] > 100 and judged["all passed"] > 10


def test_prioritize_answers_keep_only_names_a_node_can_have(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer's writer keeps each host's JSON start for the next call, but only of names a
    node can have (a DNS subdomain): a stranger's prioritize of megabyte-long names, a new one
    each call, is answered exactly as ``json.dumps`` writes it and keeps nothing (before, each
    call kept its name and its escaped copy: ~21 MiB a call, past the memory ceiling in ~40),
    and one call of more names than it keeps leaves it at its bound."""
    monkeypatch.setattr(protocol, "_HOSTS", {})  # (earlier tests may have filled it)
    long_name = "\u00e9" * 100_000
    answer = protocol.host_priorities({long_name: 3, "node-1.zone-a": 7})
    kept_before = dict(protocol._HOSTS)
    written = protocol.encode(answer)
    assert written == json.dumps(answer, separators=(",", ":")).encode()
    assert long_name not in protocol._HOSTS
    assert set(protocol._HOSTS) - set(kept_before) <= {"node-1.zone-a"}
    assert "node-1.zone-a" in protocol._HOSTS
    assert max(map(len, protocol._HOSTS)) <= 253
    many = protocol.host_priorities(
        {f"node-{i:09}": i % 101 for i in range(protocol.MAX_HOSTS + 5)}
    )
    assert protocol.encode(many) == json.dumps(many, separators=(",", ":")).encode()
    assert len(protocol._HOSTS) <= protocol.MAX_HOSTS  # one call of many names: still bounded


def test_a_full_set_of_host_starts_is_cleared_at_most_once_a_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cluster of more nodes than the writer keeps: once full, its kept starts stay for
    ``HOSTS_KEPT_FOR`` seconds (before, every call of such a cluster cleared and refilled them),
    then make room for the names of the calls after; every answer is ``json.dumps``'s."""
    clock = [1_000.0]
    monkeypatch.setattr(protocol.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(protocol, "_HOSTS", {})
    monkeypatch.setattr(protocol, "_HOSTS_FULL", [0.0])
    first = protocol.host_priorities({f"a-{i}": i % 11 for i in range(protocol.MAX_HOSTS)})
    second = protocol.host_priorities({f"b-{i}": i % 11 for i in range(100)})
    for answer in (first, second, first):
        assert protocol.encode(answer) == json.dumps(answer, separators=(",", ":")).encode()
        assert set(protocol._HOSTS) == {item["Host"] for item in first}  # full, kept
    clock[0] += protocol.HOSTS_KEPT_FOR
    assert protocol.encode(second) == json.dumps(second, separators=(",", ":")).encode()
    assert set(protocol._HOSTS) == {item["Host"] for item in second}  # cleared once, refilled


def test_names_sent_again_answer_as_the_per_node_code_and_what_is_kept_is_bounded(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names sent again (prioritize after its filter, a sample that recurs) answer as the
    per-node code: with a caller's list changed in place after a call, after the node list
    changed, with lists that join alike when a name holds a NUL; at most KEPT_LISTS lists of
    at most KEPT_NAMES ASCII names are kept."""
    monkeypatch.setattr(columns_module, "KEPT_LISTS", 3)
    for i in range(4):
        cache.add_node(Node.from_k8s(node_manifest(f"n{i}", f"{i + 1}", "8Gi")))
    ext = Extender(cache)
    manifest = pod_manifest("p", "", "1500m", "1Gi", uid="uid-p")

    def judged(names: list[str]) -> FilterArgs:
        args = protocol.filter_args({"Pod": manifest, "NodeNames": names})
        for _ in range(2):
            answers = (ext.filter(args), ext.prioritize(args))
            expected = per_node(ext, args)
            assert tuple(map(json.dumps, answers)) == tuple(map(json.dumps, expected))
            wire = json.dumps(expected[1], separators=(",", ":")).encode()
            assert ext.prioritize_answer(args) == wire
            assert wired(ext.filter_answer(args)) == protocol.encode(expected[0])
        return args

    args = judged(["n0", "n1", "n2", "n9"])
    args.node_names[:2] = ["n3", "n2"]  # the same list object, other names
    assert ext.filter(args) == per_node(ext, args)[0]
    cache.remove_node(Node.from_k8s(node_manifest("n2", "3", "8Gi")))
    cache.add_node(Node.from_k8s(node_manifest("n5", "8", "8Gi")))
    judged(["n0", "n1", "n2", "n9"])  # n2 gone, n5 new: the rows were rebuilt
    judged(["n5", "n3", "n2", "n9"])
    assert ext.filter(args) == per_node(ext, args)[0]
    for names in (["n0\0n1", "n3"], ["n0", "n1\0n3"], ["n0", "n1", "n3"]):
        judged(names)  # the first two join alike: neither is kept
    judged(["n0", "n\u00f6", "n3"])  # a name no node can have: not kept
    assert list(ext.columns._named)[-1] == "n0\0n1\0n3"
    for i in range(5):
        judged([f"n{i % 4}", "n5", f"x{i}"])
    assert len(ext.columns._named) == 3
    many = [f"x{i}" for i in range(columns_module.KEPT_NAMES + 1)]
    kept = dict(ext.columns._named)
    judged([*many, "n5"])
    assert list(ext.columns._named) == list(kept)


def test_lists_longer_than_one_lookup_pass_are_kept_and_scored_on_the_arrays(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-scheduler naming every node of a 5,000-node cluster (percentageOfNodesToScore 100)
    sends more names than one lookup pass takes: their rows are looked up in passes, kept, and
    prioritize writes their scores on the arrays, answering as the per-node code; a list past
    KEPT_NAMES is neither kept nor scored on the arrays, and answers alike."""
    monkeypatch.setattr(columns_module, "NAMES_AT_ONCE", 2)
    monkeypatch.setattr(columns_module, "KEPT_NAMES", 5)
    for i in range(7):
        cache.add_node(Node.from_k8s(node_manifest(f"n{i}", f"{i + 1}", "8Gi")))
    ext = Extender(cache)
    manifest = pod_manifest("p", "", "1500m", "1Gi", uid="uid-p")
    for count, on_arrays in ((5, True), (6, False)):
        names = [f"n{i}" for i in reversed(range(count))]
        args = protocol.filter_args({"Pod": manifest, "NodeNames": names})
        answers = (wired(ext.filter_answer(args)), ext.prioritize_answer(args))
        assert answers == tuple(map(protocol.encode, per_node(ext, args)))
        assert (ext.columns.score_rows(args.pod, ext.snapshot, names) is not None) is on_arrays
        assert ("\0".join(names) in ext.columns._named) is on_arrays


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the columns' int64 sums wrap: below)
def test_prioritize_of_totals_past_what_int64_scales_answers_as_the_per_node_code(
    cache: Cache,
) -> None:
    """(Found in review: a pod of int64's most millicores on nodes its fellows overcommit
    gave totals whose scaling on int64 arrays wrapped, other scores than Python's.)"""
    for i, (allocatable, requested) in enumerate([(8, 2208), (6, 3085), (31, 363), (32, 520)]):
        cache.add_node(Node.from_k8s(node_manifest(f"t{i}", f"{allocatable}m", "8Gi")))
        placed = pod_manifest(f"u{i}", f"t{i}", f"{requested}m", "1Gi", uid=f"uid-u{i}")
        cache.add_pod(Pod.from_k8s(placed))
    huge = pod_manifest("huge", "", "9223372036854775807m", "1Gi", uid="uid-huge")
    ext = Extender(cache)
    for pair in (["t0", "t1"], ["t0", "t2"], ["t1", "t3"]):
        args = protocol.filter_args({"Pod": huge, "NodeNames": pair})
        assert ext.prioritize_answer(args) == protocol.encode_scores(ext.prioritize_scores(args))


@pytest.mark.parametrize(
    "cpu", ["9223372036854775807m", "9223372036854775", "9223372036854775000m"]
)
def test_a_pod_of_int64s_most_cpu_is_judged_as_the_per_node_code(cache: Cache, cpu: str) -> None:
    """(Found in review: the columns added a pod's request to int64 sums that wrapped, so a
    pod of int64's most millicores passed filter on a node with pods, where the per-node
    code says Insufficient cpu, and prioritize could score outside 0-10.)"""
    for i, (allocatable, requested) in enumerate([(8, 2208), (6000, 3085), (31, 0)]):
        cache.add_node(Node.from_k8s(node_manifest(f"t{i}", f"{allocatable}m", "8Gi")))
        if requested:
            placed = pod_manifest(f"u{i}", f"t{i}", f"{requested}m", "1Gi", uid=f"uid-u{i}")
            cache.add_pod(Pod.from_k8s(placed))
    huge = pod_manifest("huge", "", cpu, "1Gi", uid="uid-huge")
    ext = Extender(cache)
    args = protocol.filter_args({"Pod": huge, "NodeNames": ["t0", "t1", "t2"]})
    assert columnar(args.pod)
    filtered, prioritized = ext.filter(args), ext.prioritize(args)  # (caught up)
    expected_filter, expected_priorities = per_node(ext, args)
    assert expected_filter["NodeNames"] == []  # no node has that room
    assert json.dumps(filtered) == json.dumps(expected_filter)
    assert wired(ext.filter_answer(args)) == protocol.encode(expected_filter)
    assert json.dumps(prioritized) == json.dumps(expected_priorities)
    assert ext.prioritize_answer(args) == protocol.encode(expected_priorities)
    assert all(0 <= item["Score"] <= 10 for item in prioritized)
    # The reference scheduler's placement (the same columns) finds no node either.
    ext.columns.refresh(ext.snapshot)
    assert not ext.columns.fits(args.pod).any()


def test_nodes_of_exabytes_score_as_the_per_node_code(cache: Cache) -> None:
    """A room left past int64's most / 100 (an allocatable of exabytes) is scored exactly, as
    Python's integers score it, not from a wrapped hundredfold."""
    for i, memory in enumerate(["7Ei", "5Ei", "64Gi"]):
        cache.add_node(Node.from_k8s(node_manifest(f"e{i}", "8", memory)))
        placed = pod_manifest(f"u{i}", f"e{i}", "100m", f"{i + 1}Gi", uid=f"uid-u{i}")
        cache.add_pod(Pod.from_k8s(placed))
    ext = Extender(cache)
    pod = pod_manifest("p", "", "500m", "3Ei", uid="uid-p")
    args = protocol.filter_args({"Pod": pod, "NodeNames": ["e0", "e1", "e2"]})
    filtered, prioritized = ext.filter(args), ext.prioritize(args)
    expected_filter, expected_priorities = per_node(ext, args)
    assert filtered["NodeNames"] == expected_filter["NodeNames"] == ["e0", "e1"]
    assert json.dumps(prioritized) == json.dumps(expected_priorities)
    assert ext.prioritize_answer(args) == protocol.encode(expected_priorities)
    assert len({item["Score"] for item in prioritized}) > 1  # (the exabytes told apart)
