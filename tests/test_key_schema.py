"""The key schema has one source, ``schedcache.store.keys.SCHEMA``: the Lua header, the storage doc,
the ``Keys`` methods, the keys built by hand elsewhere and the keys a live cache holds all
agree with it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from schedcache import Cache
from schedcache.feed.progress import record_progress
from schedcache.history.retention import retain
from schedcache.ops.gangwaits import GangWaits
from schedcache.ops.leases import Lease
from schedcache.ops.queue import SchedulingQueue
from schedcache.store import commands
from schedcache.store.budgets import sync_budget
from schedcache.store.keys import SCHEMA, Keys, KeySpec, _fill
from schedcache.store.namespaces import sync_namespace
from schedcache.store.nominations import nominate_pod
from schedcache.store.podgroups import PodGroup, sync_pod_group
from tests.factories import make_node, make_pod

ROOT = Path(__file__).resolve().parent.parent
REGION, ZONE = "topology.kubernetes.io/region", "topology.kubernetes.io/zone"
TYPES = {"string", "hash", "set", "zset", "stream"}
DOC_TYPES = {"sorted set": "zset"}  # the doc's words that are not Redis TYPE names


def text(value: object) -> str:
    """A reply of the cache's client (bytes) as text."""
    assert isinstance(value, bytes), value
    return value.decode()


def schema() -> dict[str, str]:
    return {spec.pattern: spec.type for spec in SCHEMA}


def lua_header() -> dict[str, str]:
    """``pattern -> type`` from the schema comment atop ``lua/_helpers.lua``: lines
    ``--   <pattern>  <type> ...`` (exactly three spaces; deeper lines continue the previous
    key), the type on the next line when the pattern fills the column."""
    lines = (ROOT / "lua" / "_helpers.lua").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-- Key schema"))
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip() == "--")
    found: dict[str, str] = {}
    for i in range(start, end):
        entry = re.match(r"^-- {3}(\S+)(?: +(\S+))?", lines[i])
        if entry is None:
            continue
        kind = entry.group(2) or lines[i + 1].removeprefix("--").split()[0]
        assert entry.group(1) not in found, f"{entry.group(1)} listed twice"
        found[entry.group(1)] = kind
    return found


def doc_table() -> dict[str, str]:
    """``pattern -> type`` from the key table of ``docs/storage.md`` (the first table)."""
    found: dict[str, str] = {}
    text = (ROOT / "docs" / "storage.md").read_text()
    table = text[text.index("| key | type |") : text.index("\n\n", text.index("| key | type |"))]
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        pattern = re.fullmatch(r"`([^`]+)`", cells[0])
        assert pattern is not None, f"no `pattern` in the first column of {line!r}"
        assert pattern.group(1) not in found, f"{pattern.group(1)} listed twice"
        found[pattern.group(1)] = DOC_TYPES.get(cells[1], cells[1])
    return found


def regex(pattern: str) -> re.Pattern[str]:
    """The key names of ``pattern``, each ``<...>`` standing for one or more characters."""
    parts = re.split(r"<[a-z]+>", pattern)
    return re.compile(".+".join(re.escape(part) for part in parts), re.DOTALL)


def spec_of(keys: Keys, key: str) -> KeySpec:
    """The one SCHEMA entry that ``key`` (a full name) is an instance of."""
    assert key.startswith(keys.prefix), key
    name = key[len(keys.prefix) :]
    matches = [spec for spec in SCHEMA if regex(spec.pattern).fullmatch(name)]
    assert len(matches) == 1, f"{key!r} matches {[m.pattern for m in matches]}, not one pattern"
    return matches[0]


def every_key(keys: Keys) -> dict[str, KeySpec]:
    """One name from every ``Keys`` method and property that names a key, with its entry."""
    names = [
        keys.pod("u"),
        keys.node("n"),
        keys.node_pods("n"),
        keys.node_images("n"),
        keys.node_labels("n"),
        keys.image_nodes("i"),
        keys.images,
        keys.image_generations,
        keys.tree_zones,
        keys.tree_zone("z"),
        keys.tree_generation,
        keys.tree_cursor,
        keys.nodes,
        keys.pods,
        keys.assumed,
        keys.deadlines,
        keys.generation,
        keys.incarnation,
        keys.anti_affine_pods,
        keys.quarantine,
        keys.node_generations,
        keys.events,
        keys.last_event,
        keys.command_reply("c"),
        keys.absent,
        keys.replicas,
        keys.lease("r"),
        keys.replica_pods("r"),
        keys.checkpoint,
        keys.checkpoint_chunk("1-0", "t", 0),
        keys.checkpoint_parts,
        keys.compacted,
        keys.retention,
        keys.pod_version("u"),
        keys.node_version("n"),
        keys.sync,
        keys.queued("u"),
        keys.nominated,
        keys.nominated_nodes,
        keys.nominations("n"),
        keys.nomination_victims,
        keys.budgets,
        keys.budget_version("ns/b"),
        keys.namespaces,
        keys.namespace_generation,
        keys.namespace_version("ns"),
        keys.queued_pods,
        keys.queue_sequence,
        keys.queues,
        keys.helped,
        keys.arrival_wakes,
        keys.arrival_since,
        *(keys.queue("s", state) for state in ("active", "leased", "backoff", "parked")),
        keys.gang_wait("ns/g"),
        keys.gang_waits,
        keys.pod_group("ns/g"),
        keys.pod_group_version("ns/g"),
        keys.pod_groups,
    ]
    return {name: spec_of(keys, name) for name in names}


# -- (a), (b): the Lua header and the storage doc list exactly the table's keys -------------


def test_the_lua_header_lists_exactly_the_schema() -> None:
    header = lua_header()
    assert set(header.values()) <= TYPES, header
    assert header == schema()


def test_the_storage_doc_lists_exactly_the_schema() -> None:
    assert doc_table() == schema()


def test_the_schema_is_well_formed() -> None:
    patterns = [spec.pattern for spec in SCHEMA]
    assert len(patterns) == len(set(patterns))
    for spec in SCHEMA:
        assert spec.type in TYPES and spec.holds, spec
        assert re.fullmatch(r"[a-z]+(:(<[a-z]+>|[a-z]+))*", spec.pattern), spec.pattern


# -- the Keys methods -------------------------------------------------------------------------


def test_every_schema_key_has_a_keys_member() -> None:
    assert {spec.pattern for spec in every_key(Keys("c")).values()} == set(schema())


def test_keys_fill_placeholders_and_refuse_wrong_parts() -> None:
    keys = Keys("c")
    assert keys.pod("a:b") == "{c}:pod:a:b"
    assert keys.tree_zone("r:\x00:z") == "{c}:treezone:r:\x00:z"
    assert keys.checkpoint_chunks == "{c}:checkpoint:"
    assert keys.checkpoint_chunk_prefix("5-1", "tok") == "{c}:checkpoint:5-1:tok:"
    assert keys.checkpoint_chunk("5-1", "tok", 7) == "{c}:checkpoint:5-1:tok:7"
    assert keys.checkpoint_id(keys.checkpoint_chunk_prefix("5-1", "tok")) == "5-1"
    with pytest.raises(TypeError):
        _fill("pod:<uid>", {})
    with pytest.raises(TypeError):
        _fill("pod:<uid>", {"name": "x"})
    with pytest.raises(KeyError):
        _fill("pod", {})


# -- (d): the names are the ones the Lua side builds from the same prefix ------------------


def test_the_keys_names_are_the_stored_ones(cache: Cache) -> None:
    """Pinned: stored caches and the Lua functions use exactly these names."""
    keys, p = cache.keys, cache.keys.prefix
    assert keys.checkpoint == f"{p}checkpoint" and keys.checkpoint_parts == f"{p}checkpoint:parts"
    assert keys.checkpoint_chunks == f"{p}checkpoint:" and keys.compacted == f"{p}compacted"
    chunk_prefix = keys.checkpoint_chunk_prefix("1700000000000-3", "0123456789ab")
    assert chunk_prefix == f"{p}checkpoint:1700000000000-3:0123456789ab:"
    assert keys.checkpoint_chunk("1700000000000-3", "0123456789ab", 7) == f"{chunk_prefix}7"
    assert keys.checkpoint_id(chunk_prefix) == "1700000000000-3"
    assert Lease(cache.store, 1.0).key == keys.lease(cache.replica) == f"{p}lease:{cache.replica}"
    assert keys.replicas == f"{p}replicas" and keys.retention == f"{p}retention"
    assert keys.pod("u") == f"{p}pod:u" and keys.node_pods("n") == f"{p}nodepods:n"


# -- (c): a live cache holds nothing but the table's keys ------------------------------------


def workload(cache: Cache) -> dict[str, str]:
    """Run something of every kind against ``cache``; return names the Keys methods give for
    keys that must now exist (Lua or Python wrote them)."""
    zoned = {REGION: "r1", ZONE: "z1"}
    cache.add_node(make_node("n1", "4", "8Gi", labels=zoned, images=[(["img:1"], 100)]))
    cache.add_node(make_node("n2", "4", "8Gi", labels={ZONE: "z2"}, images=[(["img:2"], 50)]))
    add = commands.add_node(make_node("n3", "4", "8Gi", labels=zoned))
    cache.run(add)
    cache.update_node(None, make_node("n3", "8", "8Gi", labels=zoned, images=[(["img:1"], 100)]))
    for i in range(4):
        cache.assume_pod(make_pod(f"a{i}", "n1", "10m", "1Mi"))
    cache.finish_binding(make_pod("a0", "n1"), now=0)  # due at once
    cache.finish_binding(make_pod("a1", "n1"), now=0)  # due too, its record is corrupted below
    cache.finish_binding(make_pod("a2", "n1"))  # due in ttl seconds
    cache.add_pod(make_pod("b0", "n2", "10m", "1Mi"))
    cache.add_pod(make_pod("b1", "n2", "10m", "1Mi"))
    cache.remove_pod(make_pod("b1", "n2"))
    cache.remove_node("n2")  # a ghost: b0 stays on it
    cache.node_tree().next()
    cache.client.set(cache.keys.pod("a1"), b"added n1 0 - x - \nblob")  # quarantined
    assert cache.cleanup_assumed_pods(now=10**6) == ["a0"]
    cache.checkpoint()
    cache.add_pod(make_pod("b2", "n1", "10m", "1Mi"))
    cache.compact()
    retain(cache, keep_seconds=0)
    cache.run(commands.sync_node(make_node("n5", "4", "8Gi", labels=zoned), "7"))
    cache.run(commands.sync_pod(make_pod("s0", "n5", "10m", "1Mi"), "8", present=True))
    cache.run(commands.sync_pod_gone("s0", "9"))  # leaves a tombstone
    record_progress(cache, "pods", "9", "feeder-1", time.time())
    for name in ("q0", "q1", "q2", "q3"):  # the scheduling queue: one pod in each state
        cache.run(commands.sync_pod_pending(make_pod(name, ""), "sched", "10"))
    queue = SchedulingQueue(cache, "sched", holder="h", lease=1000)
    popped = [queued.pod for queued in queue.pop(3)]
    attempt = cache.last_events(1)[0].id
    # Waiting for an arrival it was not waiting for during the attempt: back-off.
    queue.retry(popped[1], unschedulable=True, attempt=attempt, wake=("app=x",))
    queue.retry(popped[2], unschedulable=True, attempt=attempt)
    # a preemptor's nomination (docs/preemption.md)
    cache.run(nominate_pod(make_pod("nominee", "", "10m", "1Mi"), "n1", victims=["ns/v"]))
    # a PodDisruptionBudget fed by sync (docs/preemption.md)
    budget = {"metadata": {"name": "b", "namespace": "ns"}, "spec": {}, "status": {}}
    cache.run(sync_budget(budget, "11"))
    # a Namespace's labels fed by sync (docs/constraints.md, "Namespace selectors")
    cache.run(sync_namespace({"metadata": {"name": "ns", "labels": {"team": "a"}}}, "12"))
    GangWaits(cache).join("default/g", None, popped[0], 1000)  # a pod group's wait
    cache.run(sync_pod_group(PodGroup("default/g", 3), "11"))  # a PodGroup sync fed
    keys = cache.keys
    zones = [text(z) for z in cache.client.zrange(keys.tree_zones, 0, -1)]
    assert len(zones) == 1  # z1 (n2 and its zone z2 are gone)
    chunk_prefix = text(cache.client.hget(keys.checkpoint, "prefix"))
    checkpoint_id, token = chunk_prefix.removeprefix(keys.checkpoint_chunks).split(":")[:2]
    assert keys.checkpoint_chunk_prefix(checkpoint_id, token) == chunk_prefix
    return {
        "pod": keys.pod("a3"),
        "node": keys.node("n2"),
        "node_pods": keys.node_pods("n2"),
        "node_images": keys.node_images("n1"),
        "image_nodes": keys.image_nodes("img:1"),
        "images": keys.images,
        "image_generations": keys.image_generations,
        "tree_zones": keys.tree_zones,
        "tree_zone": keys.tree_zone(zones[0]),
        "tree_generation": keys.tree_generation,
        "tree_cursor": keys.tree_cursor,
        "nodes": keys.nodes,
        "pods": keys.pods,
        "assumed": keys.assumed,
        "deadlines": keys.deadlines,
        "generation": keys.generation,
        "incarnation": keys.incarnation,
        "quarantine": keys.quarantine,
        "node_generations": keys.node_generations,
        "events": keys.events,
        "command_reply": keys.command_reply(add.id),
        "replicas": keys.replicas,
        "lease": keys.lease(cache.replica),
        "replica_pods": keys.replica_pods(cache.replica),
        "checkpoint": keys.checkpoint,
        "checkpoint_chunk": keys.checkpoint_chunk(checkpoint_id, token, 0),
        "checkpoint_parts": keys.checkpoint_parts,
        "compacted": keys.compacted,
        "pod_version": keys.pod_version("s0"),
        "node_version": keys.node_version("n5"),
        "sync": keys.sync,
        "queued": keys.queued("q3"),
        "queued_pods": keys.queued_pods,
        "namespaces": keys.namespaces,
        "namespace_generation": keys.namespace_generation,
        "namespace_version": keys.namespace_version("ns"),
        "queue_sequence": keys.queue_sequence,
        "queues": keys.queues,
        "helped": keys.helped,
        "nominated": keys.nominated,
        "nominated_nodes": keys.nominated_nodes,
        "nominations": keys.nominations("n1"),
        "gang_wait": keys.gang_wait("default/g"),
        "gang_waits": keys.gang_waits,
        "pod_group": keys.pod_group("default/g"),
        "pod_group_version": keys.pod_group_version("default/g"),
        "pod_groups": keys.pod_groups,
        "nomination_victims": keys.nomination_victims,
        "budgets": keys.budgets,
        "budget_version": keys.budget_version("ns/b"),
        "arrival_wakes": keys.arrival_wakes,
        "arrival_since": keys.arrival_since,
        **{
            f"queue {state}": keys.queue("sched", state)
            for state in ("active", "leased", "backoff", "parked")
        },
    }


def test_a_live_cache_holds_only_schema_keys(cache: Cache) -> None:
    expected = workload(cache)
    live = {
        text(key): text(cache.client.type(key))
        for key in cache.client.scan_iter(match=cache.keys.pattern, count=1000)
    }
    seen = set()
    for key, kind in live.items():
        spec = spec_of(cache.keys, key)
        assert kind == spec.type, f"{key!r} is a {kind}, the schema says {spec.type}"
        seen.add(spec.pattern)
    missing = {member: name for member, name in expected.items() if name not in live}
    assert not missing, f"named by Keys but absent from the live cache: {missing}"
    # The workload reaches every key but the retention lease (released when the round ends)
    # and `absent`, which nothing writes: the functions' set type checks intersect with it.
    assert seen == set(schema()) - {"retention", "absent"}
    assert not cache.client.exists(cache.keys.absent)
