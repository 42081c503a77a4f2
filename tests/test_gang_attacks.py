"""Issue 41's gang claims, nominations, PodGroups and the timed claim tried as a stranger
would (branch rev41g): a gang against a nominated room, a nominee claiming through the gang
and the timed claim, and raw calls with malformed arguments answering BADARG with nothing
written. Every backend (fakeredis, Redis, Redis Cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.errors import FitConflict
from schedcache.model.values import Pod
from schedcache.ops.gangwaits import GangWaits
from schedcache.store import nominations
from schedcache.store.library import function_name
from tests.apiserver import FakeApiServer
from tests.factories import keyspace, make_node, make_pod
from tests.scheduling import eventually, fed_scheduler, node

GROUP = "default/train"


def member(name: str, node_name: str, cpu: str, priority: int = 0) -> Pod:
    labels = {"scheduling.x-k8s.io/pod-group": "train"}
    return make_pod(
        name, node_name, cpu, "1Mi", labels=labels, namespace="default", priority=priority
    )


def nominate(cache: Cache, pod: Pod, node_name: str) -> Any:
    return cache.run(nominations.nominate_pod(pod, node_name))


@pytest.fixture
def held(cache: Cache) -> Cache:
    """Node n1: 6 cpu, 2 taken by a bound pod, 2 held for the nominee "pre" (priority 1000):
    2 cpu left for anyone else."""
    cache.add_node(make_node("n1", cpu="6", mem="8Gi"))
    cache.add_pod(make_pod("bound", "n1", cpu="2", mem="1Gi"))
    nominate(cache, make_pod("pre", "", cpu="2", mem="1Mi", priority=1000), "n1")
    return cache


def test_a_gang_whose_members_together_take_a_nominated_room_is_refused(held: Cache) -> None:
    """Each member alone fits beside the held room; the two together take half of it. Failed
    on main (3c54cba): the nomination check ignored the members before each on the node, and
    the gang landed on the preemptor's room."""
    before = keyspace(held.client, held.keys.pattern)
    with pytest.raises(FitConflict) as refused:
        held.assume_gang([member("w0", "n1", "2"), member("w1", "n1", "2")], GROUP)
    assert refused.value.reasons == ("nominated",)
    assert keyspace(held.client, held.keys.pattern) == before
    # one member alone fits beside the held room
    assert held.assume_gang([member("w0", "n1", "2")], GROUP) == ["n1"]


def test_gang_members_together_cannot_take_a_nominated_pod_slot(cache: Cache) -> None:
    """Pod slots as room: 4 pods, 1 bound, 1 held; two members fill the rest, three do not."""
    cache.add_node(make_node("n1", cpu="8", mem="8Gi", pods="4"))
    cache.add_pod(make_pod("bound", "n1", cpu="1", mem="1Mi"))
    nominate(cache, make_pod("pre", "", cpu="1", mem="1Mi", priority=1000), "n1")
    with pytest.raises(FitConflict, match="nominated"):
        cache.assume_gang([member(f"w{i}", "n1", "100m") for i in range(3)], GROUP)
    assert cache.pod_count() == 1
    assert cache.assume_gang([member(f"w{i}", "n1", "100m") for i in range(2)], GROUP)


def test_a_nominee_placed_by_a_gang_claim_drops_its_nomination(held: Cache) -> None:
    """The nominee is a member of a gang: its claim is not held back by its own room, and its
    nomination goes as its claim lands (as a single claim drops it). Failed on main: the
    nomination stayed, holding the room a second time until it lapsed."""
    pre = member("pre", "n1", "2", priority=1000)
    assert held.assume_gang([pre, member("w1", "n1", "2")], GROUP) == ["n1", "n1"]
    assert nominations.read_nomination(held.store, "pre") is None
    assert not held.client.exists(held.keys.nominated, held.keys.nominated_nodes)


def test_a_nominees_timed_claim_lands_on_its_room_and_drops_its_nomination(held: Cache) -> None:
    """The extender's bind path (claim and deadline in one call) for the nominee itself."""
    held.assume_pod(
        make_pod("pre", "n1", cpu="2", mem="1Mi", priority=1000), check_fit=True, deadline=30.0
    )
    assert nominations.read_nomination(held.store, "pre") is None
    with pytest.raises(FitConflict):  # the room is the nominee's now, as a claim
        held.assume_pod(make_pod("low", "n1", cpu="3", mem="1Mi"), check_fit=True, deadline=30.0)


def test_a_lower_priority_timed_claim_cannot_take_a_nominated_room(held: Cache) -> None:
    before = keyspace(held.client, held.keys.pattern)
    with pytest.raises(FitConflict, match="nominated"):
        held.assume_pod(make_pod("low", "n1", cpu="3", mem="1Mi"), check_fit=True, deadline=30.0)
    assert keyspace(held.client, held.keys.pattern) == before


# -- raw calls: malformed -> BADARG, nothing written -----------------------------------------------


def refused_raw(cache: Cache, command: str, args: list[Any], code: str) -> None:
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=code):
        cache.client.fcall(function_name(command), 1, cache.keys.prefix, "r", "", *args)
    assert keyspace(cache.client, cache.keys.pattern) == before


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["1", "set", GROUP, "0", ""], "BADARG min"),
        (["1", "set", GROUP, "-1", ""], "BADARG min"),
        (["1", "set", GROUP, "2147483648", ""], "BADARG min"),
        (["1", "set", GROUP, "1.5", ""], "BADARG min"),
        (["1", "set", GROUP, "inf", ""], "BADARG min"),
        (["1", "set", GROUP, "1e3", ""], "BADARG min"),
        (["1", "set", GROUP, "2", "0"], "BADARG timeout"),
        (["1", "set", GROUP, "2", "-5"], "BADARG timeout"),
        (["1", "set", GROUP, "2", "nan"], "BADARG timeout"),
        (["1", "set", GROUP, "2", "99999999999"], "BADARG timeout"),
        (["1", "set", "train", "2", ""], "BADARG group"),
        (["1", "set", "a/b/c", "2", ""], "BADARG group"),
        (["1", "set", "a b/c", "2", ""], "BADARG group"),
        (["1", "set", "/x", "2", ""], "BADARG group"),
        (["1", "set", GROUP, "2"], "BADARG argc"),
        (["1", "delete", GROUP, "2", ""], "BADARG argc"),
        (["1", "put", GROUP, "2", ""], "BADARG op"),
        (["-1", "set", GROUP, "2", ""], "BADARG rv"),
        (["x", "set", GROUP, "2", ""], "BADARG rv"),
    ],
)
def test_malformed_podgroups_answer_badarg_and_write_nothing(
    cache: Cache, args: list[Any], code: str
) -> None:
    refused_raw(cache, "sync_podgroup", args, code)


def test_a_non_utf8_podgroup_name_is_kept_or_refused_without_harm(cache: Cache) -> None:
    """Bytes that are not UTF-8 in a group name: a name like any other to Redis."""
    name = function_name("sync_podgroup")
    reply = cache.client.fcall(
        name, 1, cache.keys.prefix, "r", "", "1", "set", b"ns/\xff\xfe", "2", ""
    )
    assert reply[0] == b"applied"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["u", "n1", "inf", "1000", "r:cpu 1"], "BADARG priority"),
        (["u", "n1", "1.0", "1000", "r:cpu 1"], "BADARG priority"),
        (["u", "n1", str(-(2**31) - 1), "1000", "r:cpu 1"], "BADARG priority"),
        (["u", "n1", "1", "-5", "r:cpu 1"], "BADARG ttl"),
        (["u", "n1", "1", "1e3", "r:cpu 1"], "BADARG ttl"),
        (["u", "n1", "1", str(10**13), "r:cpu 1"], "BADARG ttl"),
        (["u", "n1", "1", "1000", "r:cpu x"], "BADARG contribution"),
        (["u", "n1", "1", "1000", "r:cpu " + "9" * 30], "BADARG contribution"),
        (["", "n1", "1", "1000", "r:cpu 1"], "BADARG uid"),
        (["u" * 2000, "n1", "1", "1000", "r:cpu 1"], "BADARG uid"),
        (["u", "n1", "1", "1000", "r:cpu 1", "-1"], "BADARG now"),
        (["u", "n1", "1"], "BADARG ttl"),
    ],
)
def test_malformed_nominations_answer_badarg_and_write_nothing(
    cache: Cache, args: list[Any], code: str
) -> None:
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    refused_raw(cache, "nominate_pod", args, code)


@pytest.mark.parametrize("ttl", ["0", "-1", "inf", "1.5", "1e3", "", str(10**13), "0x10"])
def test_a_timed_claim_with_a_malformed_ttl_writes_nothing(cache: Cache, ttl: str) -> None:
    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    from schedcache.store import commands

    claim = commands.assume_pod(make_pod("p", "n1", cpu="1", mem="1Mi"), True, None, 0.0)
    refused_raw(cache, "timed_claim", [ttl, *claim.args], "BADARG ttl")


def test_a_timed_claim_with_no_claim_arguments_writes_nothing(cache: Cache) -> None:
    refused_raw(cache, "timed_claim", ["1000"], "BADARG")


# -- the reference scheduler: a placed group's later members ---------------------------------------


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def test_a_member_created_after_its_group_was_placed_is_placed_as_an_extra(
    cache: Cache, apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """minMember 2 met (two members bound); a third member comes later (a Job scaled up, a
    member recreated): Coscheduling lets it through, the group's minMember being met. Failed
    on main: the placed members had left the group's wait, so the third counted 1/2 and waited
    for ever; docs/gangs.md promised a placed group's extras are placed."""
    from tests.test_gang_scheduling import bound, pod_group
    from tests.test_gang_scheduling import member as gang_member

    apiserver.create(node("n1", "4"))
    apiserver.create(pod_group("g", 2))
    apiserver.create(gang_member("g-0", "g"))
    apiserver.create(gang_member("g-1", "g"))
    with fed_scheduler(cache, apiserver, tmp_path, retry_delay=0.1, max_backoff=0.3) as scheduler:
        eventually(lambda: len(bound(apiserver, ["g-0", "g-1"])) == 2)
        apiserver.create(gang_member("g-2", "g"))
        eventually(lambda: bound(apiserver, ["g-2"]) == ["g-2"], 10)
        assert scheduler.gangs.placed == 2
        assert GangWaits(cache).all() == []  # a placed group is not shown as waiting


# -- bounded: a gang's contribution fields ---------------------------------------------------------


def ported(name: str, ports: int, first: int) -> Pod:
    from tests.factories import port

    return make_pod(
        name, "n1", "1m", "1Mi", ports=[port(first + i) for i in range(ports)], uid=name
    )


def test_a_gang_over_the_field_cap_is_refused_before_sending(cache: Cache) -> None:
    """256 members of 200 host ports (4 MiB of arguments, under the byte cap) held Redis for
    seconds on main (each member's port check rebuilt the node's and every earlier member's
    ports); now the fields a gang carries are capped (MAX_GANG_FIELDS)."""
    from schedcache.errors import ValidationError
    from schedcache.store.gang import MAX_GANG_FIELDS

    cache.add_node(make_node("n1", cpu="64", mem="64Gi", pods="1000"))
    per = 60
    pods = [ported(f"g{m}", per, 1000 + m * per) for m in range(MAX_GANG_FIELDS // per + 1)]
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match=f"more than {MAX_GANG_FIELDS} contribution fields"):
        cache.assume_gang(pods, GROUP)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_redis_refuses_a_gang_over_the_field_cap_writing_nothing(cache: Cache) -> None:
    from schedcache.store.gang import MAX_GANG_FIELDS, gang_claim

    cache.add_node(make_node("n1", cpu="64", mem="64Gi", pods="1000"))
    per = 60
    pods = [ported(f"g{m}", per, 1000 + m * per) for m in range(MAX_GANG_FIELDS // per + 1)]
    half = len(pods) // 2
    args: list[Any] = ["0", "", "", "", str(len(pods))]
    for chunk in (pods[:half], pods[half:]):  # each half under the Python check's cap
        args += list(gang_claim(GROUP, [(p, "", "") for p in chunk]).args[5:])
    refused_raw(cache, "gang_claim", args, f"BADARG fields: more than {MAX_GANG_FIELDS}")


def test_a_gang_at_the_field_cap_with_host_ports_is_placed(cache: Cache) -> None:
    from schedcache.model.aggregates import contribution_string
    from schedcache.store.gang import MAX_GANG_FIELDS

    cache.add_node(make_node("n1", cpu="64", mem="64Gi", pods="1000"))
    per = 14  # with cpu, memory and the labels' field (l:-): 17 fields a member
    fields = len(contribution_string(ported("g", per, 1000)).split()) // 2
    pods = [ported(f"g{m}", per, 1000 + m * per) for m in range(MAX_GANG_FIELDS // fields)]
    assert cache.assume_gang(pods, GROUP) == ["n1"] * len(pods)
    # the members' ports are counted together: one more asking a taken port is refused
    with pytest.raises(FitConflict, match="port"):
        cache.assume_gang([ported("late", 1, 1000)], GROUP)


def test_a_group_whose_members_carry_too_many_fields_is_reported_not_spun(
    cache: Cache, apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Members whose host ports together pass the gang claim's field cap: reported once,
    parked, nothing claimed (before the cap, the call held Redis for seconds)."""
    from tests.factories import port
    from tests.test_gang_scheduling import condition, in_cache, pod_group
    from tests.test_gang_scheduling import member as gang_member

    apiserver.create(node("n1", "64"))
    apiserver.create(pod_group("g", 2))
    for m in range(2):
        manifest = gang_member(f"g-{m}", "g", cpu="10m")
        manifest["spec"]["containers"][0]["ports"] = [
            port(1000 + m * 2100 + i) for i in range(2100)
        ]
        apiserver.create(manifest)
    with fed_scheduler(cache, apiserver, tmp_path, retry_delay=0.1, max_backoff=0.3):
        eventually(lambda: any(condition(apiserver, f"g-{m}") for m in range(2)), 10)
        found = next(c for c in (condition(apiserver, f"g-{m}") for m in range(2)) if c)
        assert found["reason"] == "Unschedulable"
        assert "more than 4096 contribution fields" in found["message"]
        assert in_cache(cache, ["g-0", "g-1"]) == 0


# -- PodGroups and the CLI -------------------------------------------------------------------------


def test_a_wait_with_the_longest_timeout_a_podgroup_may_hold_is_kept(cache: Cache) -> None:
    """scheduleTimeoutSeconds 2^31-1 (the CRD's int32): the wait's expiry stays in range."""
    from schedcache.store.podgroups import INT_MAX

    waiting = make_pod("g-0", "", "1", "1Mi", namespace="default", uid="uid-g-0")
    GangWaits(cache).join("default/g", INT_MAX, waiting, 1000)
    assert cache.client.pttl(cache.keys.gang_wait("default/g")) > 0
    assert [w.group for w in GangWaits(cache).all()] == ["default/g"]


def test_two_namespaces_groups_of_one_name_wait_apart(cache: Cache) -> None:
    from schedcache.scheduler.gang import group_of

    labels = {"scheduling.x-k8s.io/pod-group": "train"}
    a = make_pod("w", "", "1", "1Mi", namespace="a", uid="uid-a", labels=labels)
    b = make_pod("w", "", "1", "1Mi", namespace="b", uid="uid-b", labels=labels)
    assert (group_of(a), group_of(b)) == ("a/train", "b/train")
    waits = GangWaits(cache)
    waits.join(group_of(a), None, a, 1000)
    _, members, _ = waits.join(group_of(b), None, b, 1000)
    assert list(members) == ["uid-b"]


def test_a_killed_replicas_gang_claims_lapse_with_its_lease_all_members(
    make_cache: Any,
) -> None:
    """The replica dies between the gang claim and the Bindings: its lease lapses and the
    expiry worker forgets every member's claim; the room is free again."""
    from schedcache.ops.expiry import ExpiryWorker

    doomed = make_cache(replica="doomed", lease_ttl=0.3)
    doomed.add_node(make_node("n1", cpu="2", mem="8Gi"))
    gang = [member("w0", "n1", "1"), member("w1", "n1", "1")]
    doomed.assume_gang(gang, GROUP)
    doomed.close(release_lease=False)  # killed: no heartbeat, nothing given back
    watcher = make_cache(replica="watch")
    eventually(lambda: not watcher.client.exists(watcher.keys.lease("doomed")), 5)
    ExpiryWorker(watcher, interval=0.5).run_once()
    assert [watcher.pod_state(p) for p in gang] == [None, None]
    watcher.assume_pod(make_pod("plain", "n1", cpu="2", mem="1Mi"), check_fit=True)
    assert watcher.verify() == []


def test_explain_shows_a_member_whose_podgroup_does_not_exist_waiting(
    client: Any,
    cache: Cache,
    cache_name: str,
    apiserver: FakeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod naming a PodGroup nobody created waits (as Coscheduling's); before, explain
    answered only "has no claim" and whatif listed nothing: the wait was not recorded."""
    from click.testing import CliRunner

    from schedcache.cli import app as cli_module
    from schedcache.cli.app import main
    from tests.test_gang_scheduling import member as gang_member

    apiserver.create(node("n1", "4"))
    apiserver.create(gang_member("orphan", "nope"))
    with fed_scheduler(cache, apiserver, tmp_path, retry_delay=0.1, max_backoff=0.3):
        eventually(lambda: bool(GangWaits(cache).all()), 10)
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    result = CliRunner().invoke(main, ["--cache", cache_name, "explain", "pod", "default/orphan"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("gang: waits with pod group default/nope for ")
    assert cache.pod_count() == 0


def test_a_gang_member_with_a_malformed_port_field_writes_nothing(cache: Cache) -> None:
    """A raw call whose second member on a node carries a port field without protocol and
    port (Python never sends one): refused or placed, never a Lua error after a write."""
    from schedcache.store.gang import gang_claim

    cache.add_node(make_node("n1", cpu="4", mem="8Gi"))
    args: list[Any] = ["0", "", "", "", "3"]
    for name, port_field in (("a", "p:0.0.0.0|TCP|80"), ("b", "p:bad"), ("c", "p:0.0.0.0|TCP|81")):
        one = list(gang_claim(GROUP, [(member(name, "n1", "100m"), "", "")]).args[5:])
        one[3] = f"{one[3]} {port_field} 1"
        args += one
    before = keyspace(cache.client, cache.keys.pattern)
    try:
        cache.client.fcall(function_name("gang_claim"), 1, cache.keys.prefix, "r", "", *args)
    except redis.ResponseError as error:
        assert "BADARG" in str(error) or "FITCONFLICT" in str(error), error
        assert keyspace(cache.client, cache.keys.pattern) == before
