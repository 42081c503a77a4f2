"""A stranger's review of stop 61's queue and sc_sync_pod changes (issue 40): a queue part
checked only where written, a drop's lower bound, a confirmation's record sent with its version.
A model-based random test of the queue's bookkeeping, a corruption matrix of every queue key
against the commands that touch it (alone and in batches), and the two batch cases the review
found (a refused command's memo trusted by the next: mended in guard_queue). H40_SEEDS,
H40_STEPS and H40_FUZZ run the random parts longer."""

from __future__ import annotations

from typing import Any

import pytest

from schedcache import Cache
from schedcache.errors import CorruptRecord
from schedcache.store import commands
from tests.factories import keyspace, make_node
from tests.test_queue import T0, _versions, pending, push, queue


def confirm(pod, node):
    return commands.sync_pod(pod.with_node(node), str(next(_versions)), present=True)


def test_a_batchs_second_drop_is_refused_like_its_first_with_queuedpods_corrupt(
    cache: Cache,
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    for name in ("a", "b"):
        push(cache, pending(name))
    popped = queue(cache).pop(2, now=T0)  # a, b leased
    cache.client.delete(cache.keys.queued_pods)
    cache.client.set(cache.keys.queued_pods, "garbage")
    before = keyspace(cache.client, cache.keys.pattern)
    batch = cache.batch()
    for item in popped:
        batch.add(confirm(item.pod, "n1"))
    results = batch.execute()  # BatchFailed: WRONGTYPE (end_call's SREM); b added, queued:b gone
    assert all(isinstance(r.error, CorruptRecord) for r in results)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_resent_confirmation_in_a_batch_is_refused_again_with_queues_corrupt(
    cache: Cache,
) -> None:
    """The scheduler's only queued pod confirmed twice in one batch (a feeder's resend): the
    second runs unchecked, its drop's HDEL meets the corrupt `queues` after add_pod's writes,
    and the record held back for the MSET is lost: the pod is on n1 (totals, nodepods, event)
    with no pod record and no version; resending it adds it again (n1's totals count it
    twice: history.invariants reports r:cpu 200 for 100)."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    push(cache, pending("o1"))
    cache.client.set(cache.keys.queues, "garbage")
    before = keyspace(cache.client, cache.keys.pattern)
    command = confirm(pending("o1"), "n1")
    batch = cache.batch()
    batch.add(command)
    batch.add(command)
    results = batch.execute()  # BatchFailed: WRONGTYPE (forget_if_idle's HDEL)
    assert all(isinstance(r.error, CorruptRecord) for r in results)
    assert keyspace(cache.client, cache.keys.pattern) == before


# ---------------------------------------------------------------- random model-based check
import os  # noqa: E402
import random  # noqa: E402

from schedcache.errors import BatchFailed  # noqa: E402
from schedcache.ops.queue import SchedulingQueue  # noqa: E402
from tests.factories import make_pod  # noqa: E402

SCHEDULERS = ("ref", "s2", "s3")
import redis as _redis  # noqa: E402

PARTS = ("active", "leased", "backoff", "parked")


def _t(x):
    return x.decode() if isinstance(x, bytes) else x


def check_queue(cache: Cache, model_queued: dict[str, str]) -> None:
    c, k = cache.client, cache.keys
    fields = {_t(f) for f in c.hkeys(k.queues)}
    union: dict[str, tuple[str, str]] = {}
    holding = set()
    for s in SCHEDULERS:
        for part in PARTS:
            members = [_t(m) for m in c.zrange(k.queue(s, part), 0, -1)]
            if members:
                holding.add(s)
            for m in members:
                uid = m.split(":", 1)[1] if part == "active" else m
                assert uid not in union, (uid, union[uid], (s, part))
                union[uid] = (s, part)
    assert fields == holding, (fields, holding)
    qp = {_t(u) for u in c.smembers(k.queued_pods)}
    assert qp == set(union), (qp, union)
    for uid, (s, part) in union.items():
        text = c.get(k.prefix + "queued:" + uid)
        head = text.split(b"\n", 1)[0].decode().split()
        assert (head[0], head[1]) == (part, s), (uid, head, s, part)
    assert {u: s for u, (s, _) in union.items()} == model_queued


def _pod(name: str, node: str = "", gen: int = 0) -> Any:
    return make_pod(name, node, "10m", "1Mi", labels={"g": str(gen)})


def run_random(cache: Cache, seed: int, steps: int = 120) -> None:
    rnd = random.Random(seed)
    schedulers = SCHEDULERS if seed % 2 else SCHEDULERS[:1]
    cache.add_node(make_node("n1", "64", "64Gi"))
    cache.add_node(make_node("n2", "64", "64Gi"))
    uids = [f"p{j}" for j in range(10)]
    queued: dict[str, str] = {}  # uid -> scheduler
    incache: dict[str, tuple[str, str, int]] = {}  # uid -> (state, node, gen)
    version: dict[str, int] = {}
    leased: dict[str, tuple[str, Any]] = {}
    sent: list[Any] = []
    gen = [0]
    now = [T0]

    def make_cmd():
        uid = rnd.choice(uids)
        r = rnd.random()
        gen[0] += 1
        v = str(next(_versions))
        node = (
            incache[uid][1] if uid in incache and rnd.random() < 0.8 else rnd.choice(["n1", "n2"])
        )
        if r < 0.35:
            s = rnd.choice(schedulers)
            return commands.sync_pod_pending(_pod(uid, "", gen[0]), s, v), (
                "queue",
                uid,
                s,
                gen[0],
                int(v),
            )
        if r < 0.65:
            return commands.sync_pod(_pod(uid, node, gen[0]), v, present=True), (
                "set",
                uid,
                node,
                gen[0],
                int(v),
            )
        if r < 0.8:
            return commands.sync_pod(_pod(uid, "", gen[0]), v, present=False), (
                "delete",
                uid,
                None,
                gen[0],
                int(v),
            )
        if r < 0.88:
            return commands.assume_pod(_pod(uid, node, gen[0])), ("assume", uid, node, gen[0], 0)
        if r < 0.94:
            return commands.add_pod(_pod(uid, node, gen[0])), ("add", uid, node, gen[0], 0)
        return commands.remove_pod_by_uid(uid), ("remove", uid, None, gen[0], 0)

    def queue_cmd():
        s = rnd.choice(schedulers)
        if leased and rnd.random() < 0.5:
            uid = rnd.choice(sorted(leased))
            s, _ = leased.pop(uid)
            r = rnd.random()
            if r < 0.2:
                return commands.queue_untried(s, "h", uid), ("give", uid, s, 0, 0)
            if r < 0.3:
                return commands.queue_unreadable(s, "h", uid), ("give", uid, s, 0, 0)
            return (
                commands.queue_retry(
                    s, "h", uid, rnd.random() < 0.5, "0-1", (1.0, 2.0), 5.0, now[0]
                ),
                ("give", uid, s, 0, 0),
            )
        return commands.queue_pop(s, "h", 10.0, rnd.randint(1, 3), 5.0, now[0]), (
            "pop",
            "",
            s,
            0,
            0,
        )

    def apply(eff, ok, reply):
        op, uid, arg, g, v = eff
        if op == "pop":
            assert ok, reply
            for j in range(0, len(reply), 3):
                leased[_t(reply[j])] = (arg, None)
            return
        if op == "give":
            assert ok, reply
            if _t(reply[0]) == "dropped":
                queued.pop(uid, None)
            return
        if op in ("assume", "add", "remove"):
            st = incache.get(uid)
            if op == "assume":
                expect = st is None
                if expect:
                    incache[uid] = ("assumed", arg, g)
            elif op == "add":
                expect = st is None or st[0] == "assumed"
                if expect:
                    incache[uid] = ("added", arg, g)
            else:
                expect = st is not None
                incache.pop(uid, None)
            assert ok == expect, (eff, reply, st)
            return
        if v <= version.get(uid, 0):
            assert ok and _t(reply[0]) == "dropped", (eff, reply)
            return
        if op == "set" and uid in incache and incache[uid][0] == "added" and incache[uid][1] != arg:
            assert not ok, (eff, reply)  # WRONGNODE
            return
        assert ok and _t(reply[0]) == "applied", (eff, reply)
        version[uid] = v
        if op == "queue":
            if uid not in incache:
                queued[uid] = arg
            elif uid in queued:
                pass  # its queued record updated, its place kept
        elif op == "set":
            queued.pop(uid, None)
            incache[uid] = ("added", arg, g)
        else:
            queued.pop(uid, None)
            incache.pop(uid, None)

    def run_one(cmd, eff):
        try:
            reply = cache.run(cmd)
        except (AssertionError, BatchFailed):
            raise
        except Exception as error:
            if isinstance(error, _redis.ResponseError):
                raise
            apply(eff, False, error)
        else:
            apply(eff, True, reply)

    for step in range(steps):
        r = rnd.random()
        if r < 0.2:
            cmd, eff = queue_cmd()
            run_one(cmd, eff)
        elif r < 0.25:
            now[0] += rnd.choice([1, 3, 11])
        elif r < 0.3 and sent:
            cmd, eff = rnd.choice(sent)
            if eff[0] in ("queue", "set", "delete") and version.get(eff[1], 0) >= eff[4]:
                reply = cache.run(cmd)
                assert _t(reply[0]) == "dropped", (reply, eff)
        elif r < 0.6:
            batch = cache.batch()
            effs = []
            for _ in range(rnd.randint(2, 10)):
                x = rnd.random()
                if sent and x < 0.1:
                    cmd, eff = rnd.choice(sent)
                elif x < 0.25:
                    cmd, eff = queue_cmd()
                else:
                    cmd, eff = make_cmd()
                    sent.append((cmd, eff))
                batch.add(cmd)
                effs.append(eff)
            results = batch.execute()
            for res, eff in zip(results, effs, strict=True):
                apply(eff, res.ok, res.reply if res.ok else res.error)
        else:
            cmd, eff = make_cmd()
            sent.append((cmd, eff))
            run_one(cmd, eff)
        # a lapsed lease of a pod added meanwhile (add_pod, not sync_pod) leaves the queue (pop)
        present = {_t(u) for u in cache.client.smembers(cache.keys.queued_pods)}
        for u in [u for u in queued if u not in present]:
            if incache.get(u, ("",))[0] == "added":
                queued.pop(u)
        check_queue(cache, queued)
        for uid in uids:
            if uid in incache:
                rec = cache.get_pod_record(uid)
                assert (rec.state, rec.node) == incache[uid][:2], (
                    step,
                    uid,
                    rec.state,
                    rec.node,
                    incache[uid],
                )
                assert rec.pod.labels == {"g": str(incache[uid][2])}, (
                    uid,
                    rec.pod.labels,
                    incache[uid],
                )
            else:
                assert cache.pod_state(uid) is None, uid
            stored = cache.client.get(cache.keys.prefix + "version:pod:" + uid)
            if uid in version:
                assert stored is not None and int(stored) == version[uid], (
                    uid,
                    stored,
                    version[uid],
                )


@pytest.mark.parametrize("seed", range(int(os.environ.get("H40_SEEDS", "6"))))
def test_random_model(cache: Cache, seed: int) -> None:
    run_random(cache, seed, int(os.environ.get("H40_STEPS", "120")))


# ---------------------------------------------------------------- corruption matrix


def _setup_parts(cache: Cache) -> dict[str, Any]:
    """ref: a1 active; l1, l2 leased; b1 backoff; k1 parked. other: o1 active."""
    cache.add_node(make_node("n1", "64", "64Gi"))
    for name in ("k1", "b1", "l1", "l2", "a1"):
        push(cache, pending(name))
    push(cache, pending("o1"), scheduler="other")
    q = queue(cache, backoff=(60.0, 60.0))
    popped = {item.pod.name: item.pod for item in q.pop(4, now=T0)}
    attempt = cache.last_events(1)[0].id
    assert q.retry(popped["k1"], unschedulable=True, attempt=attempt, now=T0).outcome == "parked"
    assert q.retry(popped["b1"], unschedulable=False, now=T0).outcome == "backoff"
    assert q.lengths() == {"active": 1, "leased": 2, "backoff": 1, "parked": 1}
    return popped


CORRUPT_KEYS = ["active", "leased", "backoff", "parked", "queuedpods", "queues", "queueseq"]


def _key(cache: Cache, which: str) -> str:
    if which in PARTS:
        return cache.keys.queue("ref", which)
    return cache.keys.prefix + which


def _commands(cache: Cache, popped: dict[str, Any]) -> dict[str, list[Any]]:
    v = lambda: str(next(_versions))  # noqa: E731
    out = {
        "push_new": [commands.sync_pod_pending(pending("n9"), "ref", v())],
        "requeue": [commands.sync_pod_pending(pending("a1", labels={"x": "y"}), "ref", v())],
        "move_sched": [commands.sync_pod_pending(pending("a1"), "other", v())],
        "pop": [commands.queue_pop("ref", "a", 10.0, 1, 60.0, T0)],
    }
    for name in ("a1", "l1", "b1", "k1"):
        out[f"bind_{name}"] = [commands.sync_pod(pending(name).with_node("n1"), v(), present=True)]
        out[f"del_{name}"] = [commands.sync_pod(pending(name), v(), present=False)]
    out["bind_l1_l2"] = [
        commands.sync_pod(pending("l1").with_node("n1"), v(), present=True),
        commands.sync_pod(pending("l2").with_node("n1"), v(), present=True),
    ]
    out["push_then_bind_a1"] = out["push_new"] + out["bind_a1"]
    same = commands.sync_pod(pending("l1").with_node("n1"), v(), present=True)
    out["bind_l1_twice"] = [same, same]
    other = commands.sync_pod(pending("o1").with_node("n1"), v(), present=True)
    out["bind_o1_twice"] = [other, other]
    out["retry_then_bind_l1"] = [
        commands.queue_retry("ref", "a", "l2", False, "", (60.0, 60.0), 60.0, T0),
        commands.sync_pod(pending("l1").with_node("n1"), v(), present=True),
    ]
    return out


SCENARIOS = [
    "push_new",
    "requeue",
    "move_sched",
    "pop",
    "bind_a1",
    "del_a1",
    "bind_l1",
    "del_l1",
    "bind_b1",
    "del_b1",
    "bind_k1",
    "del_k1",
    "bind_l1_l2",
    "push_then_bind_a1",
    "bind_l1_twice",
    "bind_o1_twice",
    "retry_then_bind_l1",
]


@pytest.mark.parametrize(
    ("which", "mode"),
    [(w, m) for w in CORRUPT_KEYS for m in ("single", "batch")],
)
def test_corruption_matrix(cache: Cache, which: str, mode: str) -> None:
    """Each queue key corrupt, each queue-touching command alone or in a batch: refused naming
    the key with nothing written, or applied leaving the key as it was; never a raw error."""
    problems = []
    for scenario in SCENARIOS:
        cache.clear()
        popped = _setup_parts(cache)
        key = _key(cache, which)
        cache.client.delete(key)
        cache.client.set(key, "garbage") if which != "queueseq" else cache.client.set(key, "-5")
        cmds = _commands(cache, popped)[scenario]
        if mode == "single" and len(cmds) > 1:
            continue
        before = keyspace(cache.client, cache.keys.pattern)
        outcomes = []
        try:
            if mode == "single":
                try:
                    cache.run(cmds[0])
                    outcomes.append(None)
                except CorruptRecord as error:
                    outcomes.append(error)
            else:
                batch = cache.batch()
                for cmd in cmds:
                    batch.add(cmd)
                outcomes = [r.error for r in batch.execute()]
        except Exception as error:
            problems.append(f"{scenario}: raised {type(error).__name__}: {error}")
            continue
        after = keyspace(cache.client, cache.keys.pattern)
        kb = key.encode()
        if after.get(kb) != before.get(kb):
            problems.append(f"{scenario}: corrupt key changed {before.get(kb)} -> {after.get(kb)}")
        for out in outcomes:
            if out is not None and not (isinstance(out, CorruptRecord) and which in str(out)):
                problems.append(f"{scenario}: unexpected error {out!r}")
        if all(isinstance(o, CorruptRecord) for o in outcomes) and after != before:
            problems.append(
                f"{scenario}: refused but changed "
                f"{sorted(k for k in set(after) | set(before) if after.get(k) != before.get(k))}"
            )
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- resends and the held record
def test_every_sync_pod_sent_twice_is_dropped_and_changes_nothing(cache: Cache) -> None:
    cache.add_node(make_node("n1", "64", "64Gi"))
    cache.assume_pod(make_pod("x", "n1", "10m", "1Mi"))
    push(cache, pending("x"))  # queued while assumed: "none"
    push(cache, pending("q"))
    push(cache, pending("r"))
    queue(cache).pop(1, now=T0)
    steps = [
        commands.sync_pod_pending(pending("n", labels={"a": "1"}), "ref", str(next(_versions))),
        commands.sync_pod_pending(pending("q", labels={"a": "2"}), "ref", str(next(_versions))),
        commands.sync_pod_pending(pending("q"), "s2", str(next(_versions))),
        commands.sync_pod(make_pod("x", "n1", "10m", "1Mi"), str(next(_versions)), present=True),
        commands.sync_pod(
            make_pod("x", "n1", "10m", "1Mi", labels={"b": "1"}), str(next(_versions)), present=True
        ),
        commands.sync_pod(make_pod("q", "n1", "10m", "1Mi"), str(next(_versions)), present=True),
        commands.sync_pod(make_pod("r", "", "10m", "1Mi"), str(next(_versions)), present=False),
        commands.sync_pod(make_pod("x", "n1", "10m", "1Mi"), str(next(_versions)), present=False),
    ]
    for mode in ("single", "batch"):
        for command in steps:
            if mode == "batch" and command is steps[0]:
                cache.clear()  # (the batch round runs the same changes on an empty cache)
            first = cache.run(command) if mode == "single" else None
            if mode == "batch":
                batch = cache.batch()
                batch.add(command)
                batch.add(command)
                results = batch.execute()
                assert results[0].ok and results[0].reply[0] == b"applied", results
                assert results[1].ok and results[1].reply[0] == b"dropped", results
                continue
            assert first[0] == b"applied", (command, first)
            before = keyspace(cache.client, cache.keys.pattern)
            again = cache.run(command)
            assert again[0] == b"dropped" and again[1] == b"repeated", again
            assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_batch_mixing_confirmations_updates_refusals_and_removals_keeps_every_record(
    cache: Cache,
) -> None:
    cache.add_node(make_node("n1", "64", "64Gi"))
    cache.add_node(make_node("n2", "64", "64Gi"))
    cache.add_node(make_node("bad", "64", "64Gi"))
    for name in ("a", "b", "c"):
        cache.assume_pod(make_pod(name, "n1", "10m", "1Mi"))
    cache.assume_pod(make_pod("z", "bad", "10m", "1Mi"))
    cache.client.hset(cache.keys.prefix + "node:bad", "r:cpu", "lots")
    v = lambda: str(next(_versions))  # noqa: E731
    labelled = lambda name, node, g: make_pod(name, node, "10m", "1Mi", labels={"g": g})  # noqa: E731
    batch = cache.batch()
    cmds = [
        commands.sync_pod(labelled("a", "n1", "1"), v(), present=True),  # confirm in place
        commands.sync_pod(labelled("z", "bad", "1"), v(), present=True),  # refused: corrupt node
        commands.sync_pod(labelled("b", "n2", "1"), v(), present=True),  # confirm, moved
        commands.sync_pod(labelled("a", "n1", "2"), v(), present=True),  # update
        commands.sync_pod(labelled("a", "n2", "3"), v(), present=True),  # WRONGNODE
        commands.remove_pod_by_uid("b"),
        commands.sync_pod(labelled("b", "n1", "4"), v(), present=True),  # added again
        commands.sync_pod(labelled("c", "n1", "5"), v(), present=False),  # deleted
        commands.assume_pod(labelled("c", "n2", "6")),
        commands.sync_pod(labelled("c", "n2", "7"), v(), present=True),  # confirm
        commands.add_pod(labelled("d", "n1", "8")),
    ]
    for cmd in cmds:
        batch.add(cmd)
    results = batch.execute()
    oks = [r.ok for r in results]
    assert oks == [True, False, True, True, False, True, True, True, True, True, True], results
    expect = {
        "a": ("added", "n1", "2"),
        "b": ("added", "n1", "4"),
        "c": ("added", "n2", "7"),
        "d": ("added", "n1", "8"),
        "z": ("assumed", "bad", None),
    }
    for name, (state, node, g) in expect.items():
        rec = cache.get_pod_record(name)
        assert (rec.state, rec.node) == (state, node), name
        if g:
            assert rec.pod.labels == {"g": g}, name
    versions = {
        name: cache.client.get(cache.keys.prefix + "version:pod:" + name) for name in "abcz"
    }
    assert versions["z"] is None
    assert int(versions["a"]) == int(cmds[3].args[0])
    assert int(versions["b"]) == int(cmds[6].args[0])
    assert int(versions["c"]) == int(cmds[9].args[0])
    assert cache.client.pttl(cache.keys.prefix + "version:pod:c") == -1  # no tombstone left
    assert {p.name for p in cache.get_node_info("n1").pods} == {"a", "b", "d"}
    assert {p.name for p in cache.get_node_info("n2").pods} == {"c"}


# ---------------------------------------------------------------- corruption fuzz (single calls)
@pytest.mark.parametrize("seed", range(int(os.environ.get("H40_FUZZ", "4"))))
def test_single_commands_on_a_corrupt_queue_key_are_refused_whole_or_leave_it(
    cache: Cache, seed: int
) -> None:
    rnd = random.Random(1000 + seed)
    cache.add_node(make_node("n1", "64", "64Gi"))
    uids = [f"p{j}" for j in range(8)]
    for uid in uids[:6]:
        push(cache, pending(uid), scheduler=rnd.choice(SCHEDULERS[:2]))
    for s in SCHEDULERS[:2]:
        q = SchedulingQueue(cache, s, holder="h", lease=10.0, backoff=(60.0, 60.0), parked=60.0)
        got = q.pop(3, now=T0)
        for item in got[:1]:
            q.retry(item.pod, unschedulable=False, now=T0)
        for item in got[1:2]:
            q.retry(item.pod, unschedulable=True, attempt=cache.last_events(1)[0].id, now=T0)
    s = rnd.choice(SCHEDULERS[:2])
    which = rnd.choice(CORRUPT_KEYS)
    key = cache.keys.queue(s, which) if which in PARTS else cache.keys.prefix + which
    cache.client.delete(key)
    if rnd.random() < 0.5:
        cache.client.set(key, "-1" if which == "queueseq" else "garbage")
    else:
        cache.client.rpush(key, "x")
    problems = []
    for _ in range(40):
        uid = rnd.choice(uids)
        r = rnd.random()
        v = str(next(_versions))
        if r < 0.3:
            cmd = commands.sync_pod_pending(pending(uid), rnd.choice(SCHEDULERS), v)
        elif r < 0.55:
            cmd = commands.sync_pod(pending(uid).with_node("n1"), v, present=True)
        elif r < 0.7:
            cmd = commands.sync_pod(pending(uid), v, present=False)
        elif r < 0.85:
            cmd = commands.queue_pop(rnd.choice(SCHEDULERS[:2]), "h", 10.0, 2, 60.0, T0 + 100)
        else:
            cmd = commands.queue_retry(
                rnd.choice(SCHEDULERS[:2]), "h", uid, rnd.random() < 0.5, "0-1", (1, 2), 5, T0
            )
        before = keyspace(cache.client, cache.keys.pattern)
        try:
            cache.run(cmd)
        except CorruptRecord as error:
            if key not in str(error):
                problems.append(f"{cmd.name} {cmd.args[:3]}: {error}")
            if keyspace(cache.client, cache.keys.pattern) != before:
                problems.append(f"{cmd.name} {cmd.args[:3]}: refused but wrote")
        except Exception as error:
            problems.append(f"{cmd.name} {cmd.args[:3]}: {type(error).__name__} {error}")
        else:
            if keyspace(cache.client, cache.keys.pattern).get(key.encode()) != before.get(
                key.encode()
            ):
                problems.append(f"{cmd.name} {cmd.args[:3]}: wrote the corrupt key")
    assert not problems, (which, "\n".join(problems))


@pytest.mark.parametrize("keep", ["none", "active", "leased", "backoff", "parked"])
def test_a_long_batch_of_drops_across_parts_keeps_the_entry_exactly_while_a_pod_is_left(
    cache: Cache, keep: str
) -> None:
    rnd = random.Random(keep)
    cache.add_node(make_node("n1", "640", "640Gi"))
    names = [f"p{j}" for j in range(60)]
    for name in names:
        push(cache, pending(name))
    q = queue(cache, backoff=(60.0, 60.0))
    popped = q.pop(45, now=T0)
    attempt = cache.last_events(1)[0].id
    for item in popped[:15]:
        q.retry(item.pod, unschedulable=False, now=T0)
    for item in popped[15:30]:
        q.retry(item.pod, unschedulable=True, attempt=attempt, now=T0)
    assert q.lengths() == {"active": 15, "leased": 15, "backoff": 15, "parked": 15}
    part_of = {}
    for part in PARTS:
        for m in cache.client.zrange(cache.keys.queue("ref", part), 0, -1):
            part_of[_t(m).split(":", 1)[-1]] = part
    kept = [] if keep == "none" else [rnd.choice([n for n in names if part_of[n] == keep])]
    order = [n for n in names if n not in kept]
    rnd.shuffle(order)
    batch = cache.batch()
    for j, name in enumerate(order):
        if j % 3:
            batch.add(confirm(pending(name), "n1"))
        else:
            batch.add(commands.sync_pod(pending(name), str(next(_versions)), present=False))
    assert all(r.ok for r in batch.execute())
    check_queue(cache, {n: "ref" for n in kept})
