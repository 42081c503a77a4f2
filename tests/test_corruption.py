"""A key another client wrote (wrong type, not an integer, a mangled pod record) refuses every
command that would touch it *before its first write*: CorruptRecord naming the key, and Redis
byte for byte as before. Redis does not roll back a function that fails halfway, so this is the
only way a corrupt key cannot leave a half-applied command behind.

The matrix: each kind of corruption x each write command, on fakeredis, Redis and Cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest

from schedcache import Cache, Snapshot
from schedcache.errors import BatchFailed, CacheError, CorruptRecord
from schedcache.store import commands
from schedcache.store.library import function_name
from tests.factories import keyspace, make_node, make_pod


def populated(cache: Cache) -> None:
    """n1 with an added pod, an assumed pod whose binding finished (due), an assumed pod."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_node(make_node("n3", "4", "8Gi"))
    cache.add_pod(make_pod("added", "n1", "100m", "1Mi"))
    cache.assume_pod(make_pod("due", "n1", "100m", "1Mi"))
    cache.finish_binding(make_pod("due", "n1"), now=0)
    cache.assume_pod(make_pod("held", "n1", "100m", "1Mi"))


# Each corruption: (name, function of the cache writing it, key suffix named in the error).
def _set(suffix: str, value: bytes) -> Callable[[Cache], None]:
    return lambda cache: cache.client.set(cache.keys.prefix + suffix, value)


def _wrong_type(suffix: str) -> Callable[[Cache], None]:
    def corrupt(cache: Cache) -> None:
        cache.client.delete(cache.keys.prefix + suffix)
        cache.client.rpush(cache.keys.prefix + suffix, "x")

    return corrupt


def _hset(suffix: str, field: str, value: str) -> Callable[[Cache], None]:
    return lambda cache: cache.client.hset(cache.keys.prefix + suffix, field, value)


CACHE_WIDE = [
    ("gen not an integer", _set("gen", b"x"), "gen"),
    ("gen a list", _wrong_type("gen"), "gen"),
    ("gen with a leading zero", _set("gen", b"012"), "gen"),
    ("gen at the int64 limit", _set("gen", b"9223372036854775807"), "gen"),
    ("events a list", _wrong_type("events"), "events"),
    ("nodegen a list", _wrong_type("nodegen"), "nodegen"),
    ("pods a list", _wrong_type("pods"), "pods"),
    ("assumed a list", _wrong_type("assumed"), "assumed"),
    ("deadlines a list", _wrong_type("deadlines"), "deadlines"),
    ("nodes a list", _wrong_type("nodes"), "nodes"),
]

WRITES: dict[str, Callable[[Cache], object]] = {
    "add_pod": lambda c: c.add_pod(make_pod("new", "n1", "10m", "1Mi")),
    "assume_pod": lambda c: c.assume_pod(make_pod("new", "n1", "10m", "1Mi")),
    "assume_pod check_fit": lambda c: c.assume_pod(
        make_pod("new", "n1", "10m", "1Mi"), check_fit=True
    ),
    "finish_binding": lambda c: c.finish_binding(make_pod("held", "n1")),
    "forget_pod": lambda c: c.forget_pod(make_pod("held", "n1")),
    "update_pod": lambda c: c.update_pod(
        make_pod("added", "n1", "100m", "1Mi"), make_pod("added", "n1", "200m", "1Mi")
    ),
    "remove_pod": lambda c: c.remove_pod(make_pod("added", "n1")),
    "add_node": lambda c: c.add_node(make_node("n2", "2", "1Gi")),
    "update_node": lambda c: c.update_node(make_node("n1", "4", "8Gi"), make_node("n1", "8")),
    "remove_node": lambda c: c.remove_node(make_node("n3")),
    "cleanup_assumed_pods": lambda c: c.cleanup_assumed_pods(now=10**6),
    "tree next": lambda c: c.node_tree().next(),
    "run(add_pod)": lambda c: c.run(commands.add_pod(make_pod("new", "n1", "10m", "1Mi"))),
    "sync_pod new pod": lambda c: c.run(
        commands.sync_pod(make_pod("new", "n1", "10m", "1Mi"), "5", present=True)
    ),
    "sync_pod confirm": lambda c: c.run(
        commands.sync_pod(make_pod("held", "n1", "100m", "1Mi"), "5", present=True)
    ),
    "sync_pod update": lambda c: c.run(
        commands.sync_pod(make_pod("added", "n1", "200m", "1Mi"), "5", present=True)
    ),
    "sync_pod delete": lambda c: c.run(
        commands.sync_pod(make_pod("added", "n1"), "5", present=False)
    ),
    "sync_pod queue": lambda c: c.run(
        commands.sync_pod_pending(make_pod("pending", "", "10m", "1Mi"), "ref", "5")
    ),
    "batch add_pod": lambda c: _batched_add(c),
}


def _batched_add(cache: Cache) -> None:
    """A batch raises when the call as a whole is refused; one command's refusal is its
    result."""
    batch = cache.batch()
    batch.add_pod(make_pod("new", "n1", "10m", "1Mi"))
    for result in batch.execute():
        if result.error is not None:
            raise result.error


# The cache-wide keys each write may change, where not all of them (lua/_register.lua): a
# corrupt one refuses it, and any other corrupt key neither stops it nor is touched by it.
PLACING = {"gen", "events", "nodegen", "pods"}
WRITTEN: dict[str, set[str]] = {
    "add_pod": PLACING,
    "assume_pod": PLACING | {"assumed"},
    "assume_pod check_fit": PLACING | {"assumed"},
    "run(add_pod)": PLACING,
    "sync_pod new pod": PLACING,
    # Confirmed where it was assumed, with the same requests: `pods` and `nodes` stay as
    # they are (lua/add_pod.lua, confirm_in_place).
    "sync_pod confirm": {"gen", "events", "nodegen", "assumed", "deadlines"},
    "sync_pod queue": set(),  # the queue's keys only
    "finish_binding": {"deadlines", "events"},
    "tree next": set(),
}
EVERY_KEY = {key for _, _, key in CACHE_WIDE}


def refused_unchanged(cache: Cache, write: Callable[[Cache], object], key: str) -> None:
    before = keyspace(cache.client, cache.keys.pattern)
    # (A batch reports it inside BatchFailed, with the same text.)
    with pytest.raises((CorruptRecord, BatchFailed), match=rf"key \{{{cache.name}\}}:{key}\b"):
        write(cache)
    assert keyspace(cache.client, cache.keys.pattern) == before


def applied_around(cache: Cache, write: Callable[[Cache], object], key: str) -> None:
    """The write runs, and leaves the corrupt key it does not write exactly as it was."""
    full_key = cache.keys.prefix + key
    before = cache.client.dump(full_key)
    write(cache)
    assert cache.client.dump(full_key) == before


@pytest.mark.parametrize(("what", "corrupt", "key"), CACHE_WIDE, ids=[c[0] for c in CACHE_WIDE])
def test_a_corrupt_cache_wide_key_refuses_exactly_the_writes_to_it(cache, what, corrupt, key):
    for name, write in WRITES.items():
        # Each write on the same starting state (one that goes through changes it).
        cache.clear()
        populated(cache)
        corrupt(cache)
        try:
            if key in WRITTEN.get(name, EVERY_KEY):
                refused_unchanged(cache, write, key)
            else:
                applied_around(cache, write, key)
        except (AssertionError, pytest.fail.Exception) as error:
            raise AssertionError(f"{name} with {what}: {error}") from None


def test_add_pod_confirming_an_assumed_pod_checks_every_cache_wide_key(cache):
    """Confirming takes the assumed pod off its node too (assumed, deadlines, nodes)."""
    populated(cache)
    _wrong_type("deadlines")(cache)
    refused_unchanged(
        cache, lambda c: c.add_pod(make_pod("held", "n1", "100m", "1Mi")), "deadlines"
    )


def test_a_pod_on_a_node_not_in_the_cache_checks_the_node_index(cache):
    populated(cache)
    _wrong_type("nodes")(cache)
    refused_unchanged(cache, lambda c: c.add_pod(make_pod("new", "ghost", "10m", "1Mi")), "nodes")


NODE_KEYS = [
    ("node hash a list", _wrong_type("node:n1"), "node:n1"),
    ("requested cpu not an integer", _hset("node:n1", "r:cpu", "lots"), "node:n1"),
    # Integers to Lua's eye, not to HINCRBY's: refused before the first write, not after it.
    ("requested cpu with a leading zero", _hset("node:n1", "r:cpu", "0100"), "node:n1"),
    ("requested cpu past int64", _hset("node:n1", "r:cpu", "9223372036854775808"), "node:n1"),
    ("node pods a list", _wrong_type("nodepods:n1"), "nodepods:n1"),
]

ON_N1 = [
    "add_pod",
    "assume_pod",
    "assume_pod check_fit",
    "remove_pod",
    "update_pod",
    "run(add_pod)",
    "batch add_pod",
]


@pytest.mark.parametrize(("what", "corrupt", "key"), NODE_KEYS, ids=[c[0] for c in NODE_KEYS])
def test_a_corrupt_node_refuses_the_pod_commands_on_it(cache, what, corrupt, key):
    populated(cache)
    corrupt(cache)
    for name in ON_N1:
        try:
            refused_unchanged(cache, WRITES[name], key)
        except (AssertionError, pytest.fail.Exception) as error:
            raise AssertionError(f"{name} with {what}: {error}") from None


def test_the_reproducer_gen_corrupt_add_pod_leaves_no_half_pod(cache):
    """From the issue: SET gen x, then add_pod used to count the pod on the node with no record
    and no event."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.client.set(cache.keys.prefix + "gen", "x")
    refused_unchanged(cache, WRITES["add_pod"], "gen")
    cache.client.set(cache.keys.prefix + "gen", "1")
    cache.add_pod(make_pod("new", "n1", "10m", "1Mi"))
    assert cache.verify() == []


def same_uid(method: str, cache: Cache) -> object:
    return getattr(cache, method)(make_pod("added", "n1", "10m", "1Mi"))


@pytest.mark.parametrize(
    "record",
    [
        b"no header at all",
        b"added n1 9 - 1 - r:cpu 5\nblob",
        b"sleeping n1 0 - 1 - \nblob",
        b"added n1 0 soon 1 - \nblob",
        b"added n1 0 - 1 - r:cpu five\nblob",
    ],
)
def test_a_mangled_pod_record_refuses_the_commands_on_that_pod(cache, record):
    populated(cache)
    cache.client.set(cache.keys.pod("added"), record)
    for name in ("remove_pod", "update_pod", "add_pod", "assume_pod"):
        write = WRITES[name]
        if name in ("add_pod", "assume_pod"):  # the same uid again: its record is read first
            write = partial(same_uid, name)
        refused_unchanged(cache, write, "pod:added")


def test_expiry_skips_a_corrupt_record_and_expires_the_rest(cache):
    """A due pod whose record is corrupt no longer stops expiry for the whole cache: it is
    moved aside (quarantine), the others expire."""
    populated(cache)
    cache.assume_pod(make_pod("due2", "n1", "100m", "1Mi"))
    cache.finish_binding(make_pod("due2", "n1"), now=0)
    cache.client.set(cache.keys.pod("due"), b"added n1 0 - x - \nblob")
    assert cache.cleanup_assumed_pods(now=10**6) == ["due2"]
    assert cache.client.zrange(cache.keys.prefix + "quarantine", 0, -1) == [b"due"]
    assert cache.client.zscore(cache.keys.deadlines, "due") is None
    assert cache.cleanup_assumed_pods(now=10**6) == []  # not met again


def test_a_wrong_typed_deadline_member_record_is_skipped_too(cache):
    populated(cache)
    cache.client.delete(cache.keys.pod("due"))
    cache.client.rpush(cache.keys.pod("due"), "x")
    assert cache.cleanup_assumed_pods(now=10**6) == []
    assert cache.client.zrange(cache.keys.prefix + "quarantine", 0, -1) == [b"due"]


def test_reads_refuse_corruption_with_a_cache_error(cache):
    """dump, update_snapshot and verify raise schedcache errors naming what is corrupt, never
    a raw Redis or Python error."""
    populated(cache)
    cache.client.hset(cache.keys.node("n1"), "r:cpu", "lots")
    for read in (cache.dump, lambda: cache.update_snapshot(Snapshot()), cache.verify):
        with pytest.raises(CacheError, match="node:n1"):
            read()
    cache.client.delete(cache.keys.prefix + "treezones")
    cache.client.rpush(cache.keys.prefix + "treezones", "x")
    with pytest.raises(CorruptRecord, match="treezones"):
        cache.update_snapshot(Snapshot())


def test_a_snapshot_refuses_a_wrong_typed_pod_record_of_a_node(cache):
    """Records are read by MGET, which answers a key of another type as if it were missing:
    the read must still tell it apart and refuse, not build a node without the pod."""
    populated(cache)
    key = cache.keys.prefix + "pod:added"
    cache.client.delete(key)
    cache.client.rpush(key, "x")
    with pytest.raises(CorruptRecord, match="pod:added"):
        cache.update_snapshot(Snapshot())


def test_a_corrupt_remembered_reply_is_corruption_not_a_crash(cache):
    command = commands.add_node(make_node("n1"))
    cache.client.set(cache.keys.prefix + f"cmd:{command.id}", "a9;zz")
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(CorruptRecord, match=f"cmd:{command.id}"):
        cache.run(command)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_replica_named_like_the_no_claimer_marker_is_refused_by_the_functions(cache):
    """Whatever the client: the functions refuse replica '-' (the record's "no claimer"),
    before any write."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    pod = commands.assume_pod(make_pod("p", "n1", "10m", "1Mi"))
    before = keyspace(cache.client, cache.keys.pattern)
    for replica in ("-", "a b"):
        with pytest.raises(Exception, match="BADARG replica"):
            cache.store.server().fcall(
                function_name("assume_pod"), 1, cache.keys.prefix, replica, "", *pod.args
            )
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_forget_lapsed_checks_every_lapsed_claim_set_before_forgetting_any(make_cache):
    """Found in review: the claim set of a later lapsed replica was checked after earlier
    replicas' pods were forgotten (and, with generations counted per call, `gen` then went
    back behind the events)."""
    cache = make_cache(replica="expiry", lease_ttl=0)
    cache.add_node(make_node("n1", "4", "8Gi"))
    for owner in ("r1", "r2", "r3"):
        replica = make_cache(ttl=600, replica=owner)
        for j in range(2):
            replica.assume_pod(make_pod(f"{owner}-{j}", "n1", "10m", "1Mi"))
        replica.close()  # no more heartbeats; the lease key is deleted below
        cache.client.delete(f"{cache.keys.prefix}lease:{owner}")
    # The last replica in the order the function meets them: the others come first.
    members = "return redis.call('SMEMBERS', KEYS[1])"  # (redis-py would make it a set)
    order = cache.client.eval(members, 1, cache.keys.prefix + "replicas")
    last = order[-1].decode()
    cache.client.delete(f"{cache.keys.prefix}replicapods:{last}")
    cache.client.rpush(f"{cache.keys.prefix}replicapods:{last}", "x")
    refused_unchanged(cache, lambda c: c.run(commands.forget_lapsed(100)), f"replicapods:{last}")


def test_expiry_checks_quarantine_before_expiring_anything(cache):
    populated(cache)
    cache.client.rpush(cache.keys.prefix + "quarantine", "x")
    refused_unchanged(cache, lambda c: c.cleanup_assumed_pods(now=10**6), "quarantine")


CLAIM_SETS = ["pods", "assumed", "replicapods:r1", "replicas"]


@pytest.mark.parametrize("key", CLAIM_SETS)
def test_the_sets_a_leased_claim_writes_are_checked_before_it_writes(make_cache, key):
    """assume_pod checks the sets it writes with one call (lua/_helpers.lua, expect_sets): a
    wrong-typed one among them is named, and nothing is written."""
    cache = make_cache(replica="r1", lease_ttl=0)
    populated(cache)
    _wrong_type(key)(cache)
    claim = commands.assume_pod(make_pod("new", "n1", "10m", "1Mi"), lease_ttl=15.0)
    refused_unchanged(cache, lambda c: c.run(claim), key)


def test_the_absent_key_is_named_when_another_client_wrote_it(make_cache):
    """`absent` is never written; the multi-set check intersects with it. Wrong-typed, it is
    named; a set someone filled does not stop a claim (the check only looks at types)."""
    cache = make_cache(replica="r1", lease_ttl=0)
    populated(cache)
    _wrong_type("absent")(cache)
    refused_unchanged(cache, lambda c: c.assume_pod(make_pod("new", "n1", "10m", "1Mi")), "absent")
    cache.client.delete(cache.keys.absent)
    cache.client.sadd(cache.keys.absent, "held", "x")
    cache.assume_pod(make_pod("new", "n1", "10m", "1Mi"))
    assert cache.is_assumed_pod(make_pod("new", "n1"))
    assert cache.verify() == []


def test_a_corrupt_image_index_entry_refuses_the_node_change(cache):
    """The image sets a node command writes are checked together; the wrong one is named."""
    images = [(["img/a:1"], 10), (["img/b:1"], 20), (["img/c:1"], 30)]
    cache.add_node(make_node("n1", "4", "8Gi", images=images[:1]))
    _wrong_type("imgnodes:img/b:1")(cache)
    refused_unchanged(
        cache, lambda c: c.add_node(make_node("n2", "4", "8Gi", images=images)), "imgnodes:img/b:1"
    )
    refused_unchanged(
        cache,
        lambda c: c.update_node(
            make_node("n1", "4", "8Gi"), make_node("n1", "4", "8Gi", images=images)
        ),
        "imgnodes:img/b:1",
    )


def test_a_pod_confirmed_elsewhere_checks_the_node_it_leaves(cache):
    """Confirmed on another node than assumed: its old node's totals are written, so a corrupt
    field there refuses the confirmation, naming that node, with nothing written."""
    populated(cache)
    _hset("node:n1", "r:cpu", "lots")(cache)
    refused_unchanged(cache, lambda c: c.add_pod(make_pod("held", "n3", "100m", "1Mi")), "node:n1")


def test_finishing_a_binding_does_not_need_the_node(cache):
    """finish_binding writes the pod's record and deadline, not its node: a corrupt node hash
    is no reason to refuse it (nor is it touched)."""
    populated(cache)
    _hset("node:n1", "r:cpu", "lots")(cache)
    applied_around(cache, WRITES["finish_binding"], "node:n1")
    assert not cache.is_assumed_pod(make_pod("held", "n1")) or cache.get_pod(make_pod("held", "n1"))


def test_a_total_at_the_int64_edge_refuses_a_pod_before_any_write(cache):
    """A stored total near int64 (another client's) and a small pod: HINCRBY would refuse the
    sum after the claim's first writes; the check refuses the pod first, with nothing written."""
    populated(cache)
    _hset("node:n1", "r:cpu", "9223372036854775800")(cache)
    for write in ("add_pod", "assume_pod", "batch add_pod"):
        before = keyspace(cache.client, cache.keys.pattern)
        with pytest.raises(CacheError, match=r"requested cpu \(millicores\) past about 9,000,"):
            WRITES[write](cache)
        assert keyspace(cache.client, cache.keys.pattern) == before, write


def test_a_pod_confirmed_on_the_ghost_it_was_assumed_on_folds_as_the_live_state(cache):
    """Found in review: confirming in place kept a ghost's stale allocatable where upstream (and
    the fold) drop the ghost with its last pod and make a placeholder anew."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    pod = make_pod("p", "n1", "100m", "1Mi")
    cache.assume_pod(pod)
    cache.finish_binding(pod, now=0)
    cache.remove_node(make_node("n1"))
    cache.add_pod(make_pod("p", "n1", "100m", "1Mi"))
    assert cache.get_node_info("n1").allocatable.milli_cpu == 0
    assert cache.verify() == []
    assert cache.replay().nodes == cache.dump().nodes


@pytest.mark.parametrize(("key", "kind"), [("nomvictims", "hash"), ("nominated", "zset")])
def test_a_nominated_pods_delete_checks_the_nominations_keys_before_any_write(cache, key, kind):
    """A nominated pod's delete drops its nomination last: every key it writes is checked
    first (a `nomvictims` of another type failed it halfway, the pod removed and its version
    unrecorded, with a plain WRONGTYPE: review of h40confirm; main had it too)."""
    from schedcache.store.nominations import nominate_pod

    cache.add_node(make_node("n1"))
    pod = make_pod("added", "n1", "100m", "1Mi")
    cache.run(commands.sync_pod(pod, "1", True))
    cache.run(nominate_pod(pod, "n1"))
    wrong = cache.keys.prefix + key
    cache.client.delete(wrong)
    cache.client.rpush(wrong, "not a " + kind)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(CorruptRecord, match=key):
        cache.run(commands.sync_pod(pod, "9", False))
    assert keyspace(cache.client, cache.keys.pattern) == before


SYNC_POD_KEYS = ["version:pod:held", "pod:held", "queued:held"]


@pytest.mark.parametrize("key", SYNC_POD_KEYS)
def test_sync_pod_reads_its_three_keys_at_once_and_names_a_wrong_typed_one(cache, key):
    """sc_sync_pod reads a pod's version, record and queued record in one MGET, which answers
    a key of another type as missing: such a key is still named (CORRUPT), for a confirmation
    and for a pending pod's queueing alike, with nothing written."""
    populated(cache)
    _wrong_type(key)(cache)
    confirm = commands.sync_pod(make_pod("held", "n1", "100m", "1Mi"), "5", present=True)
    refused_unchanged(cache, lambda c: c.run(confirm), key)
    queue = commands.sync_pod_pending(make_pod("held", "", "100m", "1Mi"), "ref", "5")
    refused_unchanged(cache, lambda c: c.run(queue), key)


@pytest.mark.parametrize("key", ["pod:held", "queued:held"])
def test_a_stale_change_is_dropped_before_a_wrong_typed_record_is_read(cache, key):
    """The version decides first, as when each key was read on its own: a change at or below
    it is dropped, whatever the pod's other keys hold, and nothing is written."""
    populated(cache)
    pod = make_pod("held", "n1", "100m", "1Mi")
    cache.client.set(cache.keys.prefix + "version:pod:held", "9")
    _wrong_type(key)(cache)
    before = keyspace(cache.client, cache.keys.pattern)
    reply = cache.run(commands.sync_pod(pod, "5", present=True))
    assert "stale" in str(reply), reply
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_refused_confirmation_holds_back_no_later_record_write(cache):
    """sc_sync_pod sends a confirmation's record with the pod's version in one MSET at its end
    (issue 40): refused by a corrupt node, in a batch and as a call of its own, it leaves no
    record write held back for the commands after it, whose pods are all recorded."""
    populated(cache)
    cache.client.hset(cache.keys.prefix + "node:n1", "r:cpu", "lots")
    confirm = commands.sync_pod(make_pod("held", "n1", "100m", "1Mi"), "5", present=True)
    batch = cache.batch()
    batch.add(confirm)
    batch.add(commands.add_pod(make_pod("b1", "n3", "10m", "1Mi")))
    batch.add(commands.sync_pod(make_pod("b2", "n3", "10m", "1Mi"), "6", present=True))
    results = batch.execute()
    assert isinstance(results[0].error, CorruptRecord) and "node:n1" in str(results[0].error)
    assert [result.error for result in results[1:]] == [None, None]
    with pytest.raises(CorruptRecord, match="node:n1"):
        cache.run(confirm)
    cache.add_pod(make_pod("after", "n3", "10m", "1Mi"))
    for name in ("b1", "b2", "after"):
        assert cache.pod_state(make_pod(name, "n3")) == "added", name
    assert cache.pod_state(make_pod("held", "n1")) == "assumed"
    assert {pod.name for pod in cache.get_node_info("n3").pods} == {"b1", "b2", "after"}
