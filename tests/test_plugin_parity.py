"""The extender answers from the plugin registry, the same code the reference scheduler,
explain and what-if run: on one snapshot of the cache, its filter passes exactly the nodes
``registry.filter_pod`` passes (with the same reasons), and its prioritize ranks as
``registry.score_nodes`` does. On every backend, with inter-pod rules in play."""

from __future__ import annotations

from typing import Any

from schedcache import Cache, Snapshot
from schedcache.extender.protocol import FilterArgs
from schedcache.extender.service import Extender
from schedcache.model.plugins.cycle import Cycle
from schedcache.model.plugins.registry import filter_pod, score_nodes
from tests.factories import make_node, make_pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def term(key: str, app: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def test_extender_filter_and_prioritize_answer_from_the_registry(cache: Cache) -> None:
    for i in range(6):
        name = f"n{i}"
        cache.add_node(make_node(name, "4", "8Gi", labels={HOST: name, ZONE: f"z{i % 3}"}))
    anti = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(HOST, "web")]}
    }
    cache.add_pod(make_pod("web-0", "n0", "1", "1Gi", labels={"app": "web"}, affinity=anti))
    cache.add_pod(make_pod("db-0", "n4", "2", "1Gi", labels={"app": "db"}))
    guard = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(ZONE, "web")]}
    }
    cache.add_pod(make_pod("guard", "n2", "100m", "1Gi", labels={"app": "guard"}, affinity=guard))
    preferred = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": term(ZONE, "db")}
            ]
        },
        **anti,
    }
    pod = make_pod("web-1", "", "500m", "1Gi", labels={"app": "web"}, affinity=preferred)
    names = [f"n{i}" for i in range(6)] + ["gone"]
    args = FilterArgs(pod, names, False, [])

    extender = Extender(cache)
    answer = extender.filter(args)
    ranked = {entry["Host"]: entry["Score"] for entry in extender.prioritize(args)}

    snap = Snapshot()
    cache.update_snapshot(snap)
    cycle = Cycle(pod, list(snap.node_infos.values()))
    verdicts = {n: filter_pod(pod, snap.node_infos[n], cycle) for n in names if n != "gone"}
    assert answer["NodeNames"] == [n for n, v in verdicts.items() if v.fits]
    failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert {n: failed[n] for n in failed if n != "gone"} == {
        n: ", ".join(v.reasons) for n, v in verdicts.items() if not v.fits
    }
    # n0 holds an anti-affine web pod; z2 (n2, n5) is guarded: the rules, not resources, decide.
    assert set(failed) == {"n0", "n2", "n5", "gone"}
    totals = score_nodes(pod, [snap.node_infos[n] for n in names if n != "gone"], cycle)
    best = max(totals.values())
    assert ranked == {**{n: 10 * t // best for n, t in totals.items()}, "gone": 0}
    assert max(ranked, key=lambda n: ranked[n]) == "n1"  # zone z1 holds db: preferred
