"""Every Lua call bounded by its input, every argument checked before the first write (issue
39 items 1 and 7, issue 44 item 3). Each attack of the issues is answered with the work it
does bounded (counted by Redis' ``INFO commandstats`` where the backend keeps them: a real
Redis and a Cluster's primary; fakeredis keeps none, and there the answer itself is checked),
or with a limit refused by name and every key of the cache unchanged."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import redis

from schedcache import Cache, Node
from schedcache.errors import FitConflict, ValidationError
from schedcache.model.values import MAX_NODE_IMAGES
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands
from schedcache.store.gang import gang_claim
from schedcache.store.library import function_name
from schedcache.store.metrics import CacheCollector
from tests.factories import keyspace, make_node, make_pod, port


def command_calls(cache: Cache, *names: str) -> int | None:
    """How many times the server holding the cache ran the commands ``names`` (scripts'
    calls included), or None where the backend keeps no count (fakeredis)."""
    try:
        stats: dict[str, Any] = cache.store.server().info("commandstats")
    except redis.ResponseError:
        return None
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


def fcall(cache: Cache, function: str, *args: Any) -> Any:
    """``FCALL`` of ``sc_<command>`` as this build registers it (its name carries the tag)."""
    name = function_name(function.removeprefix("sc_"))
    return cache.client.fcall(name, 1, cache.keys.prefix, "r", "", *args)


def assert_refused(cache: Cache, function: str, args: list[Any], code: str) -> None:
    """The raw call is refused with ``code`` (naming the argument); no key changed."""
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=code):
        fcall(cache, function, *args)
    assert keyspace(cache.client, cache.keys.pattern) == before


# -- host ports (issue 39, item 1) --------------------------------------------------------------

PORTS = 4_000


def test_a_claim_of_thousands_of_wildcard_ports_reads_the_node_once(cache: Cache) -> None:
    """4,000 TCP ports held, a claim of 4,000 wildcard UDP ports: the node's port fields are
    read once per claim, not once per port (quadratic: 11.7 s of a blocked Redis)."""
    cache.add_node(make_node("n1", "4", "1Gi"))
    held = [port(10_000 + i, "10.0.0.1") for i in range(PORTS)]
    cache.add_pod(make_pod("tcp", "n1", "1m", "1Mi", ports=held))
    wanted = [port(10_000 + i, protocol="UDP") for i in range(PORTS)]
    before = command_calls(cache, "hkeys", "hexists")
    cache.assume_pod(make_pod("udp", "n1", "1m", "1Mi", ports=wanted), check_fit=True)
    after = command_calls(cache, "hkeys", "hexists")
    if before is not None and after is not None:
        assert after - before == 1
    # ...and the same index finds a conflict among thousands, on any IP.
    clash = [*wanted[:10], port(10_000 + PORTS - 1)]
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(make_pod("clash", "n1", "1m", "1Mi", ports=clash), check_fit=True)
    expected = [f"port:UDP/{10_000 + i}" for i in range(10)] + [f"port:TCP/{10_000 + PORTS - 1}"]
    assert list(info.value.reasons) == expected


# -- every argument checked before the first write (issue 39 item 7, issue 44 item 3) ----------

TOO_LONG_NAME = "u" * 1025
MALFORMED: list[tuple[str, list[Any], str]] = [
    ("sc_queue_pop", ["ref", "h", "inf", "1", "0"], "BADARG lease"),
    ("sc_queue_pop", ["ref", "h", "1e3", "1", "0"], "BADARG lease"),
    ("sc_queue_pop", ["ref", "h", "1000", "1", "nan"], "BADARG parked"),
    ("sc_queue_pop", ["ref", "h", "1000", "1", "0", "inf"], "BADARG now"),
    ("sc_queue_pop", ["ref", "h", "1000", "1", "0", "10000000000001"], "BADARG now"),
    ("sc_queue_pop", ["ref", TOO_LONG_NAME, "1000", "1", "0"], "BADARG holder"),
    ("sc_queue_retry", ["ref", "h", "u", "error", "", "inf", "1", "1"], "BADARG backoff"),
    ("sc_queue_retry", ["ref", "h", "u", "error", "", "1", "1e400", "1"], "BADARG max_backoff"),
    ("sc_queue_retry", ["ref", "h", "u", "error", "", "1", "1", "-1"], "BADARG parked"),
    ("sc_queue_retry", ["ref", "h", "u", "error", "", "1", "1", "1", "inf"], "BADARG now"),
    ("sc_queue_retry", ["ref", "h", TOO_LONG_NAME, "error", "", "1", "1", "1"], "BADARG uid"),
    ("sc_finish_binding", ["q", "", "inf"], "BADARG ttl"),
    ("sc_assume_pod", ["new", "n1", b"\x81\xa1a\x01", "", "", "", "inf"], "BADARG lease"),
    ("sc_timed_claim", ["inf", "new", "n1", b"\x81\xa1a\x01", "", "fit"], "BADARG ttl"),
    ("sc_timed_claim", ["0", "new", "n1", b"\x81\xa1a\x01", "", "fit"], "BADARG ttl"),
    ("sc_timed_claim", ["1000", "new", "n1", b"\x81\xa1a\x01", "", "", "", "inf"], "BADARG lease"),
    ("sc_add_pod", [TOO_LONG_NAME, "n1", b"\x81\xa1a\x01", ""], "BADARG uid"),
    ("sc_add_pod", ["new", "n" * 1025, b"\x81\xa1a\x01", ""], "BADARG node"),
    ("sc_add_pod", ["new", "n1", "x" * (1024 * 1024 + 1), ""], "BADARG blob"),
    ("sc_add_pod", ["new", "n1", "garbage", ""], "BADARG blob"),  # not a msgpack map
    ("sc_add_node", ["n2", "", "garbage", "0", "0"], "BADARG blob"),
    ("sc_cleanup_assumed_pods", ["", "1001"], "BADARG limit"),
    ("sc_cleanup_assumed_pods", ["inf", "10"], "BADARG now"),
    ("sc_forget_lapsed", ["1001"], "BADARG limit"),
    ("sc_forget_lapsed", ["inf"], "BADARG limit"),
    ("sc_read_nodes", [f"n{i}" for i in range(201)], "BADARG names"),
    ("sc_read_node_deltas", ["0", *[f"n{i}" for i in range(201)]], "BADARG names"),
    ("sc_read_node_deltas", ["inf", "n1"], "BADARG generation"),
    ("sc_snapshot_delta", ["0", "0", "201"], "BADARG limit"),
    ("sc_snapshot_delta", ["nan", "0", "0"], "BADARG generation"),
    ("sc_batch", ["forget_pod", "0"] * 1001, "BADARG commands: more than 1000"),
    ("sc_batch", ["add_pod", "4", "u", "n1", "\x81" * (4 << 20), ""], "BADARG bytes"),
    ("sc_sync_pod", ["7", "queue", "u", "ref", "0", "garbage"], "BADARG blob"),
    ("sc_sync_pod", ["7", "queue", "u", "ref", "0", "\x81" + "x" * 1024 * 1024], "BADARG blob"),
    ("sc_sync_pod", ["7", "set", "u", "n1", "garbage", ""], "BADARG blob"),
]


@pytest.mark.parametrize(
    ("function", "args", "code"),
    MALFORMED,
    ids=[f"{function}-{code}-{i}" for i, (function, _, code) in enumerate(MALFORMED)],
)
def test_a_malformed_argument_is_refused_by_name_and_writes_nothing(
    cache: Cache, function: str, args: list[Any], code: str
) -> None:
    """Numbers that are not finite integers in range (``inf`` passed every floor check: a
    retry back-off ``inf`` wrote a record no sync could read back, a pop at ``now=inf`` leased
    a pod forever), names and blobs past their size, counts past the published caps."""
    cache.add_node(make_node("n1", "4", "1Gi"))
    cache.assume_pod(make_pod("q", "n1", "1m", "1Mi"))
    assert_refused(cache, function, args, code)


# Integer arguments take exactly what Redis' own INCR reads as one ('-' the only sign, no
# leading zero, no space, within int64), whatever tonumber() would take (lua/_helpers.lua,
# int_arg: a string.find without captures, then tonumber; the same inputs as string.match's).
NOT_INTEGERS = ["+5", " 5", "5 ", "\n5", "5\n", "-0", "00", "07", "1e3", "0x10", "", "-", "--1"]
NOT_INTEGERS += ["5.0", "inf", "nan", "9223372036854775808", "-9223372036854775809", "1" * 20]
INTEGERS = ["0", "7", "-7", "1795907917197", "922337203685477580", "-922337203685477580"]
INTEGERS += ["9223372036854775807", "-9223372036854775808", "1000000000000000000"]


@pytest.mark.parametrize("value", NOT_INTEGERS)
def test_an_integer_argument_refuses_what_tonumber_would_take(cache: Cache, value: str) -> None:
    cache.add_node(make_node("n1", "4", "1Gi"))
    cache.assume_pod(make_pod("q", "n1", "1m", "1Mi"))
    assert_refused(cache, "sc_snapshot_delta", [value, "0", "-1"], "BADARG generation")
    assert_refused(cache, "sc_snapshot_delta", ["0", "0", value], "BADARG limit")
    assert_refused(cache, "sc_forget_lapsed", [value], "BADARG limit")
    if value != "":  # (an empty `now` is the server's time)
        assert_refused(cache, "sc_queue_pop", ["ref", "h", "1000", "1", "0", value], "BADARG now")


@pytest.mark.parametrize("value", INTEGERS)
def test_an_integer_argument_takes_every_int64(cache: Cache, value: str) -> None:
    """Within its range: a generation is any int64 (the head read answers), a limit is not."""
    cache.add_node(make_node("n1", "4", "1Gi"))
    reply = fcall(cache, "sc_snapshot_delta", value, "0", "-1")
    assert int(reply[0]) == cache.generation()
    if value in ("0", "7"):
        assert fcall(cache, "sc_snapshot_delta", "0", "0", value)[0] == reply[0]
    else:
        assert_refused(cache, "sc_snapshot_delta", ["0", "0", value], "BADARG limit")


def test_a_batch_at_the_cap_runs(cache: Cache) -> None:
    """The cap is a bound, not a ban: 1,000 commands in one call are applied."""
    batch = cache.batch(chunk_size=1000)
    for i in range(1000):
        batch.add_pod(make_pod(f"p{i}", "n1", "1m", "1Mi"))
    results = batch.execute()
    assert len(results) == 1000 and all(result.error is None for result in results)
    assert cache.client.scard(f"{cache.keys.prefix}pods") == 1000


def test_a_batch_of_large_pods_is_sent_in_calls_of_at_most_4_mib(cache: Cache) -> None:
    """Twelve pods of ~0.8 MiB in one batch (chunk size 200): the batch cuts its groups by
    bytes too, so each call stays under lua/batch.lua's 4 MiB (which refuses more whole)."""
    labels = big("x").labels
    calls = command_calls(cache, "fcall")
    batch = cache.batch()  # groups are sent as they fill
    for i in range(12):
        batch.add_pod(make_pod(f"b{i}", "n1", "1m", "1Mi", labels=labels))
    results = batch.execute()
    assert all(result.error is None for result in results)
    assert cache.client.scard(f"{cache.keys.prefix}pods") == 12
    after = command_calls(cache, "fcall")
    if calls is not None and after is not None:
        assert after - calls >= 3


def test_claims_after_many_node_changes_in_one_batch_are_stale_not_read_node_by_node(
    cache: Cache,
) -> None:
    """The 256-changed-nodes bound counts the nodes an sc_batch changed before the claim (a
    batch of 1,000 node updates and 200 claims read 200,000 nodes: 5.0 s); past it a claim is
    refused ``stale``, to be decided again on a fresher snapshot."""
    cache.add_node(make_node("n0", "4", "1Gi"))
    since = cache.generation()
    batch = cache.batch(chunk_size=400)
    for i in range(1, 300):
        batch.add_node(make_node(f"n{i}", "4", "1Gi"))
    for i in range(5):
        claim = commands.assume_pod(
            make_pod(f"c{i}", "n0", "1m", "1Mi"), check_fit=True, since=since, reads=""
        )
        batch.add(claim)
    results = batch.execute()
    refused = [result.error for result in results[-5:]]
    assert all(isinstance(error, FitConflict) and error.reasons == ("stale",) for error in refused)


def reads_naming(count: int, size: int) -> str:
    """A claim's reads of one anti-affinity rule: nodes ``n0..n<count-1>`` and filler names
    (``x<i>``, nodes the cache does not hold) up to ``size`` characters."""
    names = [f"n{i}" for i in range(count)]
    text = "@pod-anti-affinity " + " ".join(names)
    filler = " ".join(f"x{i:07d}" for i in range(size // 9 + 1))
    text = (text + " " + filler)[:size]
    return text[:-1] + "z" if text.endswith(" ") else text  # exactly `size` characters


def test_a_claims_reads_are_bounded_in_bytes_by_name_and_change_nothing(cache: Cache) -> None:
    """Reads and domains over 1 MiB together: refused by the library (ValidationError naming
    ``reads``) and by Redis for a caller that skips it (BADARG reads), nothing written. Before,
    a 50 MB ``reads`` with 250 nodes changed held Redis 22 s in one call."""
    cache.add_node(make_node("n0", "4", "1Gi"))
    since = cache.generation()
    cache.add_node(make_node("n1", "4", "1Gi"))
    pod = make_pod("big", "n0", "1m", "1Mi")
    too_long = reads_naming(2, commands.MAX_READS_BYTES + 1)
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError) as refused:
        commands.assume_pod(pod, check_fit=True, since=since, reads=too_long)
    assert refused.value.field == "reads"
    fits = commands.assume_pod(pod, check_fit=True, since=since, reads=reads_naming(2, 1000))
    raw = list(fits.args)
    raw[raw.index(reads_naming(2, 1000))] = too_long
    with pytest.raises(redis.ResponseError, match="BADARG reads big"):
        fcall(cache, "sc_assume_pod", *raw)
    assert keyspace(cache.client, cache.keys.pattern) == before
    at_the_bound = reads_naming(1, commands.MAX_READS_BYTES)  # n1 (changed) not read
    assert cache.run(commands.assume_pod(pod, check_fit=True, since=since, reads=at_the_bound))
    assert cache.pod_state("big") == "assumed"


def changed_beside_n0(cache: Cache, changed: int, cpu: str = "64", mem: str = "64Gi") -> int:
    """Nodes ``n0..n<changed>``; then ``n1..n<changed>`` each given a pod after the generation
    returned (``n0`` unchanged since)."""
    batch = cache.batch()
    for i in range(changed + 1):
        batch.add_node(make_node(f"n{i}", cpu, mem))
    batch.execute()
    since = cache.generation()
    batch = cache.batch()
    for i in range(1, changed + 1):
        batch.add_pod(make_pod(f"f{i}", f"n{i}", "1m", "1Mi"))
    batch.execute()
    return since


def test_a_claim_whose_reads_would_be_searched_past_the_calls_budget_is_stale(
    cache: Cache,
) -> None:
    """Each node changed since the snapshot is searched for in the reads: past the call's
    budget (BOUNDS.MAX_READS_SCAN) the claim is refused ``stale``, before any search, and the
    same claim decided on a fresher snapshot (fewer nodes changed since) is taken."""
    # 250 nodes changed since: 250 searches of ~1 MB, past 256 MiB with the check's 16
    since = changed_beside_n0(cache, 250, "4", "1Gi")
    pod = make_pod("web", "n0", "1m", "1Mi")
    reads = reads_naming(1, commands.MAX_READS_BYTES - 100)  # names n0 only: no rule broken
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(FitConflict) as refused:
        cache.run(commands.assume_pod(pod, check_fit=True, since=since, reads=reads))
    assert refused.value.reasons == ("stale",)
    assert "more of the cache did than one claim may re-check" in str(refused.value)
    assert keyspace(cache.client, cache.keys.pattern) == before
    fresh = cache.generation()
    assert cache.run(commands.assume_pod(pod, check_fit=True, since=fresh, reads=reads))
    assert cache.pod_state("web") == "assumed"


def test_a_gang_of_large_reads_a_few_node_changes_after_its_snapshot_is_taken(
    cache: Cache,
) -> None:
    """The budget is the call's, its members together: a gang of 64 members of ~50 KB of reads
    each (a rule read on ~2,000 nodes of real-length names) with 30 nodes changed since its
    snapshot is taken (a 128 MiB budget refused it `stale` at its 58th member: review); and
    a claim of 1 MiB of rules naming 100 changed nodes, each a pass over every rule (1.9 s of
    Redis before), is refused `stale` once the passes spend the budget."""
    since = changed_beside_n0(cache, 100)  # the gang's reads name none of them
    reads = reads_naming(1, 50_000)
    members = [(make_pod(f"m{i}", "n0", "1m", "1Mi"), reads, "") for i in range(64)]
    # (30 of the 100 changed: the gang's snapshot is the generation after the 70th placement)
    after_70 = since + 70
    assert cache.run(gang_claim("default/g", members, since=after_70))
    assert cache.pod_state("m63") == "assumed"
    rule = "@pod-anti-affinity:app=web " + " ".join(f"n{i}" for i in range(1, 101))
    named = " ".join([rule] * (commands.MAX_READS_BYTES // (len(rule) + 1)))
    with pytest.raises(FitConflict) as refused:
        cache.run(
            commands.assume_pod(make_pod("w", "n0", "1m", "1Mi"), True, since=since, reads=named)
        )
    assert refused.value.reasons == ("stale",)


def test_a_gang_whose_reads_name_the_changed_nodes_is_taken(cache: Cache) -> None:
    """64 members each reading every node (~50 KB: ~2,000 nodes of real-length names), 10 of
    them given a pod no rule selects since the snapshot: no rule is broken, and one pass over
    each member's rules serves every changed node (a pass a changed node refused it `stale`
    at its 28th member: second review)."""
    since = changed_beside_n0(cache, 10)
    text = "@pod-anti-affinity:app=web " + " ".join(f"n{i}" for i in range(11)) + " "
    reads = (text + " ".join(f"x{i:07d}" for i in range(50_000 // 9)))[:50_000].rstrip()
    members = [(make_pod(f"m{i}", "n0", "1m", "1Mi"), reads, "") for i in range(64)]
    assert cache.run(gang_claim("default/g", members, since=since))
    assert cache.pod_state("m63") == "assumed"


def test_a_claim_of_many_domain_keys_is_answered_not_failed(cache: Cache) -> None:
    """~36,000 one-key lines of `domains` with an anti-affinity pod placed since: the node's
    counts are read in bounded HMGETs (one unpack of them all failed the call with a raw Lua
    error, 'too many results to unpack': second review)."""
    for i in range(3):
        cache.add_node(make_node(f"n{i}", "64", "64Gi"))
    since = cache.generation()
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
            ]
        }
    }
    cache.add_pod(make_pod("a1", "n1", "1m", "1Mi", affinity=anti))
    domains = "\n".join(f"k{i} y0 y1 y2" for i in range(36_000))[: commands.MAX_READS_BYTES]
    claim = commands.assume_pod(
        make_pod("c", "n0", "1m", "1Mi"), True, since=since, domains=domains
    )
    with pytest.raises(FitConflict) as refused:  # a1's term under a key the domains lack
        cache.run(claim)
    assert refused.value.reasons == ("existing-anti-affinity",)


SMALL_READS = (
    "@pod-anti-affinity:app=zzz q0 q1 @pod-affinity:app=yyy q2 @topology-spread:app=xxx q3 q4"
)


def nodes_changed_since(cache: Cache, changed: int, targets: int) -> int:
    """``changed`` nodes given a pod after the generation returned; ``targets`` roomy ones."""
    batch = cache.batch(chunk_size=1000)
    for i in range(changed):
        batch.add_node(make_node(f"n{i}", "64", "64Gi"))
    for t in range(targets):
        batch.add_node(make_node(f"t{t}", "640", "640Gi", pods="1000"))
    batch.execute()
    since = cache.generation()
    batch = cache.batch(chunk_size=1000)
    for i in range(changed):
        batch.add_pod(make_pod(f"f{i}", f"n{i}", "1m", "1Mi"))
    batch.execute()
    return since


def test_a_default_batch_of_small_claims_after_100_changed_nodes_is_taken(cache: Cache) -> None:
    """200 claims (Cache.batch's default chunk) of 3 rules naming no changed node, 100 nodes
    given a pod since: only a node a rule reads pays for its rules' reads (charging every
    changed node for them refused the last 52 `stale`: third review)."""
    since = nodes_changed_since(cache, 100, 10)
    batch = cache.batch()
    for i in range(200):
        pod = make_pod(f"c{i}", f"t{i % 10}", "1m", "1Mi")
        batch.add(commands.assume_pod(pod, check_fit=True, since=since, reads=SMALL_READS))
    assert [result.error for result in batch.execute()] == [None] * 200


def test_a_gang_of_small_reads_after_190_changed_nodes_is_taken(cache: Cache) -> None:
    """64 members, 3 rules and 3 domain lines each, none naming a changed node: taken (it was
    refused `stale` as a whole: third review)."""
    since = nodes_changed_since(cache, 190, 64)
    domains = "zone q0 q1\nrack q0\nrow q1"
    members = [(make_pod(f"m{i}", f"t{i}", "1m", "1Mi"), SMALL_READS, domains) for i in range(64)]
    assert cache.run(gang_claim("default/g", members, since=since))


# -- the queue (issue 39, item 7) ---------------------------------------------------------------

T0 = 1_700_000_000.0
_versions = iter(range(100, 10**9))


def pending(name: str, **kwargs: Any) -> Any:
    return make_pod(name, "", "1m", "1Mi", **kwargs)


def push(cache: Cache, pod: Any, scheduler: str = "ref") -> Any:
    return cache.run(commands.sync_pod_pending(pod, scheduler, str(next(_versions))))


def big(name: str) -> Any:
    """A pending pod of ~0.8 MiB of msgpack (12,000 labels)."""
    return pending(name, labels={f"k{i}": "v" * 60 for i in range(12_000)})


def test_a_pop_reads_and_moves_a_bounded_number_of_bytes(cache: Cache) -> None:
    """Pods of ~0.8 MiB: one pop leases at most ~2 MiB of them (not 100), and the lapsed
    leases it brings back are bounded the same way (300 pods of 0.9 MiB made one pop 2 s)."""
    for i in range(8):
        push(cache, big(f"big{i}"))
    queue = SchedulingQueue(cache, "ref", holder="a", lease=10.0)
    first = queue.pop(100, now=T0)
    assert 1 <= len(first) <= 4
    rest = queue.pop(100, now=T0) + queue.pop(100, now=T0)
    assert len(first) + len(rest) == 8  # the rest came with the next pops
    leased = f"{cache.keys.prefix}queue:ref:leased"
    assert cache.client.zcard(leased) == 8
    # Every lease lapses: one pop brings back (and rewrites) a bounded share of them.
    queue.pop(1, now=T0 + 60)
    assert cache.client.zcard(leased) >= 2


def park(cache: Cache, count: int) -> SchedulingQueue:
    queue = SchedulingQueue(cache, "ref", holder="a", lease=10.0)
    for i in range(count):
        push(cache, pending(f"p{i}"))
    attempt = cache.last_events(1)[0].id if cache.last_events(1) else ""
    popped = []
    while len(popped) < count:
        popped += queue.pop(100, now=T0)
    for item in popped:
        assert queue.retry(item.pod, unschedulable=True, attempt=attempt, now=T0).outcome == (
            "parked"
        )
    return queue


def test_the_wake_scan_reads_each_event_once_with_more_than_a_pops_share_parked(
    cache: Cache,
) -> None:
    """150 parked pods, one helpful event: the first pop wakes 100 and moves its cursor past
    the event; the next wakes the other 50 without reading it again (it reread the same
    window on every pop: ~0.45 s a pop), and a third wakes no one."""
    cache.add_node(make_node("n0", "4", "1Gi"))
    queue = park(cache, 150)
    parked = f"{cache.keys.prefix}queue:ref:parked"
    assert cache.client.zcard(parked) == 150
    cache.add_node(make_node("n1", "4", "1Gi"))  # NodeAdded: helps every parked pod
    event = cache.last_events(1)[0].id
    queue.pop(1, now=T0 + 1)
    cursor = cache.client.hget(cache.keys.queues, "ref")
    assert cursor is not None and cursor.split()[0].decode() == event
    assert cache.client.zcard(parked) == 50
    queue.pop(1, now=T0 + 1)
    assert cache.client.zcard(parked) == 0
    assert cache.client.hget(cache.keys.queues, "ref") == event.encode()  # nothing owed
    # Woken pods wait out their back-off, then pop; parked again, no old event wakes them.
    assert queue.lengths()["parked"] == 0


def test_a_record_with_an_unreadable_body_is_stepped_over(cache: Cache) -> None:
    """A valid header and a body that is no msgpack: the pop that meets it returns the other
    pods and takes it out of the queue; later pops are not refused (every pop raised
    CorruptRecord)."""
    for name in ("a", "b", "c"):
        push(cache, pending(name))
    key = f"{cache.keys.prefix}queued:{pending('b').uid}"
    header = cache.client.get(key).split(b"\n", 1)[0]
    cache.client.set(key, header + b"\n\x81\xc1\x00")  # 0xc1: never used by msgpack
    queue = SchedulingQueue(cache, "ref", holder="a", lease=10.0)
    assert [item.pod.name for item in queue.pop(10, now=T0)] == ["a", "c"]
    assert cache.client.exists(key) == 0
    assert queue.pop(10, now=T0) == []
    assert queue.lengths() == {"active": 0, "leased": 2, "backoff": 0, "parked": 0}


def test_a_schedulers_bookkeeping_goes_with_its_last_pod(cache: Cache) -> None:
    """5,000 scheduler names once seen left 20,000 permanent /metrics series: each name's
    entry goes with its last pod, whether bound, deleted or moved to another scheduler."""
    names = [f"sched-{i}" for i in range(20)]
    pods = [pending(f"p-{name}") for name in names]
    for name, pod in zip(names, pods, strict=True):
        push(cache, pod, scheduler=name)
    assert cache.client.hlen(cache.keys.queues) == 20
    for pod in pods[:10]:
        cache.run(commands.sync_pod(pod, str(next(_versions)), present=False))
    for pod in pods[10:]:
        push(cache, pod, scheduler="default-scheduler")
    assert cache.client.hkeys(cache.keys.queues) == [b"default-scheduler"]
    (series,) = [m for m in CacheCollector(cache).collect() if m.name.endswith("pending_pods")]
    assert {sample.labels["scheduler"] for sample in series.samples} == {"default-scheduler"}


def test_an_expiry_call_stops_at_its_byte_bound_and_says_more_are_due(cache: Cache) -> None:
    """Each expired pod's event carries its msgpack: ten pods of ~0.8 MiB due, one call at
    limit 1,000 settles a bounded share and answers that more are due; the Cache's sweep
    goes on until all are expired."""
    cache.add_node(make_node("n1", "4", "1Gi"))
    pods = [make_pod(f"e{i}", "n1", "1m", "1Mi", labels=big("x").labels) for i in range(10)]
    for pod in pods:
        cache.assume_pod(pod)
        cache.finish_binding(pod, now=T0)
    expired, skipped, more = cache.run(commands.cleanup_assumed_pods(T0 + 3600, 1000))
    assert 1 <= len(expired) <= 4 and skipped == [] and more == 1
    assert len(cache.cleanup_assumed_pods(now=T0 + 3600)) == 10 - len(expired)


# -- nodes: images and resources one node brings -------------------------------------------------


def test_a_node_brings_at_most_a_thousand_image_names(cache: Cache) -> None:
    """Each image name is a write of the image index (10,000 replaced took 356 ms): a manifest
    keeps its first 1,000 (the kubelet reports 50 by default); a Node built with more is
    refused naming the field, and so is a raw call; nothing changes."""
    images = [{"names": [f"img-{i}"], "sizeBytes": 1} for i in range(1500)]
    manifest = {"metadata": {"name": "n1"}, "status": {"images": images}}
    node = Node.from_k8s(manifest)
    assert sum(len(names) for names, _ in node.images) == MAX_NODE_IMAGES
    cache.add_node(node)
    assert len(cache.get_node_info("n1").node.images) == MAX_NODE_IMAGES
    before = keyspace(cache.client, cache.keys.pattern)
    more = replace(node, images=tuple(((f"x{i}",), 1) for i in range(MAX_NODE_IMAGES + 1)))
    with pytest.raises(ValidationError, match=r"node n1: status\.images: 1001 names, over"):
        cache.update_node(node, more)
    assert keyspace(cache.client, cache.keys.pattern) == before
    raw = ["n2", "", b"\x80", "0", str(MAX_NODE_IMAGES + 1)]
    assert_refused(cache, "sc_add_node", raw, "BADARG images-count")
    assert_refused(cache, "sc_add_node", ["n2", "", b"\x80", "1001"], "BADARG allocatable-count")


@pytest.mark.parametrize("reader", ["forget_pod", "assume_pod", "sync_pod"])
def test_a_pod_record_without_a_newline_is_refused_at_once(cache: Cache, reader: str) -> None:
    """(Found in review: matched whole, such a record's header backtracked over every length
    of its claimer, each time scanning the rest: 20 KB held Redis for seconds, 1 MiB hours.)"""
    import time

    from schedcache.errors import CorruptRecord

    pod = make_pod("r", "n1", "100m", "1Mi")
    command = {
        "forget_pod": commands.forget_pod(pod),
        "assume_pod": commands.assume_pod(pod, check_fit=True),
        "sync_pod": commands.sync_pod(pod, "9", present=True),
    }[reader]
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.client.set(cache.keys.prefix + "pod:r", b"assumed n1 0 - 5 " + b"c" * 20_000)
    before = keyspace(cache.client, cache.keys.pattern)
    started = time.perf_counter()
    with pytest.raises(CorruptRecord, match="pod:r"):
        cache.run(command)
    assert time.perf_counter() - started < 0.5  # (a bound, not a pace: ~1 ms here)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_claim_of_thousands_of_resources_and_ports_gets_a_fit_answer(cache: Cache) -> None:
    """(Found in review: the fit check's one read of the node took 2 + fields + resources
    names, past what Lua unpacks: a raw script error where two reads answered.)"""
    cache.add_node(make_node("n1", "4", "8Gi"))
    pod = make_pod(
        "big",
        "n1",
        "100m",
        "1Mi",
        extended={f"example.com/r{i}": "1" for i in range(3000)},
        ports=[port(10_000 + i) for i in range(3000)],
    )
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(FitConflict):  # the node has none of the resources
        cache.assume_pod(pod, check_fit=True)
    assert keyspace(cache.client, cache.keys.pattern) == before
