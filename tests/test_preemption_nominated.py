"""The cache's nominations in preemption's dry run (upstream's addNominatedPods) and the
chosen node's lower-priority nominations cleared (upstream's prepareCandidate): issue 41
follow-up, item 4. Every backend."""

from __future__ import annotations

from schedcache import Cache
from schedcache.model.plugins.preemption import preempt
from schedcache.model.values import Pod
from schedcache.store import nominations
from schedcache.views.snapshot import Snapshot
from tests.factories import make_node, make_pod
from tests.test_preemption import bound_pod


def test_the_dry_run_counts_nominations_of_higher_priority(cache: Cache) -> None:
    """n1 (4 cpu) holds two priority-0 pods of 2 cpu, n2 two of priority 10. A 2-cpu
    priority-1000 pod evicts one pod of n1; with a priority-2000 pod nominated to n1 (2 cpu
    held) it must evict both there (upstream's victims). Before: one, and the preemptor's claim
    was then refused (the nomination held the room)."""
    for name in ("n1", "n2"):
        cache.add_node(make_node(name, cpu="4", mem="8Gi"))
    for i, started in enumerate(["00:01", "00:02"]):
        cache.add_pod(Pod.from_k8s(bound_pod(f"a{i}", "2", 0, f"2026-01-01T{started}:00Z")))
        cache.add_pod(Pod.from_k8s(bound_pod(f"b{i}", "2", 10, f"2026-01-01T{started}:00Z", "n2")))
    pre = make_pod("pre", "", cpu="2", mem="100Mi", priority=1000)
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    alone = preempt(pre, snapshot.node_info_list)
    assert (alone.node, [v.name for v in alone.victims]) == ("n1", ["a1"])
    vip = make_pod("vip", "", cpu="2", mem="100Mi", priority=2000)
    cache.run(nominations.nominate_pod(vip, "n1"))
    held = nominations.read_nominated(cache.store)
    assert [(p.uid, p.priority, p.requests.milli_cpu) for p in held["n1"]] == [
        (vip.uid, 2000, 2000)
    ]
    counted = preempt(pre, snapshot.node_info_list, nominated=held)
    assert (counted.node, [v.name for v in counted.victims]) == ("n1", ["a0", "a1"])
    # a nomination of lower priority holds nothing against the preemptor
    low = make_pod("low", "", cpu="2", mem="100Mi", priority=5)
    cache.run(nominations.nominate_pod(low, "n2"))
    again = preempt(pre, snapshot.node_info_list, nominated=nominations.read_nominated(cache.store))
    assert [v.name for v in again.victims] == ["a0", "a1"]


def test_a_nomination_clears_the_nodes_lower_priority_nominations(cache: Cache) -> None:
    """Before: the priority-5 nomination stayed, holding room the preemptor's victims freed."""
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    low = make_pod("low", "", cpu="1", mem="100Mi", priority=5)
    same = make_pod("same", "", cpu="1", mem="100Mi", priority=1000)
    vip = make_pod("vip", "", cpu="1", mem="100Mi", priority=2000)
    for pod in (vip, same, low):  # each later one of lower or equal priority: all kept
        cache.run(nominations.nominate_pod(pod, "n1"))
    assert all(nominations.read_nomination(cache.store, p.uid) for p in (vip, same, low))
    cache.run(
        nominations.nominate_pod(make_pod("pre", "", cpu="1", mem="1Mi", priority=1000), "n1")
    )
    assert nominations.read_nomination(cache.store, low.uid) is None
    assert nominations.read_nomination(cache.store, same.uid) is not None
    assert nominations.read_nomination(cache.store, vip.uid) is not None
    assert cache.client.hget(cache.keys.nominations("n1"), low.uid) is None
