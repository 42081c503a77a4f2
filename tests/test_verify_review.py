"""A stranger's review of verify's invariants read a chunk of nodes at one event, with what spans
chunks read again for the suspects alone (stop 60): what it found wrong in the first version
(each test says what that version did), and what it checked and found right."""

from __future__ import annotations

import functools
import types

from tests.factories import make_node, make_pod
from tests.test_audit import anti_pod, commands_between_the_reads


def commands_before_each_recheck(monkeypatch, between) -> list[int]:
    """Run ``between(try_number)`` just before each read of the suspects at one event
    (``_recheck_pods``'s ``at_one_point``)."""
    from schedcache.history import invariants

    at_one_point, tries = invariants.at_one_point, []

    def raced(store, reads):
        if isinstance(reads, functools.partial) and reads.func is invariants._suspect_reads:
            tries.append(len(tries))
            between(tries[-1])
        return at_one_point(store, reads)

    monkeypatch.setattr(invariants, "at_one_point", raced)
    return tries


def test_a_pod_claimed_anew_before_every_recheck_is_no_difference(make_cache, monkeypatch):
    """A false positive found in review. A pod the scheduler keeps assuming, forgetting and
    assuming on another node (binding fails every time) while verify runs: each recheck
    finds its record naming a node it did not read, and after ``COVER_ATTEMPTS`` rechecks
    the last one's reading was used anyway: the pod was reported on no node
    (``nodes: expected 'exactly one', found []``) on a consistent cache. A suspect whose
    record still names a node not read on the last try is left unchecked, as the
    chunks leave the pods that keep arriving."""
    from schedcache.history import invariants

    monkeypatch.setattr(invariants, "NODES_PER_POINT", 1)
    cache, writer = make_cache(), make_cache(replica="writer")
    names = [f"n{i}" for i in range(8)]
    for name in names:
        cache.add_node(make_node(name, "8", "8Gi"))
    cache.assume_pod(make_pod("retried", "n0", "10m", "1Mi"))
    where = {"node": "n0"}

    def claim_again(node: str) -> None:
        writer.forget_pod(make_pod("retried", where["node"], "10m", "1Mi"))
        writer.assume_pod(make_pod("retried", node, "10m", "1Mi"))
        where["node"] = node

    def between_chunks(attempt: int) -> None:
        if attempt == 1:  # n0 read: the pod now on n7, read last (found on n0 and n7: suspect)
            claim_again("n7")

    def between_rechecks(attempt: int) -> None:
        claim_again(names[1 + attempt])  # n1, n2, n3, n4: never where the try reads

    commands_between_the_reads(monkeypatch, between_chunks)
    rechecks = commands_before_each_recheck(monkeypatch, between_rechecks)
    found = [str(d) for d in invariants.invariants(cache.store)]
    assert len(rechecks) == invariants.COVER_ATTEMPTS
    monkeypatch.undo()
    assert cache.verify() == []  # the cache is consistent
    assert found == []


def test_a_placed_pod_removed_from_the_pods_set_is_reported(make_cache):
    """A false negative found in review. ``SREM pods <uid>`` of a pod placed on a node: the
    code before (28a5dab) reported it (it read only the records of ``pods``, so the pod's
    record and its node's totals showed as wrong); the chunks read every placed pod's record,
    and nothing suspected a placed pod missing from ``pods``: ``verify()`` was silent."""
    cache = make_cache()
    cache.add_node(make_node("n0", "8", "8Gi"))
    cache.add_pod(make_pod("p", "n0", "10m", "1Mi"))
    assert cache.verify() == []
    cache.client.srem(cache.keys.pods, "p")
    assert cache.verify() != []


def test_pods_on_a_node_removed_from_the_nodes_set_are_reported(make_cache):
    """A false negative found in review. ``SREM nodes n1`` while pods sit on n1 (its hash and
    pods zset left): 28a5dab reported each of its pods on no node; now the chunks never read
    n1, its pods are suspects, and the recheck found them in n1's zset (it read the node
    the record names, never whether that node is in ``nodes``): nothing was reported, and
    ``compare`` reads n1 directly (the fold has it), so ``verify()`` was silent."""
    cache = make_cache()
    for name in ("n0", "n1"):
        cache.add_node(make_node(name, "8", "8Gi"))
    cache.add_pod(make_pod("p", "n1", "10m", "1Mi"))
    assert cache.verify() == []
    cache.client.srem(cache.keys.nodes, "n1")
    assert cache.verify() != []


def test_hand_corruption_is_reported_as_before(make_cache):
    """Checked and right: the corruptions the brief lists still show, one at a time."""
    from schedcache.history.invariants import invariants

    cache = make_cache()
    for name in ("n0", "n1", "n2"):
        cache.add_node(make_node(name, "8", "8Gi"))
    for i in range(6):
        cache.add_pod(make_pod(f"p{i}", f"n{i % 3}", "10m", "1Mi"))
    cache.assume_pod(make_pod("a0", "n1", "10m", "1Mi"))
    cache.add_pod(anti_pod("guard", "n2"))
    assert invariants(cache.store) == []
    keys, client = cache.keys, cache.client
    edits = [
        (lambda: client.hincrby(keys.node("n0"), "r:cpu", 5), ("node n0", "r:cpu")),
        (lambda: client.hincrby(keys.node("n0"), "r:cpu", -5), None),
        (
            lambda: client.zadd(
                keys.node_pods("n1"), {"p0": client.zscore(keys.node_pods("n0"), "p0")}
            ),
            ("pod p0", "nodes"),
        ),
        (lambda: client.zrem(keys.node_pods("n1"), "p0"), None),
        (lambda: client.srem(keys.pods, "a0"), ("pod a0", "assumed")),
        (lambda: client.sadd(keys.pods, "a0"), None),
        (lambda: client.incr(keys.anti_affine_pods), ("cache", "antipods")),
        (lambda: client.decr(keys.anti_affine_pods), None),
        (lambda: client.zrem(keys.node_generations, "n1"), ("node n1", "generation index")),
    ]
    for edit, expected in edits:
        edit()
        found = {(d.subject, d.field) for d in invariants(cache.store)}
        assert (expected in found) if expected else found == set(), (expected, found)
    client.zadd(keys.node_generations, {"n1": 0})
    assert invariants(cache.store) == []
    raw = client.get(keys.pod("p1"))
    client.delete(keys.pod("p1"))
    assert ("pod p1", "record") in {(d.subject, d.field) for d in invariants(cache.store)}
    client.set(keys.pod("p1"), raw)
    assert invariants(cache.store) == []


def test_a_negative_total_on_a_node_receiving_pods_is_reported(make_cache, monkeypatch):
    """A false negative while commands flow, found in review. A node whose pods arrive before
    every read is left with its totals unchecked, and the early return skipped the ``>= 0``
    check too, which needs no pod's record. 28a5dab kept what all five runs found and
    reported the negative total (it is in every run)."""
    from schedcache.history.invariants import invariants

    cache, writer = make_cache(), make_cache(replica="writer")
    cache.add_node(make_node("busy", "64", "64Gi"))
    cache.add_pod(make_pod("first", "busy", "10m", "1Mi"))
    cache.client.hset(cache.keys.node("busy"), "r:cpu", -7000)
    commands_between_the_reads(
        monkeypatch, lambda n: writer.add_pod(make_pod(f"new{n}", "busy", "10m", "1Mi"))
    )
    found = {(d.subject, d.field, d.expected) for d in invariants(cache.store)}
    assert ("node busy", "r:cpu", ">= 0") in found


def test_a_reader_runs_every_read_of_the_invariants_while_commands_flow(
    tmp_path_factory, monkeypatch
):
    """Checked and right: the reader role (``schedcache acl --role reader``) is granted every
    command the invariants send on their slow paths too: the transaction (no quiet pipeline),
    the suspects' recheck (SISMEMBER, ZSCORE) and the whole-cache ``antipods`` read (HGET)."""
    from click.testing import CliRunner

    from schedcache import Cache, connect
    from schedcache.cli.app import main
    from schedcache.history import invariants, verify
    from tests.servers import Server, free_port
    from tests.test_acl import denials, make_user, url

    server = Server(free_port(), tmp_path_factory.mktemp("review-acl"), []).start()
    try:
        result = CliRunner().invoke(main, ["--redis", url(server, "default", ""), "scripts"])
        assert result.exit_code == 0, result.output
        name = "tenant-r"
        admin_url = make_user(server, "r-admin", name, "admin")
        reader_url = make_user(server, "r-reader", name, "reader")
        writer = Cache(connect(admin_url), name, replica="writer")
        for node in ("n0", "n1", "n2"):
            writer.add_node(make_node(node, "8", "8Gi"))
        writer.add_pod(make_pod("mover", "n0", "10m", "1Mi"))
        writer.add_pod(anti_pod("guard", "n1"))
        server.client().acl_log_reset()
        monkeypatch.setattr(invariants, "NODES_PER_POINT", 1)
        monkeypatch.setattr(
            verify, "POINT_ATTEMPTS", 0
        )  # every read a transaction (antipods: none)

        def between(attempt: int) -> None:
            if attempt == 1:  # n0 read: the pod moves to n2 (found on two nodes)
                writer.remove_pod(make_pod("mover", "n0", "10m", "1Mi"))
                writer.add_pod(make_pod("mover", "n2", "10m", "1Mi"))
            if attempt == 2:  # n1 read with the guard: the chunks' sum is one too many
                writer.remove_pod(anti_pod("guard", "n1"))

        commands_between_the_reads(monkeypatch, between)
        reader = Cache(connect(reader_url), name)
        server.client().config_resetstat()
        assert invariants.invariants(reader.store) == []
        monkeypatch.undo()
        monkeypatch.setattr(invariants, "NODES_PER_POINT", 1)
        writer.add_pod(anti_pod("guard", "n1"))

        def back(attempt: int) -> None:
            if attempt == 1:  # n0 read: the pod moves back to n0 (found on none)
                writer.remove_pod(make_pod("mover", "n2", "10m", "1Mi"))
                writer.add_pod(make_pod("mover", "n0", "10m", "1Mi"))
            if attempt == 2:
                writer.remove_pod(anti_pod("guard", "n1"))

        commands_between_the_reads(monkeypatch, back)  # quiet pipelines this time
        assert invariants.invariants(reader.store) == []
        stats = server.client().info("commandstats")
        for command in ("exec", "sismember", "zscore", "hget"):  # every slow path ran
            assert stats.get(f"cmdstat_{command}", {}).get("calls"), command
        monkeypatch.undo()
        assert reader.verify() == []
        result = CliRunner().invoke(main, ["--redis", reader_url, "--cache", name, "verify"])
        assert result.exit_code == 0, result.output
        assert denials(server) == []
    finally:
        server.stop() if hasattr(server, "stop") else server.kill(15)


def test_no_transaction_spans_more_than_a_chunk_of_nodes(make_cache, monkeypatch, caplog):
    """Found in review: with pods with required anti-affinity coming and going, the chunks'
    sum of ``anti`` rarely equals ``antipods``, and the first version read every node's count
    again in one transaction, the whole cache (20,000 nodes under a writer of anti-affine pods:
    1.9-4.2 s of failed pipelines, then an EXEC whose SMEMBERS alone took 10-20 ms, against
    2.5 ms a chunk). Now that read is a pipeline the stream did not move under, never a
    transaction: while commands keep flowing ``antipods`` is left unchecked, and a warning says
    so; quiet, a wrong count is still reported."""
    from schedcache.history import invariants, verify

    monkeypatch.setattr(invariants, "NODES_PER_POINT", 1)
    cache, writer = make_cache(), make_cache(replica="writer")
    for n in range(8):  # every node's count in one read: 8 HGETs, SMEMBERS, GET, the stream's id
        cache.add_node(make_node(f"n{n}", "8", "8Gi"))
    cache.add_pod(anti_pod("guard", "n0"))
    transactions: list[int] = []
    pipeline = cache.store.server().pipeline

    def counted(*args, **kwargs):
        pipe = pipeline(*args, **kwargs)
        if kwargs.get("transaction"):
            execute = pipe.execute

            def sized():
                transactions.append(len(pipe.command_stack))
                return execute()

            pipe.execute = sized
        return pipe

    server = types.SimpleNamespace(pipeline=counted)
    monkeypatch.setattr(cache.store, "server", lambda: server)
    monkeypatch.setattr(verify, "POINT_ATTEMPTS", 0)  # as if every pipeline saw the stream move
    commands_between_the_reads(
        monkeypatch, lambda n: n == 1 and writer.remove_pod(anti_pod("guard", "n0"))
    )
    with caplog.at_level("WARNING", logger="schedcache.history.invariants"):
        assert invariants.invariants(cache.store) == []
    assert "antipods unchecked" in caplog.text
    # a chunk's: a node's 4 reads, its pod's record, the stream's id
    assert transactions and max(transactions) <= 4 + 1 + 1
    monkeypatch.undo()
    cache.client.incr(cache.keys.anti_affine_pods)
    found = {(d.subject, d.field) for d in invariants.invariants(cache.store)}
    assert ("cache", "antipods") in found
