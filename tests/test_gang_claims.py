"""Gang claims (issue 41, item 4): a pod group's members claimed all or nothing in one Lua call
(``sc_gang_claim``, ``Cache.assume_gang``). Every member is checked as a fit-checked single
claim is, counting the members before it on the same node; one refused, nothing is written.
Placed, the members are N single claims: finish_binding, forget, expiry, confirmation, replay
and verify work per member."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from schedcache import Cache, Snapshot
from schedcache.errors import FitConflict, PodAlreadyExists, ValidationError
from schedcache.model.values import Pod
from schedcache.store.gang import MAX_GANG_BYTES, MAX_GANG_MEMBERS, gang_claim
from schedcache.store.library import function_name
from schedcache.store.metrics import GANG_CLAIMS
from tests.factories import keyspace, make_node, make_pod, pod_manifest, port

# The contract: every test here runs on the sync Cache and on AsyncCache (tests/apis.py).
BOTH_APIS = True

HOST = "kubernetes.io/hostname"
GROUP = "default/train"


def node(name: str, cpu: str = "2", pods: str = "110") -> Any:
    return make_node(name, cpu, "8Gi", pods=pods, labels={HOST: name})


def member(name: str, node_name: str, cpu: str = "1", **kwargs: Any) -> Pod:
    labels = {"scheduling.x-k8s.io/pod-group": "train", **kwargs.pop("labels", {})}
    return make_pod(name, node_name, cpu, "1Mi", labels=labels, namespace="default", **kwargs)


def refused_unchanged(cache: Cache, pods: list[Pod], error: type[Exception], match: str) -> Any:
    """The gang claim of ``pods`` raises ``error`` matching ``match``; no key changed."""
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(error, match=match) as info:
        cache.assume_gang(pods, GROUP)
    assert keyspace(cache.client, cache.keys.pattern) == before
    return info.value


def test_a_gang_that_fits_is_placed_whole_as_single_claims(cache: Cache) -> None:
    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    pods = [member("w0", "n1"), member("w1", "n1"), member("w2", "n2")]
    placed = GANG_CLAIMS.labels("placed")._value.get()
    assert cache.assume_gang(pods, GROUP) == ["n1", "n1", "n2"]
    assert GANG_CLAIMS.labels("placed")._value.get() == placed + 1
    assert all(cache.is_assumed_pod(pod) for pod in pods)
    assumed = [e for e in cache.events() if e.type == "PodAssumed"]
    assert [(e.data["uid"], e.data["node_name"]) for e in assumed] == [
        ("w0", "n1"),
        ("w1", "n1"),
        ("w2", "n2"),
    ]
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert snap.node_infos["n1"].requested.milli_cpu == 2000
    assert cache.verify() == []


@pytest.mark.parametrize(
    ("pods", "reasons"),
    [
        # Each fits n1 alone; the second counts the first.
        ([("w0", "n1", "1500m"), ("w1", "n1", "1")], ("cpu",)),
        (
            [("w0", "n2", "1"), ("w1", "n1", "100m"), ("w2", "n1", "100m"), ("w3", "n1", "1m")],
            ("pods",),
        ),
    ],
    ids=["cpu", "pod count"],
)
def test_a_member_refused_for_the_members_before_it_writes_nothing(
    cache: Cache, pods: list[tuple[str, str, str]], reasons: tuple[str, ...]
) -> None:
    cache.add_node(node("n1", pods="3"))
    cache.add_node(node("n2"))
    cache.add_pod(make_pod("other", "n1", "100m", "1Mi"))
    gang = [member(name, where, cpu) for name, where, cpu in pods]
    refused = GANG_CLAIMS.labels("refused")._value.get()
    conflict = refused_unchanged(
        cache, gang, FitConflict, rf"pod group {GROUP} member pod default/{gang[-1].name} "
    )
    assert conflict.node == "n1" and conflict.reasons == reasons
    assert GANG_CLAIMS.labels("refused")._value.get() == refused + 1


def test_members_asking_one_host_port_conflict_on_a_node_not_across_two(cache: Cache) -> None:
    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    same = [member("w0", "n1", ports=[port(8080)]), member("w1", "n1", ports=[port(8080)])]
    conflict = refused_unchanged(cache, same, FitConflict, "port:TCP/8080")
    assert conflict.reasons == ("port:TCP/8080",)
    apart = [member("w0", "n1", ports=[port(8080)]), member("w1", "n2", ports=[port(8080)])]
    assert cache.assume_gang(apart, GROUP) == ["n1", "n2"]


def test_a_member_the_live_cache_refuses_by_rule_refuses_the_gang(cache: Cache) -> None:
    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    snap = Snapshot()
    cache.update_snapshot(snap)  # decided before the repelling pod came
    repels = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"role": "worker"}}, "topologyKey": HOST}
            ]
        }
    }
    cache.add_pod(make_pod("lonely", "n2", "100m", "1Mi", affinity=repels))
    gang = [
        member("w0", "n1", labels={"role": "worker"}),
        member("w1", "n2", labels={"role": "worker"}),
    ]
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(FitConflict, match="member pod default/w1") as info:
        cache.assume_gang(gang, GROUP, snapshot=snap)
    assert info.value.reasons == ("existing-anti-affinity",)
    assert keyspace(cache.client, cache.keys.pattern) == before


# -- rules between members of the gang (judged before sending: views/gang.py) ------------------

APART = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"role": "worker"}}, "topologyKey": HOST}
        ]
    }
}
TOGETHER = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"role": "ps"}}, "topologyKey": HOST}
        ]
    }
}
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": HOST,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"role": "worker"}},
    }
]


def worker(name: str, node_name: str, **kwargs: Any) -> Pod:
    return member(name, node_name, "100m", labels={"role": "worker"}, **kwargs)


def spread_worker(name: str, node_name: str) -> Pod:
    """A worker spread by host among the workers (DoNotSchedule, max skew 1)."""
    labels = {"scheduling.x-k8s.io/pod-group": "train", "role": "worker"}
    manifest = pod_manifest(name, node_name, "100m", "1Mi", labels=labels, namespace="default")
    manifest["spec"]["topologySpreadConstraints"] = SPREAD
    return Pod.from_k8s(manifest)


@pytest.mark.parametrize(
    ("gang", "refused", "rule"),
    [
        # w1's anti-affinity toward w0, placed before it on n1.
        (
            lambda: [worker("w0", "n1"), worker("w1", "n1", affinity=APART)],
            "w1",
            "pod-anti-affinity",
        ),
        # w0's anti-affinity toward w1, which comes after it on n1 (existing pods' terms).
        (
            lambda: [worker("w0", "n1", affinity=APART), worker("w1", "n1")],
            "w1",
            "existing-anti-affinity",
        ),
        # w0 needs a "ps" pod on its node; the gang's ps member is on n2.
        (
            lambda: [
                member("ps", "n2", "100m", labels={"role": "ps"}),
                worker("w0", "n1", affinity=TOGETHER),
            ],
            "w0",
            "pod-affinity",
        ),
    ],
    ids=["own-anti-affinity", "earlier-members-anti-affinity", "affinity"],
)
def test_a_member_breaking_a_rule_toward_earlier_members_refuses_the_gang(
    cache: Cache, gang: Any, refused: str, rule: str
) -> None:
    """Before: Redis judged each member against the live cache alone, where the other members
    are not yet: the gang was placed with its own rules broken."""
    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    error = refused_unchanged(cache, gang(), FitConflict, f"member pod default/{refused} ")
    assert error.reasons == (rule,)
    assert str(error).endswith("counting the 1 members before it")


def test_members_apart_or_together_as_their_rules_ask_are_placed(cache: Cache) -> None:
    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    gang = [
        worker("w0", "n1", affinity=APART),
        worker("w1", "n2", affinity=APART),
        member("ps", "n2", "100m", labels={"role": "ps"}),
        member("w2", "n2", "100m", affinity=TOGETHER),
    ]
    assert cache.assume_gang(gang, GROUP) == ["n1", "n2", "n2", "n2"]
    assert cache.verify() == []


def test_a_spread_among_members_counts_the_members_before_each(cache: Cache) -> None:
    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    lopsided = [spread_worker(f"w{i}", n) for i, n in enumerate(["n1", "n1", "n2"])]
    error = refused_unchanged(cache, lopsided, FitConflict, "member pod default/w1 ")
    assert error.reasons == ("topology-spread",)
    even = [spread_worker(f"w{i}", n) for i, n in enumerate(["n1", "n2", "n1", "n2"])]
    assert cache.assume_gang(even, GROUP) == ["n1", "n2", "n1", "n2"]


def test_a_member_already_claimed_or_on_a_missing_node_refuses_the_gang(cache: Cache) -> None:
    cache.add_node(node("n1"))
    cache.assume_pod(member("w1", "n1"), check_fit=True)
    refused_unchanged(
        cache,
        [member("w0", "n1", "100m"), member("w1", "n1", "100m")],
        PodAlreadyExists,
        r"member pod default/w1 \(uid w1\) is already assumed on node n1",
    )
    conflict = refused_unchanged(
        cache, [member("w0", "n1", "100m"), member("w2", "gone", "100m")], FitConflict, "gone"
    )
    assert conflict.reasons == ("node-missing",)


def test_placed_members_live_on_as_single_claims(cache: Cache) -> None:
    cache.add_node(node("n1"))
    pods = [member("w0", "n1", "500m"), member("w1", "n1", "500m"), member("w2", "n1", "500m")]
    cache.assume_gang(pods, GROUP)
    cache.finish_binding(pods[0], now=1000.0)
    cache.forget_pod(pods[1])
    cache.add_pod(pods[2])
    assert cache.cleanup_assumed_pods(now=1000.0 + cache.ttl + 1) == ["w0"]
    assert cache.pod_state(pods[2]) == "added" and cache.pod_count() == 1
    assert cache.verify() == []


def test_a_gang_at_the_member_cap_is_placed(cache: Cache) -> None:
    cache.add_node(node("n1", cpu="300", pods="300"))
    pods = [member(f"w{i}", "n1", "1") for i in range(MAX_GANG_MEMBERS)]
    cache.assume_gang(pods, GROUP)
    assert cache.pod_count() == MAX_GANG_MEMBERS


def test_a_gang_over_the_member_cap_is_refused_whole_naming_group_and_cap(cache: Cache) -> None:
    """Never claimed in parts: all or nothing holds for a gang one call cannot carry."""
    cache.add_node(node("n1", cpu="300", pods="300"))
    pods = [member(f"w{i}", "n1", "1") for i in range(MAX_GANG_MEMBERS + 1)]
    refused_unchanged(
        cache, pods, ValidationError, f"pod group {GROUP}: members: 257 members: 1 to 256"
    )


def test_more_members_than_the_cap_are_refused_before_sending(cache: Cache) -> None:
    pods = [member(f"w{i}", "n1") for i in range(MAX_GANG_MEMBERS + 1)]
    with pytest.raises(ValidationError, match=f"pod group {GROUP}: members"):
        gang_claim(GROUP, [(pod, "", "") for pod in pods])
    w0 = member("w0", "n1")
    with pytest.raises(ValidationError, match="listed twice"):
        gang_claim(GROUP, [(w0, "", ""), (w0, "", "")])


# -- the Lua call's own checks: malformed -> BADARG, nothing written -------------------------------


def raw_member(name: str, node_name: str = "n1") -> list[Any]:
    """One member's arguments as store/gang.py sends them."""
    command = gang_claim(GROUP, [(member(name, node_name, "100m"), "", "")])
    return list(command.args[5:])


def fcall_gang(cache: Cache, *args: Any) -> Any:
    name = function_name("gang_claim")
    return cache.client.fcall(name, 1, cache.keys.prefix, "r", "", *args)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["0", "", "", "", "0"], "BADARG members"),
        (["0", "", "", "", str(MAX_GANG_MEMBERS + 1)], "BADARG members"),
        (["0", "", "", "", "x"], "BADARG members"),
        (["0", "", "", "", "2", *raw_member("a")], "BADARG argc"),
        (["0", "", "", "", "2", *raw_member("a"), *raw_member("a")], "BADARG duplicate a"),
        (["-1", "", "", "", "1", *raw_member("a")], "BADARG lease"),
        (["0", "", "", "1-x", "1", *raw_member("a")], "BADARG seen"),
        (["0", "x", "", "", "1", *raw_member("a")], "BADARG reads"),
        (["0", "", "", "", "2", *raw_member("a"), "", "n1", b"\x81", "", "", ""], "BADARG uid"),
        (["0", "", "", "", "1", "a", "n1", b"not msgpack", "", "", ""], "BADARG blob a"),
        (
            ["0", "", "", "", "1", "a", "n1", b"x" * (MAX_GANG_BYTES + 1), "", "", ""],
            "BADARG bytes",
        ),
    ],
    ids=[
        "no members",
        "over the cap",
        "count",
        "argc",
        "duplicate",
        "lease",
        "seen",
        "since",
        "second member's uid",
        "blob",
        "bytes",
    ],
)
def test_malformed_arguments_are_refused_and_write_nothing(
    cache: Cache, args: list[Any], code: str
) -> None:
    cache.add_node(node("n1"))
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=code):
        fcall_gang(cache, *args)
    assert keyspace(cache.client, cache.keys.pattern) == before
