"""Backend parity: every public entry point, called on fakeredis, a real Redis and a Cluster.

``CASES`` maps each public name — the methods and properties of ``Cache``, ``CommandBatch``,
``NodeTree``, ``Snapshot``, ``NodeInfo`` and ``ExpiryWorker``, the functions exported by
``schedcache/__init__.py`` and every ``schedcache`` CLI command — to a case that calls it with
real arguments and asserts what it did. ``public_names()`` finds those names by introspection,
and ``test_every_public_entry_point_has_a_parity_case`` fails when one has no case: a new public
method must come with its parity case. (Plain value classes — ``Pod``, ``Node``, ``Resource``,
``Event``, ``Dump``, ``BatchResult``' fields — are exercised through the cases but not
enumerated: they never touch a backend.)

Every case runs on each backend of ``conftest.py``. While it runs, the commands the client
sends are recorded twice: on the wire by redis-py's command packers (``pack()`` of both RESP
serializers: every single command, every pipeline and the batch's raw
``connection.send_command`` go through one of them), and, on fakeredis, where the server
receives them (``BaseFakeSocket._process_command``, which every command a FakeRedis client
sends passes through, inside MULTI too). fakeredis implements none of INFO, CONFIG, WAIT,
CLUSTER, MEMORY, DEBUG, SENTINEL, ROLE, COMMAND: the embedded default must never send them.

``WAIT``: with the default ``wait_replicas=0`` no case sends it on any backend. With
``wait_replicas=1`` a write on a real Redis without replicas raises ``NotReplicated`` (and was
applied, the reply is carried); on the Cluster (one replica per primary) it is confirmed. On
fakeredis ``Cache(wait_replicas=1)`` is refused with a ``ValidationError`` when the cache is
made; a ``wait_timeout`` under a millisecond (``WAIT n 0`` blocks for ever) is refused everywhere.
"""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
import redis.asyncio.connection
from click.testing import CliRunner, Result
from fakeredis._socket._base import BaseFakeSocket
from prometheus_client import CollectorRegistry, generate_latest
from redis.connection import HiredisRespSerializer, PythonRespSerializer

import schedcache
from schedcache import (
    BatchFailed,
    Cache,
    CommandBatch,
    NodeInfo,
    Snapshot,
    SnapshotUpdate,
    connect,
    load_k8s_file,
    objects_from_k8s,
    parse_selector,
)
from schedcache.aio import (
    AsyncCache,
    AsyncCommandBatch,
    AsyncExpiryWorker,
    AsyncNodeTree,
    connect_async,
)
from schedcache.aio import store as aio_store
from schedcache.cli import lifecycle as cli_lifecycle
from schedcache.cli import serve as cli_serve
from schedcache.cli.app import main
from schedcache.errors import (
    CacheError,
    FitConflict,
    InvalidTransition,
    NodeNotFound,
    NotReplicated,
    PodAlreadyExists,
    PodNotAssumed,
    PodNotFound,
    ValidationError,
)
from schedcache.history.audit import StreamAudit
from schedcache.history.checkpoints import HistoryCompacted
from schedcache.ops.acl import acl_rules
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store import commands
from schedcache.store import connection as connection_module
from schedcache.store.batch import BatchBuilder
from schedcache.store.commands import Command
from schedcache.store.connection import EMBEDDED, ENV_URL
from schedcache.store.library import function_names
from schedcache.store.routing import ClusterClient
from schedcache.views.nodetree import NodeTree
from tests.apis import async_client_for
from tests.apiserver import FakeApiServer
from tests.conftest import REAL_REDIS_URL, backend_url, real_client
from tests.factories import keyspace, make_node, make_pod, node_manifest, pod_manifest

ZONE = "topology.kubernetes.io/zone"
NS = "prod"
# Server commands fakeredis lacks: the embedded default must never send them.
FORBIDDEN_ON_EMBEDDED = frozenset(
    {"INFO", "CONFIG", "WAIT", "CLUSTER", "MEMORY", "DEBUG", "SENTINEL", "ROLE", "COMMAND"}
)
# Classes whose public methods and properties each need a parity case ("Class.name").
# The public calls a class of CLASSES takes from a part of it kept in a module of its own.
INHERITED: dict[type, tuple[type, ...]] = {Cache: (StreamAudit,)}
CLASSES: tuple[type, ...] = (
    Cache,
    CommandBatch,
    NodeTree,
    Snapshot,
    NodeInfo,
    ExpiryWorker,
    BatchBuilder,
    AsyncCache,
    AsyncNodeTree,
    AsyncCommandBatch,
    AsyncExpiryWorker,
)


# -- recording what the client sends ------------------------------------------------------


def _name(args: Any) -> str:
    """``"FCALL"`` from ``("FCALL", ...)``, ``"FUNCTION"`` from ``("FUNCTION LOAD", ...)``."""
    first = args[0]
    text = first.decode() if isinstance(first, bytes | bytearray | memoryview) else str(first)
    if isinstance(first, memoryview):
        text = bytes(first).decode()
    return text.split()[0].upper()


@dataclass
class Recorder:
    """Commands packed by redis-py or hiredis (any backend) and received by a fakeredis
    server."""

    packed: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> Recorder:
        for serializer in (HiredisRespSerializer, PythonRespSerializer):
            monkeypatch.setattr(serializer, "pack", self._packer(serializer.pack))
        async_connection = redis.asyncio.connection.AbstractConnection  # AsyncCache's packer
        monkeypatch.setattr(
            async_connection, "pack_command", self._packer(async_connection.pack_command)
        )
        pack_command = aio_store.pack_command  # hiredis', which AsyncStore packs with

        def recording_pack_command(command: Any) -> Any:
            self.packed.append(_name(command))
            return pack_command(command)

        monkeypatch.setattr(aio_store, "pack_command", recording_pack_command)
        receive = BaseFakeSocket._process_command

        def process_command(sock: BaseFakeSocket, fields: list[bytes]) -> None:
            if fields:
                self.received.append(_name(fields))
            return receive(sock, fields)

        monkeypatch.setattr(BaseFakeSocket, "_process_command", process_command)
        return self

    def _packer(self, pack: Callable[..., Any]) -> Callable[..., Any]:
        def recording_pack(serializer: Any, *args: Any) -> Any:
            self.packed.append(_name(args))
            return pack(serializer, *args)

        return recording_pack

    def sent(self) -> set[str]:
        return set(self.packed) | set(self.received)

    def clear(self) -> None:
        self.packed.clear()
        self.received.clear()


# -- the context every case gets -----------------------------------------------------------


@dataclass
class Ctx:
    """What a case gets: the backend's client and caches on it (``make_cache`` options default
    to ``defaults``)."""

    backend: str
    client: Any
    url: str  # what `--redis` gets: "embedded", the real server's URL, the cluster's
    tmp_path: Path
    defaults: dict[str, Any] = field(default_factory=lambda: {"ttl": 10.0, "replica": "parity"})
    caches: list[Cache] = field(default_factory=list)

    def make_cache(self, **options: Any) -> Cache:
        options = {**self.defaults, **options}
        name = options.pop("name", None) or f"t-{uuid.uuid4().hex[:12]}"
        cache = Cache(self.client, name, **options)
        self.caches.append(cache)
        return cache

    @property
    def cache(self) -> Cache:
        """The case's main cache (made on first use)."""
        return self.caches[0] if self.caches else self.make_cache()

    def server_now(self) -> float:
        seconds, micros = self.cache.store.server().time()
        return seconds + micros / 1e6

    def cli(self, *args: str, cache: Cache | None = None) -> Result:
        """``schedcache --redis <url> --cache <name> *args``. The embedded URL reaches
        ``connect()`` as usual; only the fakeredis it makes is this case's client, so the CLI
        and the case look at the same server."""
        name = (cache or self.cache).name
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv(ENV_URL, raising=False)
            embedded = []
            if self.backend == "fakeredis":
                patch.setattr(connection_module, "embedded_client", lambda server=None: self.client)
                embedded = ["--embedded"]  # long-running commands refuse it otherwise
            return CliRunner().invoke(
                main,
                ["--redis", self.url, "--cache", name, *embedded, *args],
                catch_exceptions=False,
            )

    def cleanup(self) -> None:
        for cache in self.caches:
            if cache.lease is not None:
                cache.lease.stop(release=False)
            cache.clear()


def populate(cache: Cache) -> None:
    """n1 (zone a) and n2 (zone b); web-0 added and web-1 assumed on n1, db-0 added on n2."""
    cache.add_node(make_node("n1", "4", "8Gi", labels={ZONE: "a"}))
    cache.add_node(make_node("n2", "2", "4Gi", labels={ZONE: "b"}))
    cache.add_pod(web(0))
    cache.assume_pod(web(1))
    cache.add_pod(make_pod("db-0", "n2", "1", "1Gi", namespace=NS, labels={"app": "db"}))


POPULATED_TYPES = ["NodeAdded", "NodeAdded", "PodAdded", "PodAssumed", "PodAdded"]


def web(index: int, node: str = "n1", cpu: str = "500m", **kwargs: Any) -> schedcache.Pod:
    kwargs.setdefault("labels", {"app": "web"})
    return make_pod(f"web-{index}", node, cpu, "1Gi", namespace=NS, **kwargs)


# -- Cache --------------------------------------------------------------------------------

CASES: dict[str, Callable[[Ctx], None]] = {}


def case(*names: str) -> Callable[[Callable[[Ctx], None]], Callable[[Ctx], None]]:
    def register(function: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        for name in names:
            assert name not in CASES, f"two parity cases for {name}"
            CASES[name] = function
        return function

    return register


@case("Cache.run")
def _run(ctx: Ctx) -> None:
    generation = ctx.cache.run(commands.add_node(make_node("n1")))
    assert generation == ctx.cache.generation() == 1
    with pytest.raises(NodeNotFound, match="node nope"):
        ctx.cache.run(commands.remove_node("nope"))
    assert ctx.cache.generation() == 1 and ctx.cache.stream_length() == 1


@case("Cache.batch")
def _batch(ctx: Ctx) -> None:
    batch = ctx.cache.batch(chunk_size=2)
    assert isinstance(batch, CommandBatch) and batch.chunk_size == 2
    batch.add_node(make_node("n1", "4", "8Gi")).add_pod(web(0)).remove_pod(web(9))
    assert len(batch) == 3
    results = batch.execute()
    assert [r.ok for r in results] == [True, True, False]
    assert isinstance(results[2].error, PodNotFound) and "web-9" in str(results[2].error)
    assert ctx.cache.get_node_info("n1").requested.milli_cpu == 500
    with pytest.raises(ValueError, match="chunk_size"):
        ctx.cache.batch(chunk_size=0)


@case("Cache.assume_pod")
def _assume_pod(ctx: Ctx) -> None:
    cache = ctx.cache
    cache.add_node(make_node("n1", "1", "8Gi", pods="3"))
    cache.assume_pod(web(0, cpu="600m"))
    assert cache.pod_state("web-0") == "assumed" and cache.is_assumed_pod("web-0")
    with pytest.raises(PodAlreadyExists, match="already assumed on node n1"):
        cache.assume_pod(web(0, cpu="600m"))
    with pytest.raises(FitConflict) as conflict:
        cache.assume_pod(web(1, cpu="600m"), check_fit=True)
    assert conflict.value.node == "n1" and conflict.value.reasons == ("cpu",)
    generation = cache.get_node_info("n1").generation
    with pytest.raises(FitConflict) as stale:
        cache.assume_pod(web(1, cpu="100m"), expect_generation=generation - 1)
    assert stale.value.reasons == ("stale",)
    cache.assume_pod(web(1, cpu="100m"), expect_generation=generation)
    assert cache.get_node_info("n1").requested.milli_cpu == 700
    assert cache.pod_count() == 2 and cache.stream_length() == 3


@case("Cache.lease_to_take")
def _lease_to_take(ctx: Ctx) -> None:
    cache = ctx.make_cache(lease_ttl=15.0)
    assert cache.lease_to_take == 15.0
    cache.assume_pod(web(0))  # takes the lease in the claim, then heartbeats it
    assert cache.lease_to_take == 0.0
    assert ctx.make_cache(replica="").lease_to_take == 0.0
    assert ctx.make_cache(lease_ttl=0).lease_to_take == 0.0


@case("Cache.hold_lease")
def _hold_lease(ctx: Ctx) -> None:
    cache = ctx.make_cache(lease_ttl=0.5)
    assert cache.lease is not None and cache.lease.thread is None
    cache.assume_pod(web(0))
    key = cache.lease.key
    assert cache.lease.thread is not None and cache.lease.thread.is_alive()
    cache.hold_lease()  # idempotent
    time.sleep(0.7)  # past the ttl: only the heartbeat keeps the key
    assert 0 < cache.client.pttl(key) <= 500
    assert cache.client.smembers(f"{cache.keys.prefix}replicas") == {b"parity"}


@case("Cache.close")
def _close(ctx: Ctx) -> None:
    cache = ctx.make_cache(lease_ttl=15.0)
    cache.assume_pod(web(0))
    key = cache.lease.key
    assert cache.client.exists(key) == 1
    cache.close()
    assert cache.lease.thread is None and cache.client.exists(key) == 1  # lapses by itself
    cache.close(release_lease=True)
    assert cache.client.exists(key) == 0
    assert cache.pod_state("web-0") == "assumed"  # the expiry worker forgets it, not close()


@case("Cache.finish_binding")
def _finish_binding(ctx: Ctx) -> None:
    cache = ctx.make_cache(ttl=10.0)
    cache.assume_pod(web(0))
    cache.finish_binding(web(0), now=1000.0)
    record = cache.get_pod_record("web-0")
    assert record.binding_finished and record.deadline_ms == 1_010_000
    cache.finish_binding(web(7), now=1000.0)  # not assumed: a no-op, as upstream
    before = ctx.server_now()
    cache.assume_pod(web(1))
    cache.finish_binding(web(1))  # the server's clock
    deadline = cache.get_pod_record("web-1").deadline_ms
    assert deadline is not None and abs(deadline - (before + 10) * 1000) < 5000
    assert [e.type for e in cache.events()] == ["PodAssumed", "BindingFinished"] * 2


@case("Cache.forget_pod")
def _forget_pod(ctx: Ctx) -> None:
    cache = ctx.cache
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.assume_pod(web(0))
    cache.forget_pod(web(0))
    assert cache.pod_state("web-0") is None
    assert cache.get_node_info("n1").requested.milli_cpu == 0
    cache.add_pod(web(1))
    with pytest.raises(PodNotAssumed):
        cache.forget_pod(web(1))
    assert [e.type for e in cache.events()][-2:] == ["PodForgotten", "PodAdded"]


@case("Cache.add_pod")
def _add_pod(ctx: Ctx) -> None:
    cache = ctx.cache
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_node(make_node("n2", "4", "8Gi"))
    cache.assume_pod(web(0, "n1"))
    cache.add_pod(web(0, "n2"))  # confirms it on the node the informer saw
    assert cache.get_pod_record("web-0").state == "added"
    assert cache.get_pod_record("web-0").node == "n2"
    assert cache.get_node_info("n1").requested.milli_cpu == 0
    assert cache.get_node_info("n2").requested.milli_cpu == 500
    with pytest.raises(PodAlreadyExists):
        cache.add_pod(web(0, "n2"))
    cache.add_pod(web(1, "later"))  # before its node: a placeholder
    assert cache.get_node_info("later").node is None


@case("Cache.update_pod")
def _update_pod(ctx: Ctx) -> None:
    cache = ctx.cache
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_pod(web(0))
    cache.update_pod(web(0), web(0, cpu="1500m"))
    assert cache.get_node_info("n1").requested.milli_cpu == 1500
    assert cache.get_pod("web-0").requests.milli_cpu == 1500
    with pytest.raises(InvalidTransition, match="n1"):
        cache.update_pod(web(0, "n9"), web(0, "n9"))
    cache.assume_pod(web(1))
    with pytest.raises(InvalidTransition):
        cache.update_pod(web(1), web(1, cpu="1"))


@case("Cache.remove_pod")
def _remove_pod(ctx: Ctx) -> None:
    cache = ctx.cache
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_pod(web(0, ports=[{"containerPort": 80, "hostPort": 8080}]))
    assert cache.get_node_info("n1").used_ports == {("0.0.0.0", "TCP", 8080)}
    cache.remove_pod(web(0, node=""))  # empty nodeName: removes the stored pod
    info = cache.get_node_info("n1")
    assert info.requested.milli_cpu == 0 and info.used_ports == set() and info.pods == []
    with pytest.raises(PodNotFound):
        cache.remove_pod(web(0))


@case("Cache.cleanup_assumed_pods")
def _cleanup_assumed_pods(ctx: Ctx) -> None:
    cache = ctx.make_cache(ttl=10.0)
    for index in range(3):
        cache.assume_pod(web(index))
    now = ctx.server_now()
    cache.finish_binding(web(0), now=now - 60)
    cache.finish_binding(web(1), now=now)
    assert cache.cleanup_assumed_pods() == ["web-0"]
    assert cache.cleanup_assumed_pods(now=now + 11) == ["web-1"]
    assert cache.cleanup_assumed_pods(now=now + 1e6) == []  # web-2: binding not finished
    assert cache.pod_count() == 1 and cache.history("web-0")[-1].type == "PodExpired"


@case("Cache.get_pod")
def _get_pod(ctx: Ctx) -> None:
    populate(ctx.cache)
    pod = ctx.cache.get_pod(web(1))
    assert pod == web(1) and ctx.cache.get_pod("web-1") == pod
    with pytest.raises(PodNotFound, match="pod with uid nope does not exist"):
        ctx.cache.get_pod("nope")


@case("Cache.get_pod_record")
def _get_pod_record(ctx: Ctx) -> None:
    populate(ctx.cache)
    record = ctx.cache.get_pod_record("web-1")
    assert (record.state, record.node, record.binding_finished) == ("assumed", "n1", False)
    assert record.claimer == "parity" and record.pod.name == "web-1"
    assert "cpu 500" in record.contribution.replace("r:cpu", "cpu")
    assert ctx.cache.get_pod_record("web-0").state == "added"
    with pytest.raises(PodNotFound):
        ctx.cache.get_pod_record(web(8))


@case("Cache.is_assumed_pod")
def _is_assumed_pod(ctx: Ctx) -> None:
    populate(ctx.cache)
    assert ctx.cache.is_assumed_pod("web-1") and ctx.cache.is_assumed_pod(web(1))
    assert not ctx.cache.is_assumed_pod("web-0") and not ctx.cache.is_assumed_pod("nope")


@case("Cache.pod_state")
def _pod_state(ctx: Ctx) -> None:
    populate(ctx.cache)
    states = [ctx.cache.pod_state(uid) for uid in ("web-0", "web-1", "db-0", "nope")]
    assert states == ["added", "assumed", "added", None]


@case("Cache.pod_count")
def _pod_count(ctx: Ctx) -> None:
    assert ctx.cache.pod_count() == 0
    populate(ctx.cache)
    ctx.cache.remove_node("n2")  # db-0 stays, on a ghost
    assert ctx.cache.pod_count() == 3


@case("Cache.list_pods")
def _list_pods(ctx: Ctx) -> None:
    populate(ctx.cache)
    assert [p.name for p in ctx.cache.list_pods()] == ["db-0", "web-0", "web-1"]
    assert [p.name for p in ctx.cache.list_pods("app=web")] == ["web-0", "web-1"]
    assert [p.name for p in ctx.cache.list_pods({"app": "db"})] == ["db-0"]
    assert ctx.cache.list_pods("app notin (web,db)") == []


@case("Cache.filtered_list")
def _filtered_list(ctx: Ctx) -> None:
    populate(ctx.cache)
    on_n1 = ctx.cache.filtered_list(lambda pod: pod.node_name == "n1")
    assert [p.name for p in on_n1] == ["web-0", "web-1"]
    big = ctx.cache.filtered_list(lambda pod: pod.requests.milli_cpu >= 1000, "app")
    assert [p.name for p in big] == ["db-0"]


@case("Cache.add_node")
def _add_node(ctx: Ctx) -> None:
    cache = ctx.cache
    cache.add_pod(web(0, "n1"))  # placeholder first
    cache.add_node(make_node("n1", "4", "8Gi", images=[(["nginx:1"], 1000)]))
    info = cache.get_node_info("n1")
    assert info.node is not None and info.allocatable.milli_cpu == 4000
    assert [p.name for p in info.pods] == ["web-0"]
    assert info.image_states == {"nginx:1": schedcache.ImageStateSummary(1000, 1)}
    assert cache.node_count() == 1 and cache.generation() == 2


@case("Cache.update_node")
def _update_node(ctx: Ctx) -> None:
    cache = ctx.cache
    old = make_node("n1", "4", "8Gi")
    cache.add_node(old)
    cache.update_node(old, make_node("n1", "8", "8Gi"))
    assert cache.get_node_info("n1").allocatable.milli_cpu == 8000
    cache.update_node(None, make_node("n2", "1", "1Gi"))  # unknown: created, as upstream
    assert cache.node_count() == 2
    assert [e.type for e in cache.events()] == ["NodeAdded", "NodeUpdated", "NodeUpdated"]


@case("Cache.remove_node")
def _remove_node(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.remove_node("n2")
    ghost = ctx.cache.get_node_info("n2")
    assert ghost.is_ghost and [p.name for p in ghost.pods] == ["db-0"]
    with pytest.raises(NodeNotFound):
        ctx.cache.remove_node(make_node("n2"))
    ctx.cache.remove_pod(make_pod("db-0", "n2", "1", "1Gi", namespace=NS))
    with pytest.raises(NodeNotFound):  # the last pod took the ghost with it
        ctx.cache.get_node_info("n2")
    assert ctx.cache.node_count() == 1


@case("Cache.node_count")
def _node_count(ctx: Ctx) -> None:
    assert ctx.cache.node_count() == 0
    populate(ctx.cache)
    ctx.cache.add_pod(web(5, "later"))
    assert ctx.cache.node_count() == 3  # placeholders count, as upstream


@case("Cache.get_node_info")
def _get_node_info(ctx: Ctx) -> None:
    populate(ctx.cache)
    info = ctx.cache.get_node_info("n1")
    assert info.name == "n1" and info.node is not None and info.node.labels[ZONE] == "a"
    assert [p.name for p in info.pods] == ["web-0", "web-1"]
    assert info.requested.milli_cpu == 1000 and info.requested.memory == 2 << 30
    assert info.non_zero_requested.milli_cpu == 1000
    assert info.allocatable.milli_cpu == 4000 and info.allocatable.allowed_pod_number == 110
    with pytest.raises(NodeNotFound, match="node nope is not in the cache"):
        ctx.cache.get_node_info("nope")


@case("Cache.update_snapshot")
def _update_snapshot(ctx: Ctx) -> None:
    populate(ctx.cache)
    snap = Snapshot()
    report = ctx.cache.update_snapshot(snap)
    assert isinstance(report, SnapshotUpdate) and report.changed_nodes == 2 and report.list_rebuilt
    assert snap.generation == ctx.cache.generation()
    assert [i.name for i in snap.node_info_list] == ["n1", "n2"]
    ctx.cache.add_pod(web(3, "n2", cpu="100m"))
    report = ctx.cache.update_snapshot(snap)
    assert report.changed_nodes == 1 and not report.list_rebuilt and not report.inconsistent
    assert snap.get("n2").requested.milli_cpu == 1100
    ctx.cache.remove_node("n1")
    ctx.cache.update_snapshot(snap)
    assert [i.name for i in snap.node_info_list] == ["n2"]  # n1 is a ghost: not in snapshots


@case("Cache.node_tree")
def _node_tree(ctx: Ctx) -> None:
    populate(ctx.cache)
    tree = ctx.cache.node_tree()
    assert isinstance(tree, NodeTree) and tree.list() == ["n1", "n2"]


@case("Cache.generation")
def _generation(ctx: Ctx) -> None:
    assert ctx.cache.generation() == 0
    populate(ctx.cache)
    assert ctx.cache.generation() == 5
    with pytest.raises(PodAlreadyExists):
        ctx.cache.add_pod(web(0))
    assert ctx.cache.generation() == 5  # a rejected command changes nothing


@case("Cache.dump")
def _dump(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.remove_node("n2")
    dump = ctx.cache.dump()
    assert isinstance(dump, schedcache.Dump)
    assert set(dump.nodes) == {"n1", "n2"} and dump.nodes["n2"].node is None
    assert dump.assumed_pods == {"web-1"} and dump.generation == ctx.cache.generation()


@case("Cache.events")
def _events(ctx: Ctx) -> None:
    populate(ctx.cache)
    events = list(ctx.cache.events())
    assert [e.type for e in events] == POPULATED_TYPES
    assert {e.replica for e in events} == {"parity"}
    assert [e.uid for e in events] == [None, None, "web-0", "web-1", "db-0"]
    assert events[0].node == "n1" and events[0].generation == 1
    assert events[2].data["name"] == "web-0"
    assert list(ctx.cache.events(count=2)) == events  # pages of 2
    middle = list(ctx.cache.events(start=events[1].id, end=events[3].id))
    assert [e.id for e in middle] == [e.id for e in events[1:4]]


@case("Cache.last_events")
def _last_events(ctx: Ctx) -> None:
    populate(ctx.cache)
    everything = list(ctx.cache.events())
    assert ctx.cache.last_events(2) == everything[-2:]
    assert ctx.cache.last_events(100) == everything


@case("Cache.wait_for_events")
def _wait_for_events(ctx: Ctx) -> None:
    populate(ctx.cache)
    events = list(ctx.cache.events())
    assert ctx.cache.wait_for_events(events[2].id) == events[3:]
    assert ctx.cache.wait_for_events(timeout=0.01) == []  # "$": only newer ones, none came


@case("Cache.has_node", "Cache.is_empty")
def _has_node_is_empty(ctx: Ctx) -> None:
    assert ctx.cache.is_empty() and not ctx.cache.has_node("n1")
    populate(ctx.cache)
    assert not ctx.cache.is_empty() and ctx.cache.has_node("n1") and not ctx.cache.has_node("n9")


@case("Cache.history")
def _history(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(1, "n2"))  # confirmed on another node
    ctx.cache.remove_pod(web(1, "n2"))
    assert [e.type for e in ctx.cache.history(web(1))] == ["PodAssumed", "PodAdded", "PodRemoved"]
    assert ctx.cache.history("nope") == []


@case("Cache.history_of_node")
def _history_of_node(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(1, "n2"))  # moves from n1: an event of both nodes
    n1 = [(e.type, e.uid) for e in ctx.cache.history_of_node("n1")]
    assert n1 == [
        ("NodeAdded", None),
        ("PodAdded", "web-0"),
        ("PodAssumed", "web-1"),
        ("PodAdded", "web-1"),
    ]
    assert [e.type for e in ctx.cache.history_of_node("n2")][-1] == "PodAdded"


@case("Cache.replay")
def _replay(ctx: Ctx) -> None:
    populate(ctx.cache)
    events = list(ctx.cache.events())
    state = ctx.cache.replay()
    assert state.last_id == events[-1].id and state.generation == 5
    assert state.assumed_pods == {"web-1"}
    assert state.nodes["n1"].requested == ctx.cache.get_node_info("n1").requested
    seen: list[int] = []
    early = ctx.cache.replay(until=events[1].id, progress=seen.append)
    assert set(early.nodes) == {"n1", "n2"} and sum(seen) == 2
    assert not any(info.pods for info in early.nodes.values())


@case("Cache.at")
def _at(ctx: Ctx) -> None:
    populate(ctx.cache)
    events = list(ctx.cache.events())
    now = ctx.cache.at(events[-1].id)
    live = ctx.cache.update_snapshot
    snap = Snapshot()
    live(snap)
    assert {name: info.requested for name, info in now.node_infos.items()} == {
        name: info.requested for name, info in snap.node_infos.items()
    }
    early = ctx.cache.at(events[1].id)
    assert [info.name for info in early.node_info_list] == ["n1", "n2"]
    assert not any(info.pods for info in early.node_info_list)


@case("Cache.checkpoint")
def _checkpoint(ctx: Ctx) -> None:
    with pytest.raises(CacheError, match="nothing to checkpoint"):
        ctx.cache.checkpoint()
    populate(ctx.cache)
    last = list(ctx.cache.events())[-1].id
    assert ctx.cache.checkpoint() == last
    ctx.cache.remove_pod(web(0))
    state = ctx.cache.replay()  # checkpoint + tail
    assert state.last_id == list(ctx.cache.events())[-1].id
    assert [p.name for p in state.nodes["n1"].pods] == ["web-1"]
    assert ctx.cache.verify() == []


@case("Cache.compact")
def _compact(ctx: Ctx) -> None:
    with pytest.raises(CacheError, match="no checkpoint"):
        ctx.cache.compact()
    populate(ctx.cache)
    events = list(ctx.cache.events())
    ctx.cache.checkpoint()
    ctx.cache.add_pod(web(1))
    assert ctx.cache.compact(keep=1) == 3  # keeps the checkpointed event and the one before
    assert ctx.cache.stream_length() == 3
    with pytest.raises(HistoryCompacted):
        ctx.cache.replay(until=events[0].id)
    assert ctx.cache.verify() == [] and ctx.cache.replay().assumed_pods == set()


@case("Cache.verify")
def _verify(ctx: Ctx) -> None:
    populate(ctx.cache)
    assert ctx.cache.verify() == []
    ctx.cache.client.hincrby(ctx.cache.keys.node("n2"), "r:cpu", 5)  # corrupt one aggregate
    differences = {(d.subject, d.field) for d in ctx.cache.verify()}
    assert ("node n2", "requested") in differences and ("node n2", "r:cpu") in differences


@case("Cache.stream_length")
def _stream_length(ctx: Ctx) -> None:
    assert ctx.cache.stream_length() == 0
    populate(ctx.cache)
    assert ctx.cache.stream_length() == len(POPULATED_TYPES)


@case("Cache.clear")
def _clear(ctx: Ctx) -> None:
    populate(ctx.cache)
    other = ctx.make_cache()
    other.add_node(make_node("keep"))
    assert ctx.cache.clear() > 5
    assert ctx.cache.clear() == 0
    assert (ctx.cache.node_count(), ctx.cache.pod_count(), ctx.cache.stream_length()) == (0, 0, 0)
    assert other.node_count() == 1  # another cache's keys are left alone


# -- CommandBatch -------------------------------------------------------------------------


def _batched(ctx: Ctx, build: Callable[[CommandBatch], Any], **options: Any) -> list[Any]:
    batch = (ctx.make_cache(**options) if options else ctx.cache).batch()
    build(batch)
    return batch.execute()


@case("CommandBatch.add", "BatchBuilder.add")
def _batch_add(ctx: Ctx) -> None:
    results = _batched(ctx, lambda b: b.add(commands.add_node(make_node("n1"))))
    assert results[0].ok and results[0].reply == 1 and ctx.cache.node_count() == 1
    batch = ctx.cache.batch(chunk_size=1)
    batch.add(commands.add_node(make_node("n2")))
    batch.add(Command("no_such_command", "nothing", ()))  # the whole sc_batch call fails
    batch.add(commands.add_node(make_node("n3")))
    with pytest.raises(BatchFailed, match="1 batch call") as failed:
        batch.execute()
    assert [r.ok for r in failed.value.results] == [True, True]
    assert "command no_such_command: malformed argument to sc_batch" in str(
        failed.value.failures[0][1]
    )
    assert ctx.cache.node_count() == 3


@case("BatchBuilder.assume_pod", "BatchBuilder.claimed")
def _batch_assume_pod(ctx: Ctx) -> None:
    ctx.cache.add_node(make_node("n1", "1", "8Gi"))
    results = _batched(
        ctx, lambda b: b.assume_pod(web(0, cpu="600m")).assume_pod(web(1, cpu="600m"), True)
    )
    assert results[0].ok and isinstance(results[1].error, FitConflict)
    assert ctx.cache.is_assumed_pod("web-0") and ctx.cache.pod_state("web-1") is None
    assert ctx.cache.lease is not None and ctx.cache.lease.thread is not None


@case("BatchBuilder.finish_binding")
def _batch_finish_binding(ctx: Ctx) -> None:
    batch = ctx.make_cache(ttl=5.0).batch()
    results = batch.assume_pod(web(0)).finish_binding(web(0), now=100.0).execute()
    assert all(r.ok for r in results)
    assert batch.cache.get_pod_record("web-0").deadline_ms == 105_000


@case("BatchBuilder.forget_pod")
def _batch_forget_pod(ctx: Ctx) -> None:
    results = _batched(ctx, lambda b: b.assume_pod(web(0)).forget_pod(web(0)).forget_pod(web(0)))
    assert [r.ok for r in results] == [True, True, False]
    assert isinstance(results[2].error, PodNotAssumed) and ctx.cache.pod_count() == 0


@case("BatchBuilder.add_pod")
def _batch_add_pod(ctx: Ctx) -> None:
    results = _batched(ctx, lambda b: b.add_pod(web(0)).add_pod(web(0)))
    assert results[0].ok and isinstance(results[1].error, PodAlreadyExists)
    assert ctx.cache.pod_state("web-0") == "added"


@case("BatchBuilder.update_pod")
def _batch_update_pod(ctx: Ctx) -> None:
    results = _batched(ctx, lambda b: b.add_pod(web(0)).update_pod(web(0), web(0, cpu="2")))
    assert all(r.ok for r in results)
    assert ctx.cache.get_node_info("n1").requested.milli_cpu == 2000


@case("BatchBuilder.remove_pod")
def _batch_remove_pod(ctx: Ctx) -> None:
    results = _batched(ctx, lambda b: b.add_pod(web(0)).remove_pod(web(0)).remove_pod(web(0)))
    assert [r.ok for r in results] == [True, True, False]
    assert ctx.cache.pod_count() == 0 and ctx.cache.node_count() == 0


@case("BatchBuilder.add_node")
def _batch_add_node(ctx: Ctx) -> None:
    results = _batched(ctx, lambda b: [b.add_node(make_node(f"n{i}")) for i in range(450)])
    assert len(results) == 450 and all(r.ok for r in results)  # three sc_batch calls
    assert ctx.cache.node_count() == 450 and ctx.cache.generation() == 450


@case("BatchBuilder.update_node")
def _batch_update_node(ctx: Ctx) -> None:
    old = make_node("n1", "1", "1Gi")
    results = _batched(ctx, lambda b: b.add_node(old).update_node(old, make_node("n1", "3", "1Gi")))
    assert all(r.ok for r in results)
    assert ctx.cache.get_node_info("n1").allocatable.milli_cpu == 3000


@case("BatchBuilder.remove_node")
def _batch_remove_node(ctx: Ctx) -> None:
    results = _batched(
        ctx, lambda b: b.add_node(make_node("n1")).remove_node("n1").remove_node("n1")
    )
    assert [r.ok for r in results] == [True, True, False]
    assert isinstance(results[2].error, NodeNotFound) and ctx.cache.node_count() == 0


@case("CommandBatch.settle")
def _batch_settle(ctx: Ctx) -> None:
    groups = [
        [commands.add_node(make_node("n1", "4", "8Gi")), commands.add_pod(web(0))],
        [commands.remove_pod(web(9))],
    ]
    first = ctx.cache.batch().settle(groups)
    assert [r.ok for r in first] == [True, True, False]
    generation, length = ctx.cache.generation(), ctx.cache.stream_length()
    again = ctx.cache.batch().settle(groups)  # the same groups: answered from their ids
    assert [(r.ok, r.reply) for r in again] == [(r.ok, r.reply) for r in first]
    assert (ctx.cache.generation(), ctx.cache.stream_length()) == (generation, length)
    assert ctx.cache.get_node_info("n1").requested.milli_cpu == 500


@case("CommandBatch.execute")
def _batch_execute(ctx: Ctx) -> None:
    batch = ctx.cache.batch(chunk_size=3)
    for index in range(7):
        batch.add_pod(web(index, cpu="10m"))
    assert len(batch.in_flight) == 2  # full groups went out as they filled
    results = batch.execute()
    assert [r.command.name for r in results] == ["add_pod"] * 7 and all(r.ok for r in results)
    assert len(batch) == 0 and batch.connection is None  # reusable, connection given back
    assert batch.add_pod(web(0)).execute()[0].error is not None
    assert ctx.cache.pod_count() == 7


@case("CommandBatch.close")
def _batch_close(ctx: Ctx) -> None:
    batch = ctx.cache.batch(chunk_size=2)
    batch.add_node(make_node("n1")).add_node(make_node("n2")).add_node(make_node("n3"))
    assert batch.connection is not None  # one group in flight
    batch.close()
    assert batch.connection is None and len(batch) == 0 and batch.execute() == []
    # The group sent before close() may have been applied (its reply is simply not read);
    # n3, never sent, is dropped.
    assert set(ctx.cache.dump().nodes) in ({"n1", "n2"}, set())
    with pytest.raises(RuntimeError), ctx.cache.batch() as failing:
        failing.add_node(make_node("n9"))
        raise RuntimeError  # leaving the block with an error drops what was not sent
    with pytest.raises(NodeNotFound):
        ctx.cache.get_node_info("n9")


# -- NodeTree, Snapshot, NodeInfo ---------------------------------------------------------


def _three_nodes_two_zones(cache: Cache) -> NodeTree:
    for name, zone in (("n1", "a"), ("n2", "b"), ("n3", "a")):
        cache.add_node(make_node(name, labels={ZONE: zone}))
    return cache.node_tree()


@case("NodeTree.zones")
def _tree_zones(ctx: Ctx) -> None:
    zones = _three_nodes_two_zones(ctx.cache).zones()
    assert list(zones.values()) == [["n1", "n3"], ["n2"]]
    assert all("a" in key for key in list(zones)[:1]) and "b" in list(zones)[1]


@case("NodeTree.list")
def _tree_list(ctx: Ctx) -> None:
    tree = _three_nodes_two_zones(ctx.cache)
    assert tree.list() == ["n1", "n2", "n3"]
    ctx.cache.remove_node("n1")
    ctx.cache.add_node(make_node("n1", labels={ZONE: "a"}))
    assert tree.list() == ["n3", "n2", "n1"]


@case("NodeTree.num_nodes")
def _tree_num_nodes(ctx: Ctx) -> None:
    assert ctx.cache.node_tree().num_nodes() == 0
    tree = _three_nodes_two_zones(ctx.cache)
    ctx.cache.add_pod(web(0, "placeholder"))
    assert tree.num_nodes() == 3  # live nodes only


@case("NodeTree.next")
def _tree_next(ctx: Ctx) -> None:
    assert ctx.cache.node_tree().next() == ""
    _three_nodes_two_zones(ctx.cache)
    shared = [ctx.cache.node_tree().next() for _ in range(3)]  # the cursor lives in Redis
    other = ctx.make_cache(name=ctx.cache.name, replica="other")
    shared += [other.node_tree().next() for _ in range(3)]
    assert shared == ["n1", "n2", "n3"] * 2


def _snapshot(ctx: Ctx) -> Snapshot:
    populate(ctx.cache)
    ctx.cache.add_pod(web(4, "n2", cpu="100m", pvcs=["data"]))
    snap = Snapshot()
    ctx.cache.update_snapshot(snap)
    return snap


@case("Snapshot.num_nodes")
def _snapshot_num_nodes(ctx: Ctx) -> None:
    snap = _snapshot(ctx)
    assert snap.num_nodes() == 2
    ctx.cache.add_node(make_node("n3"))
    ctx.cache.update_snapshot(snap)
    assert snap.num_nodes() == 3 == len(snap.node_infos)


@case("Snapshot.get")
def _snapshot_get(ctx: Ctx) -> None:
    snap = _snapshot(ctx)
    assert snap.get("n2").requested.milli_cpu == 1100
    assert snap.get("n1").generation == ctx.cache.get_node_info("n1").generation
    with pytest.raises(NodeNotFound, match="nodeinfo not found for node name nope"):
        snap.get("nope")


@case("Snapshot.is_pvc_used_by_pods")
def _snapshot_pvc(ctx: Ctx) -> None:
    snap = _snapshot(ctx)
    assert snap.is_pvc_used_by_pods(f"{NS}/data") and not snap.is_pvc_used_by_pods(f"{NS}/x")
    ctx.cache.remove_pod(web(4, "n2"))
    ctx.cache.update_snapshot(snap)
    assert not snap.is_pvc_used_by_pods(f"{NS}/data")


AFFINITY = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}
        ]
    }
}
ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
        ]
    }
}


@case("NodeInfo.pods_with_affinity")
def _info_affinity(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(5, affinity=AFFINITY))
    assert [p.name for p in ctx.cache.get_node_info("n1").pods_with_affinity] == ["web-5"]
    assert ctx.cache.get_node_info("n2").pods_with_affinity == []


@case("NodeInfo.pods_with_required_anti_affinity")
def _info_anti_affinity(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(5, "n2", affinity=ANTI_AFFINITY))
    info = ctx.cache.get_node_info("n2")
    assert [p.name for p in info.pods_with_required_anti_affinity] == ["web-5"]
    snap = Snapshot()
    ctx.cache.update_snapshot(snap)
    assert [i.name for i in snap.have_pods_with_required_anti_affinity_list] == ["n2"]


@case("NodeInfo.pod_count")
def _info_pod_count(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(7, "n2"))
    snap = Snapshot()
    ctx.cache.update_snapshot(snap)
    for name, info in snap.node_infos.items():
        # Counted before the pods are decoded, and the same after.
        before = info.pod_count
        assert before == len(info.pods) == info.pod_count
        assert before == len(ctx.cache.get_node_info(name).pods)


@case("NodeInfo.is_ghost")
def _info_is_ghost(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(6, "later"))
    ctx.cache.remove_node("n2")
    ghosts = {name: info.is_ghost for name, info in ctx.cache.dump().nodes.items()}
    assert ghosts == {"n1": False, "n2": True, "later": True}


@case("NodeInfo.shortages")
def _info_shortages(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(7, "n2", cpu="10m", ports=[{"containerPort": 80, "hostPort": 80}]))
    n2 = ctx.cache.get_node_info("n2")  # 2 cpu, 4Gi; 1010m and 2Gi used, port 80
    assert n2.shortages(web(8, "n2", cpu="900m")) == []
    assert n2.shortages(web(8, "n2", cpu="1")) == ["cpu"]
    assert n2.shortages(make_pod("big", "n2", "100m", "3Gi")) == ["memory"]
    clash = web(8, "n2", cpu="10m", ports=[{"containerPort": 80, "hostPort": 80}])
    assert n2.shortages(clash) == ["host-ports"]


@case("NodeInfo.fits_pod")
def _info_fits_pod(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(7, "n2", cpu="10m"))
    n2 = ctx.cache.get_node_info("n2")
    assert n2.fits_pod(web(8, "n2", cpu="900m"))
    assert not n2.fits_pod(make_pod("big", "n2", "100m", "3Gi"))


@case("NodeInfo.fits")
def _info_fits(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(7, "n2", cpu="10m"))
    n2 = ctx.cache.get_node_info("n2")
    with pytest.warns(DeprecationWarning, match="shortages"):
        assert n2.fits(make_pod("big", "n2", "100m", "3Gi")) == ["memory"]


# -- ExpiryWorker ---------------------------------------------------------------------------


def _due_and_lapsed(ctx: Ctx) -> Cache:
    """web-0 finished binding 60 s ago (due); web-1 was assumed by a replica whose lease is
    gone (released)."""
    cache = ctx.make_cache(ttl=10.0, replica="worker")
    cache.assume_pod(web(0))
    cache.finish_binding(web(0), now=ctx.server_now() - 60)
    dead = ctx.make_cache(name=cache.name, replica="dead", lease_ttl=15.0)
    dead.assume_pod(web(1))
    dead.close(release_lease=True)
    return cache


@case("ExpiryWorker.run_once")
def _worker_run_once(ctx: Ctx) -> None:
    cache = _due_and_lapsed(ctx)
    worker = ExpiryWorker(cache, batch=1)  # bounded calls: one pod per call
    assert worker.run_once() == ["web-0"]
    assert (worker.expired_total, worker.forgotten_total) == (1, 1)
    assert cache.pod_count() == 0 and worker.run_once() == []
    reasons = [e.fields.get("reason") for e in cache.events() if e.type == "PodForgotten"]
    assert reasons == ["lease-expired"]


@case("ExpiryWorker.run")
def _worker_run(ctx: Ctx) -> None:
    cache = _due_and_lapsed(ctx)
    worker = ExpiryWorker(cache, interval=0.05)
    rounds: list[list[str]] = []

    def on_round(expired: list[str]) -> None:
        rounds.append(expired)
        if len(rounds) == 2:
            worker.stop()

    worker.run(on_round)
    assert rounds == [["web-0"], []] and cache.pod_count() == 0


@case("ExpiryWorker.stop")
def _worker_stop(ctx: Ctx) -> None:
    cache = _due_and_lapsed(ctx)
    worker = ExpiryWorker(cache)
    worker.stop()
    worker.run(lambda expired: pytest.fail("a stopped worker ran a round"))
    assert worker.run_once() == [] and cache.pod_count() == 2


@case("ExpiryWorker.install_signal_handlers")
def _worker_signals(ctx: Ctx) -> None:
    worker = ExpiryWorker(ctx.cache)
    installed: dict[int, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(signal, "signal", lambda number, handler: installed.update({number: handler}))
        worker.install_signal_handlers()
    assert set(installed) == {signal.SIGTERM, signal.SIGINT}
    installed[signal.SIGTERM](signal.SIGTERM, None)
    assert worker.stopping.is_set()


@case("ExpiryWorker.seconds_until_next_deadline")
def _worker_deadline(ctx: Ctx) -> None:
    cache = ctx.make_cache(ttl=10.0)
    worker = ExpiryWorker(cache, interval=60.0)
    assert worker.seconds_until_next_deadline() == 60.0
    cache.assume_pod(web(0))
    cache.finish_binding(web(0))
    assert 9.0 < worker.seconds_until_next_deadline() <= 10.01
    cache.assume_pod(web(1))
    cache.finish_binding(web(1), now=ctx.server_now() - 30)
    assert worker.seconds_until_next_deadline() == 0.0


# -- functions exported by schedcache/__init__.py -----------------------------------------


@case("schedcache.connect")
def _connect(ctx: Ctx) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENV_URL, raising=False)
        client = connect(ctx.url)
        assert client.ping()
        expected = {"fakeredis": "FakeRedis", "redis": "Redis", "cluster": "ClusterClient"}
        assert type(client).__name__ == expected[ctx.backend]
        if ctx.backend == "cluster":
            assert isinstance(client, ClusterClient)
        cache = Cache(client, ctx.cache.name)
        cache.add_node(make_node("n1"))
        # embedded: every connect() is a fresh in-process server; shared ones are one server
        assert ctx.cache.node_count() == (0 if ctx.url == EMBEDDED else 1)
        assert cache.node_count() == 1
        if ctx.url == EMBEDDED:
            assert type(connect()).__name__ == "FakeRedis"  # no URL, no env: embedded
        else:
            patch.setenv(ENV_URL, ctx.url)
            assert Cache(connect(), ctx.cache.name).node_count() == 1
        client.close()
    with pytest.raises(connection_module.ConnectionFailed, match="unsupported scheme"):
        connect("http://localhost")


KUBECTL_LIST = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        node_manifest("k1", "4", "8Gi", labels={ZONE: "a"}),
        node_manifest("k2", "4", "8Gi", labels={ZONE: "b"}),
        pod_manifest("api-0", "k1", "1", "1Gi", namespace=NS, labels={"app": "api"}),
        pod_manifest("api-1", "k2", "1", "1Gi", namespace=NS, labels={"app": "api"}),
        pod_manifest("pending", "", "1", "1Gi", namespace=NS),
    ],
}


@case("schedcache.objects_from_k8s")
def _objects_from_k8s(ctx: Ctx) -> None:
    objects = objects_from_k8s(KUBECTL_LIST)
    assert [type(o).__name__ for o in objects] == ["Node"] * 2 + ["Pod"] * 3
    with ctx.cache.batch() as batch:
        for obj in objects:
            if isinstance(obj, schedcache.Node):
                batch.add_node(obj)
            elif obj.node_name:
                batch.add_pod(obj)
    assert (ctx.cache.node_count(), ctx.cache.pod_count()) == (2, 2)


@case("schedcache.load_k8s_file")
def _load_k8s_file(ctx: Ctx) -> None:
    path = ctx.tmp_path / "cluster.json"
    path.write_text(json.dumps(KUBECTL_LIST))
    objects = load_k8s_file(path)
    assert load_k8s_file(str(path)) == objects
    for obj in objects:
        if isinstance(obj, schedcache.Node):
            ctx.cache.add_node(obj)
        elif obj.node_name:
            ctx.cache.add_pod(obj)
    assert ctx.cache.get_node_info("k2").requested.milli_cpu == 1000


@case("schedcache.parse_selector")
def _parse_selector(ctx: Ctx) -> None:
    populate(ctx.cache)
    selector = parse_selector("app in (web,db),app!=db")
    assert [p.name for p in ctx.cache.filtered_list(lambda p: selector.matches(p.labels))] == [
        "web-0",
        "web-1",
    ]


# -- the CLI ------------------------------------------------------------------------------


def cli_commands(group: click.Group = main, prefix: str = "") -> list[str]:
    """Every leaf command of the CLI, as typed: ``"get pod"``, ``"worker expiry"``, ..."""
    found = []
    context = click.Context(group)
    for name in group.list_commands(context):  # the CLI's own list: subcommands load lazily
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            found += cli_commands(command, f"{prefix}{name} ")
        else:
            found.append(f"{prefix}{name}")
    return found


def ok(result: Result) -> str:
    """What the command printed on stdout (logs and progress bars go to stderr)."""
    assert result.exit_code == 0, result.output
    return result.stdout


@case("cli demo")
def _cli_demo(ctx: Ctx) -> None:
    out = ok(ctx.cli("demo", "--nodes", "2", "--pods", "6", "--replicas", "2", "--seed", "3"))
    assert "Summary" in out and "pods to schedule" in out
    assert ctx.cache.node_count() == 2 and ctx.cache.pod_count() > 0
    assert ctx.cache.verify() == []


@case("cli load")
def _cli_load(ctx: Ctx) -> None:
    path = ctx.tmp_path / "cluster.json"
    path.write_text(json.dumps(KUBECTL_LIST))
    out = ok(ctx.cli("load", str(path)))
    assert "applied: 2 add_node, 2 add_pod" in out and "skipped: 1" in out
    assert (ctx.cache.node_count(), ctx.cache.pod_count()) == (2, 2)
    assert {e.replica for e in ctx.cache.events()} == {"loader"}
    _cli_load_prune(ctx, path)


def _cli_load_prune(ctx: Ctx, path: Path) -> None:
    """(cli load, continued) --prune removes what the List no longer holds."""
    ctx.cache.assume_pod(make_pod("placed", "k1", "10m", "1Mi"))  # the scheduler's: stays
    smaller = {**KUBECTL_LIST, "items": KUBECTL_LIST["items"][1:2] + KUBECTL_LIST["items"][3:]}
    path.write_text(json.dumps(smaller))  # k1 and api-0 are gone from the cluster
    out = ok(ctx.cli("load", str(path)))  # no prune: both stay; the rest is as loaded
    assert "applied: nothing" in out and "2 unchanged" in out
    assert ctx.cache.node_count() == 2 and ctx.cache.pod_count() == 3
    out = ok(ctx.cli("load", "--prune", str(path)))
    assert "pruned: 1 nodes, 1 pods" in out
    names = sorted(pod.name for pod in ctx.cache.list_pods())
    assert names == ["api-1", "placed"] and ctx.cache.verify() == []
    watch = ctx.tmp_path / "watch.json"
    watch.write_text(json.dumps({"type": "DELETED", "object": KUBECTL_LIST["items"][3]}))
    before = keyspace(ctx.client, ctx.cache.keys.pattern)
    refused = ctx.cli("load", "--prune", str(watch))
    assert refused.exit_code == 1 and "needs full lists" in refused.output
    assert keyspace(ctx.client, ctx.cache.keys.pattern) == before


@case("cli sync")
def _cli_sync(ctx: Ctx) -> None:
    with FakeApiServer() as server:
        for obj in KUBECTL_LIST["items"]:
            server.create(obj)
        kubeconfig = str(server.kubeconfig(ctx.tmp_path / "kubeconfig"))
        out = ok(ctx.cli("sync", "--once", "--kubeconfig", kubeconfig))
        # pods: the two running ones, and the pending one into the scheduling queue
        assert out.startswith("nodes: 2 applied, 0 dropped") and "pods: 3 applied" in out
        assert ctx.cache.node_count() == 2 and ctx.cache.pod_count() == 2
        server.delete("Pod", "api-0", NS)
        again = ok(ctx.cli("sync", "--once", "--kubeconfig", kubeconfig))
        assert "nodes: 0 applied, 2 dropped" in again and "pods: 1 applied, 2 dropped" in again
        assert [pod.name for pod in ctx.cache.list_pods()] == ["api-1"]
        rows = dict(line.split("\t") for line in ok(ctx.cli("stats")).splitlines())
        assert rows["sync pods"].startswith(f"rv {server.resource_version}, ")
        missing = ctx.cli("sync", "--once", "--kubeconfig", str(ctx.tmp_path / "nothing"))
        assert missing.exit_code == 1 and "cannot configure the Kubernetes client" in missing.output
        assert "nothing: no such file" in missing.output  # (found in review, mended)
        server.down()
        before = keyspace(ctx.client, ctx.cache.keys.pattern)
        away = ctx.cli("sync", "--once", "--kubeconfig", kubeconfig)
        assert away.exit_code == 1 and "the API server failed" in away.output
        assert keyspace(ctx.client, ctx.cache.keys.pattern) == before


@case("cli extender")
def _cli_extender(ctx: Ctx) -> None:
    # Serving is tested in tests/test_extender.py (in-process and as a process); here what a
    # user gets wrong, on every backend, with nothing written.
    before = keyspace(ctx.client, ctx.cache.keys.pattern)
    bad = ctx.cli("extender", "--no-api", "--listen", "localhost:99999")
    assert bad.exit_code == 2 and "port from 1 to 65535" in bad.output
    missing = ctx.cli("extender", "--kubeconfig", str(ctx.tmp_path / "nothing"))
    assert missing.exit_code == 1 and "cannot configure the Kubernetes client" in missing.output
    assert keyspace(ctx.client, ctx.cache.keys.pattern) == before


@case("cli scheduler")
def _cli_scheduler(ctx: Ctx) -> None:
    before = keyspace(ctx.client, ctx.cache.keys.pattern)
    assert ctx.cli("scheduler").exit_code == 2  # --scheduler-name is required
    missing = ctx.cli(
        "scheduler", "--scheduler-name", "mine", "--kubeconfig", str(ctx.tmp_path / "nothing")
    )
    assert missing.exit_code == 1 and "cannot configure the Kubernetes client" in missing.output
    assert keyspace(ctx.client, ctx.cache.keys.pattern) == before


@case("cli explain pod")
def _cli_explain_pod(ctx: Ctx) -> None:
    ctx.cache.add_node(make_node("big", "2", "8Gi"))
    ctx.cache.add_node(make_node("small", "200m", "8Gi"))
    web = make_pod("web", "big", "1", "1Gi")
    ctx.cache.assume_pod(web)
    text = ok(ctx.cli("explain", "pod", f"{web.namespace}/web"))
    assert "on big: still assumed" in text and "1 of 2 nodes fitted" in text
    assert "small\tInsufficient cpu" in text
    parsed = json.loads(ok(ctx.cli("explain", "pod", web.uid, "-o", "json")))
    assert parsed[0]["node"] == "big" and parsed[0]["free_after"]["milli_cpu"] == 1000
    missing = ctx.cli("explain", "pod", "ns/nobody")
    assert missing.exit_code == 1 and "has no claim" in missing.output


@case("cli whatif")
def _cli_whatif(ctx: Ctx) -> None:
    for name in ("a", "b"):
        ctx.cache.add_node(make_node(name, "2", "4Gi"))
    at = ctx.cache.last_events(1)[0].id
    for index in range(4):
        ctx.cache.assume_pod(make_pod(f"w{index}", "ab"[index % 2], "500m", "1Gi"))
    before = keyspace(ctx.client, ctx.cache.keys.pattern)
    text = ok(ctx.cli("whatif", "--at", at))
    assert "what-if at" in text and "4 pods on 2 nodes" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line}
    assert rows["actual"][1:3] == ["4", "0"] and rows["most-allocated"][4] == "1"  # nodes used
    parsed = json.loads(
        ok(ctx.cli("whatif", "--at", at, "--policy", "most-allocated", "-o", "json"))
    )
    assert [o["policy"] for o in parsed["outcomes"]] == ["actual", "most-allocated"]
    bad = ctx.cli("whatif", "--at", at, "--policy", "no.such.module:f")
    assert bad.exit_code == 1 and "importing no.such.module failed" in bad.output
    assert keyspace(ctx.client, ctx.cache.keys.pattern) == before  # a what-if writes nothing


@case("Cache.pod_ref")
def _pod_ref(ctx: Ctx) -> None:
    populate(ctx.cache)
    assert Cache.pod_ref(ctx.cache.get_pod("web-1")) == Cache.pod_ref(web(1))
    assert Cache.pod_ref(web(1)) == ("web-1", f"pod {NS}/web-1 (uid web-1)")
    assert Cache.pod_ref("u-1") == ("u-1", "pod with uid u-1")
    with pytest.raises(ValidationError, match="expected a Pod or a uid"):
        Cache.pod_ref("")


# -- AsyncCache: the same calls on the same server, through redis.asyncio ---------------------


def on_async(ctx: Ctx, body: Callable[[AsyncCache], Any], **options: Any) -> None:
    """``await body(cache)`` with an AsyncCache on the case's backend and cache name."""

    async def main() -> None:
        client = await async_client_for(ctx.cache, ctx.url)
        options.setdefault("replica", "parity")
        cache = await AsyncCache.open(client, ctx.cache.name, ttl=10.0, **options)
        try:
            await body(cache)
        finally:
            await cache.aclose()
            await client.aclose()

    asyncio.run(main())


@case(
    "AsyncCache.aclose",
    "AsyncCache.add_node",
    "AsyncCache.add_pod",
    "AsyncCache.assume_pod",
    "AsyncCache.generation",
    "AsyncCache.node_count",
    "AsyncCache.has_node",
    "AsyncCache.pod_count",
    "AsyncCache.stream_length",
    "AsyncCache.events",
)
def _async_populate(ctx: Ctx) -> None:
    """What ``populate`` does through the sync API, done through the async one, leaves the
    same events and aggregates; the reads agree with the sync reads."""

    async def body(cache: AsyncCache) -> None:
        await cache.add_node(make_node("n1", "4", "8Gi", labels={ZONE: "a"}))
        await cache.add_node(make_node("n2", "2", "4Gi", labels={ZONE: "b"}))
        await cache.add_pod(web(0))
        await cache.assume_pod(web(1))
        await cache.add_pod(make_pod("db-0", "n2", "1", "1Gi", namespace=NS, labels={"app": "db"}))
        assert [e.type async for e in cache.events()] == POPULATED_TYPES
        assert await cache.generation() == ctx.cache.generation() == 5
        assert (await cache.node_count(), await cache.pod_count()) == (2, 3)
        assert await cache.has_node("n2") and not await cache.has_node("n3")
        assert await cache.stream_length() == ctx.cache.stream_length() == 5
        with pytest.raises(FitConflict):
            await cache.assume_pod(web(2, cpu="4"), check_fit=True)

    on_async(ctx, body)
    info = ctx.cache.get_node_info("n1")
    assert info.requested.milli_cpu == 1000 and len(info.pods) == 2
    assert ctx.cache.verify() == []


_REPELLING = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
        ]
    }
}


@case("Cache.judged_claim", "AsyncCache.judged_claim")
def _judged_claim(ctx: Ctx) -> None:
    """A claim judged on the cache's own snapshot: an existing pod's zone anti-affinity refuses
    the node in its zone (nothing written), another zone takes the pod; sync and async alike."""
    cache = ctx.cache
    cache.add_node(make_node("n1", "4", "8Gi", labels={ZONE: "a"}))
    cache.add_node(make_node("n2", "4", "8Gi", labels={ZONE: "b"}))
    cache.add_pod(make_pod("guard", "n1", "1", "1Gi", namespace=NS, affinity=_REPELLING))
    with pytest.raises(FitConflict) as refused:
        cache.judged_claim(web(0))
    assert refused.value.reasons == ("existing-anti-affinity",)
    assert isinstance(cache.judged_claim(web(1).with_node("n2")), int)

    async def body(aio: AsyncCache) -> None:
        with pytest.raises(FitConflict):
            await aio.judged_claim(web(2))
        assert isinstance(await aio.judged_claim(web(3).with_node("n2")), int)

    on_async(ctx, body)
    assert ctx.cache.pod_state("web-0") is None and ctx.cache.pod_state("web-3") == "assumed"
    assert ctx.cache.verify() == []


@case("Cache.judged_claim_command", "AsyncCache.judged_claim_command")
def _judged_claim_command(ctx: Ctx) -> None:
    """The judged claim made but not sent (a batch keeps it before sending it): sync and async
    make the same command, judged on their own snapshots, and nothing is written until it is
    run; run, it claims as judged_claim does."""
    cache = ctx.cache
    cache.add_node(make_node("n1", "4", "8Gi", labels={ZONE: "a"}))
    cache.add_node(make_node("n2", "4", "8Gi", labels={ZONE: "b"}))
    cache.add_pod(make_pod("guard", "n1", "1", "1Gi", namespace=NS, affinity=_REPELLING))
    made = cache.judged_claim_command(web(0).with_node("n2"), (), 30.0)
    assert made.name == "timed_claim" and cache.pod_state("web-0") is None
    seen: list[Any] = []

    async def body(aio: AsyncCache) -> None:
        seen.append(await aio.judged_claim_command(web(0).with_node("n2"), (), 30.0))

    on_async(ctx, body)
    (async_made,) = seen
    assert (async_made.name, async_made.args) == (made.name, made.args)
    assert cache.pod_state("web-0") is None  # made, not sent
    cache.run(made)
    assert cache.pod_state("web-0") == "assumed" and cache.verify() == []


@case(
    "AsyncCache.run",
    "AsyncCache.finish_binding",
    "AsyncCache.forget_pod",
    "AsyncCache.update_pod",
    "AsyncCache.remove_pod",
    "AsyncCache.update_node",
    "AsyncCache.remove_node",
    "AsyncCache.cleanup_assumed_pods",
    "AsyncCache.get_pod",
    "AsyncCache.get_pod_record",
    "AsyncCache.is_assumed_pod",
    "AsyncCache.pod_state",
)
def _async_lifecycle(ctx: Ctx) -> None:
    populate(ctx.cache)

    async def body(cache: AsyncCache) -> None:
        assert await cache.get_pod("web-1") == ctx.cache.get_pod("web-1")
        record = await cache.get_pod_record(web(1))
        assert (record.state, record.node, record.claimer) == ("assumed", "n1", "parity")
        assert await cache.is_assumed_pod("web-1") and not await cache.is_assumed_pod("web-0")
        await cache.finish_binding(web(1), now=ctx.server_now() - 60)  # deadline passed
        assert await cache.cleanup_assumed_pods() == ["web-1"]
        assert await cache.pod_state("web-1") is None
        await cache.run(commands.assume_pod(web(2), False, None, 0.0))
        await cache.forget_pod(web(2))
        await cache.update_pod(web(0), web(0, cpu="1"))
        await cache.remove_pod(make_pod("db-0", "n2", "1", "1Gi", namespace=NS))
        await cache.update_node(None, make_node("n2", "3", "4Gi", labels={ZONE: "b"}))
        await cache.remove_node("n2")
        with pytest.raises(PodNotFound):
            await cache.get_pod("web-2")

    on_async(ctx, body)
    assert ctx.cache.get_node_info("n1").requested.milli_cpu == 1000
    assert not ctx.cache.has_node("n2") and ctx.cache.verify() == []


@case("AsyncCache.update_snapshot", "AsyncCache.get_node_info")
def _async_snapshot(ctx: Ctx) -> None:
    """The snapshot code the sync cache runs, driven through redis.asyncio: the same result."""
    populate(ctx.cache)
    expected = Snapshot()
    ctx.cache.update_snapshot(expected)

    async def body(cache: AsyncCache) -> None:
        snap = Snapshot()
        report = await cache.update_snapshot(snap)
        assert report.changed_nodes == 2 and snap.generation == expected.generation
        assert snap.node_infos == expected.node_infos
        assert [i.name for i in snap.node_info_list] == [i.name for i in expected.node_info_list]
        await cache.add_pod(web(5))
        report = await cache.update_snapshot(snap)
        assert report.changed_nodes == 1 and len(snap.get("n1").pods) == 3
        assert await cache.get_node_info("n1") == snap.get("n1")
        with pytest.raises(NodeNotFound):
            await cache.get_node_info("nope")

    on_async(ctx, body)


@case(
    "AsyncCache.node_tree",
    "AsyncNodeTree.zones",
    "AsyncNodeTree.list",
    "AsyncNodeTree.num_nodes",
    "AsyncNodeTree.next",
)
def _async_node_tree(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_node(make_node("n3", "1", "1Gi", labels={ZONE: "a"}))
    tree = ctx.cache.node_tree()

    async def body(cache: AsyncCache) -> None:
        mine = cache.node_tree()
        assert await mine.zones() == tree.zones()
        assert await mine.list() == tree.list() and await mine.num_nodes() == 3
        turns = [await mine.next() for _ in range(3)] + [tree.next()]
        assert sorted(turns[:3]) == ["n1", "n2", "n3"] and turns[3] == turns[0]  # one cursor

    on_async(ctx, body)


@case(
    "AsyncCache.batch",
    "AsyncCache.lease_to_take",
    "AsyncCache.hold_lease",
    "AsyncCommandBatch.add",
    "AsyncCommandBatch.claimed",
    "AsyncCommandBatch.execute",
    "AsyncCommandBatch.settle",
)
def _async_batch(ctx: Ctx) -> None:
    """Every shortcut of the shared BatchBuilder through the async batch: the events and
    aggregates of the same commands sent one by one; a settle answers from the ids."""

    async def body(cache: AsyncCache) -> None:
        assert cache.lease_to_take > 0  # no heartbeat yet: the first claim takes the lease
        async with cache.batch(chunk_size=3) as batch:
            batch.add(commands.add_node(make_node("n1", "4", "8Gi", labels={ZONE: "a"})))
            batch.add_node(make_node("n2", "2", "4Gi", labels={ZONE: "b"}))
            batch.update_node(None, make_node("n2", "3", "4Gi", labels={ZONE: "b"}))
            batch.add_pod(web(0)).assume_pod(web(1)).assume_pod(web(2, cpu="9"), check_fit=True)
            batch.finish_binding(web(1)).update_pod(web(0), web(0, cpu="1"))
            batch.add_pod(web(3)).remove_pod(web(3)).assume_pod(web(4)).forget_pod(web(4))
            batch.add_node(make_node("n3")).remove_node("n3")
        assert cache.lease is not None and cache.lease.task is not None  # claims were sent
        assert cache.lease_to_take == 0.0
        cache.hold_lease()  # already held: the same task
        settled = await cache.batch().settle(batch.sent)
        assert [r.ok for r in settled] == [True] * 5 + [False] + [True] * 8
        assert isinstance(settled[5].error, FitConflict)

    on_async(ctx, body)
    types = [e.type for e in ctx.cache.events()]
    assert types.count("PodAssumed") == 2 and types.count("NodeAdded") == 3  # once each
    assert ctx.cache.get_node_info("n1").requested.milli_cpu == 1500  # web-0 at 1, web-1
    assert ctx.cache.get_node_info("n2").allocatable.milli_cpu == 3000
    assert ctx.cache.verify() == []


@case(
    "AsyncCache.replay",
    "AsyncCache.verify",
    "AsyncCache.checkpoint",
    "AsyncCache.compact",
    "AsyncCache.at",
    "AsyncCache.dump",
    "AsyncCache.history",
    "AsyncCache.history_of_node",
    "AsyncCache.list_pods",
    "AsyncCache.last_events",
    "AsyncCache.pod_ref",
)
def _async_audit(ctx: Ctx) -> None:
    """The audit calls fold in a thread on a sync client of the same server: the sync
    cache's answers."""
    populate(ctx.cache)

    async def body(cache: AsyncCache) -> None:
        assert await cache.replay() == ctx.cache.replay() and await cache.verify() == []
        assert await cache.dump() == ctx.cache.dump()
        first = (await cache.last_events(5))[0]
        assert first == ctx.cache.last_events(5)[0] and first.type == "NodeAdded"
        assert (await cache.at(first.id)).num_nodes() == 1
        assert await cache.history("web-1") == ctx.cache.history("web-1")
        assert await cache.history_of_node("n2") == ctx.cache.history_of_node("n2")
        assert [p.name for p in await cache.list_pods("app=web")] == ["web-0", "web-1"]
        assert cache.pod_ref(web(1)) == ("web-1", f"pod {NS}/web-1 (uid web-1)")
        assert await cache.checkpoint() == ctx.cache.last_events(1)[0].id
        assert await cache.compact() == 4

    on_async(ctx, body)
    assert ctx.cache.stream_length() == 1 and ctx.cache.verify() == []


@case(
    "AsyncExpiryWorker.run_once",
    "AsyncExpiryWorker.run",
    "AsyncExpiryWorker.stop",
    "AsyncExpiryWorker.seconds_until_next_deadline",
)
def _async_worker(ctx: Ctx) -> None:
    cache = _due_and_lapsed(ctx)

    async def body(acache: AsyncCache) -> None:
        worker = AsyncExpiryWorker(acache, interval=0.05, batch=1)
        assert await worker.seconds_until_next_deadline() == 0.0  # web-0 is due now
        rounds: list[list[str]] = []

        def on_round(expired: list[str]) -> None:
            rounds.append(expired)
            if len(rounds) == 2:
                worker.stop()

        await asyncio.wait_for(worker.run(on_round), 10)
        assert rounds == [["web-0"], []] and worker.forgotten_total == 1
        assert await worker.run_once() == []  # stopped: no call is made

    on_async(ctx, body)
    assert cache.pod_count() == 0


@case("AsyncCache.follow")
def _async_follow(ctx: Ctx) -> None:
    async def body(cache: AsyncCache) -> None:
        seen: list[str] = []

        async def follow() -> None:
            async for event in cache.follow(after="0-0", timeout=0.2):
                seen.append(event.type)
                if len(seen) == 2:
                    return

        follower = asyncio.ensure_future(follow())
        await cache.add_node(make_node("n1", "4", "8Gi"))
        await cache.add_pod(web(0))
        await asyncio.wait_for(follower, 10)
        assert seen == ["NodeAdded", "PodAdded"]

    on_async(ctx, body)


@case("Cache.assume_gang", "AsyncCache.assume_gang")
def _assume_gang(ctx: Ctx) -> None:
    """A gang placed whole, and one that does not fit written not at all (docs/gangs.md)."""
    cache = ctx.cache
    cache.add_node(make_node("n1", "2", "8Gi"))
    assert cache.assume_gang([web(0), web(1)], f"{NS}/g") == ["n1", "n1"]
    before = cache.dump()
    with pytest.raises(FitConflict):
        cache.assume_gang([web(2), web(3), web(4)], f"{NS}/h")  # 1 cpu left for 1.5
    assert cache.dump() == before

    async def body(aio: AsyncCache) -> None:
        with pytest.raises(FitConflict):
            await aio.assume_gang([web(5), web(6), web(7)], f"{NS}/i")
        assert await aio.assume_gang([web(8), web(9)], f"{NS}/j") == ["n1", "n1"]

    on_async(ctx, body)
    assert cache.dump() != before and cache.verify() == []


@case("cli scripts")
def _cli_scripts(ctx: Ctx) -> None:
    lines = ok(ctx.cli("scripts")).splitlines()
    assert set(function_names()) == set(lines[:-1])
    assert lines[-1].endswith(f"{len(lines) - 1} functions loaded")


@case("cli migrate")
def _cli_migrate(ctx: Ctx) -> None:
    populate(ctx.cache)
    expected = ctx.cache.dump()
    client, keys = ctx.cache.client, ctx.cache.keys
    for name in ("n1", "n2"):  # back to schema 1's plain sets
        uids = client.zrange(keys.node_pods(name), 0, -1)
        client.delete(keys.node_pods(name))
        client.sadd(keys.node_pods(name), *uids)
    assert ok(ctx.cli("migrate")) == (
        f"cache {ctx.cache.name}: 2 node pod sets converted; the cache is at schema 2\n"
    )
    assert ctx.cache.dump() == expected and ctx.cache.verify() == []
    assert ok(ctx.cli("migrate")).startswith(f"cache {ctx.cache.name}: 0 node pod sets converted")


@case("cli stats")
def _cli_stats(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.remove_node("n2")
    rows = dict(line.split("\t") for line in ok(ctx.cli("stats")).splitlines())
    assert rows == {
        "nodes": "1",
        "ghost/placeholder nodes": "1",
        "pods": "3",
        "assumed pods": "1",
        "stream length": "6",
        "generation": "6",
        "truncated pods": "0",
    }


@case("cli dump")
def _cli_dump(ctx: Ctx) -> None:
    populate(ctx.cache)
    document = json.loads(ok(ctx.cli("dump", "-o", "json")))
    assert document["cache"] == ctx.cache.name and document["generation"] == 5
    assert document["nodes"]["n1"]["pods"] == ["prod/web-0", "prod/web-1"]
    assert document["assumed_pods"] == ["web-1"]
    wide = ok(ctx.cli("dump", "-o", "wide")).splitlines()
    assert wide[0].split()[:2] == ["NAME", "STATUS"] and wide[1].split()[:4] == [
        "n1",
        "Ready",
        "a",
        "2/110",
    ]  # the factories' nodes report Ready=True


@case("cli get")
def _cli_get(ctx: Ctx) -> None:
    populate(ctx.cache)
    record = json.loads(ok(ctx.cli("get", "pod", "web-1", "-n", "prod", "-o", "json")))
    state = record["status"]["schedcache"]
    assert (state["state"], state["node"], record["metadata"]["uid"]) == ("assumed", "n1", "web-1")
    assert json.loads(ok(ctx.cli("get", "pod", "web-1", "-o", "json"))) == record  # by uid
    missing = ctx.cli("get", "pod", "nope")
    assert missing.exit_code == 1 and 'pods "nope" not found' in missing.output
    names = ok(ctx.cli("get", "pods", "-A", "-o", "name")).split()
    assert names == ["pod/db-0", "pod/web-0", "pod/web-1"]
    on_n1 = ok(ctx.cli("get", "pods", "-n", NS, "--field-selector", "spec.nodeName=n1"))
    assert [line.split()[0] for line in on_n1.splitlines()[1:]] == ["web-0", "web-1"]
    assert ok(ctx.cli("get", "nodes", "-o", "name")).split() == ["node/n1", "node/n2"]


@case("cli describe")
def _cli_describe(ctx: Ctx) -> None:
    populate(ctx.cache)
    node = ok(ctx.cli("describe", "node", "n1"))
    for section in ("Labels:", "Allocatable:", "Non-terminated Pods:", "Allocated resources:"):
        assert section in node, node
    assert "web-0" in node and "web-1" in node and "db-0" not in node
    pod = ok(ctx.cli("describe", "pod", "web-0", "-n", NS))
    assert "web-0" in pod and "n1" in pod
    missing = ctx.cli("describe", "node", "nope")
    assert missing.exit_code == 1 and 'nodes "nope" not found' in missing.output


@case("cli completion")
def _cli_completion(ctx: Ctx) -> None:
    """Reads no cache: the shell's completion script, which calls back into schedcache."""
    for shell, marker in (("bash", "complete "), ("zsh", "compdef"), ("fish", "complete ")):
        assert marker in ok(ctx.cli("completion", shell)), shell
    assert ctx.cli("completion", "tcsh").exit_code == 2


@case("cli acl")
def _cli_acl(ctx: Ctx) -> None:
    """Connects to nothing: the rules come from the code, the same on every backend."""
    for role in ("reader", "feeder", "scheduler", "worker", "admin"):
        printed = ok(ctx.cli("acl", ctx.cache.name, "--role", role)).strip()
        assert printed == acl_rules(ctx.cache.name, role)
    assert ctx.cli("acl", ctx.cache.name, "--role", "root").exit_code == 2


@case("cli events")
def _cli_events(ctx: Ctx) -> None:
    populate(ctx.cache)
    lines = [line.split() for line in ok(ctx.cli("events", "--no-headers")).splitlines()]
    assert [line[1] for line in lines] == POPULATED_TYPES
    last = ok(ctx.cli("events", "--count", "2", "--no-headers")).splitlines()
    assert [line.split() for line in last] == lines[-2:]
    since = lines[1][0]
    after = ok(ctx.cli("events", "--since", since, "--no-headers")).splitlines()
    assert [line.split() for line in after] == lines[2:]


@case("cli history pod")
def _cli_history_pod(ctx: Ctx) -> None:
    populate(ctx.cache)
    ctx.cache.add_pod(web(1))
    lines = ok(ctx.cli("history", "pod", "prod/web-1")).splitlines()
    assert [line.split()[1] for line in lines] == ["PodAssumed", "PodAdded"]
    assert ok(ctx.cli("history", "pod", "web-1")).splitlines() == lines


@case("cli history node")
def _cli_history_node(ctx: Ctx) -> None:
    populate(ctx.cache)
    lines = ok(ctx.cli("history", "node", "n2")).splitlines()
    assert [line.split()[1] for line in lines] == ["NodeAdded", "PodAdded"]


@case("cli verify")
def _cli_verify(ctx: Ctx) -> None:
    populate(ctx.cache)
    assert "consistent: 5 events replay to the live state" in ok(ctx.cli("verify"))
    ctx.cache.client.hincrby(ctx.cache.keys.node("n1"), "r:cpu", 1)
    failed = ctx.cli("verify")
    assert failed.exit_code == 1 and "node n1" in failed.output


@case("cli replay")
def _cli_replay(ctx: Ctx) -> None:
    populate(ctx.cache)
    first_two = list(ctx.cache.events())[1].id
    document = json.loads(ok(ctx.cli("replay", "--until", first_two, "-o", "json")))
    assert document["until"] == first_two and set(document["nodes"]) == {"n1", "n2"}
    assert document["assumed_pods"] == [] and document["generation"] == 2
    wide = ok(ctx.cli("replay", "-o", "wide")).splitlines()
    assert wide[:-1] == ok(ctx.cli("dump", "-o", "wide")).splitlines()[:-1]  # dump's table
    assert [line.split()[:2] for line in wide[1:3]] == [["n1", "Ready"], ["n2", "Ready"]]


@case("cli checkpoint")
def _cli_checkpoint(ctx: Ctx) -> None:
    populate(ctx.cache)
    last = list(ctx.cache.events())[-1].id
    assert ok(ctx.cli("checkpoint")).strip() == f"checkpoint at {last}"
    assert ctx.cache.replay().last_id == last and ctx.cache.verify() == []


@case("cli compact")
def _cli_compact(ctx: Ctx) -> None:
    populate(ctx.cache)
    refused = ctx.cli("compact")
    assert refused.exit_code == 1 and "no checkpoint" in refused.output
    ctx.cache.checkpoint()
    assert ok(ctx.cli("compact", "--keep", "1")).strip() == "removed 3 events; 2 remain"
    assert ctx.cache.verify() == []


@case("cli diff")
def _cli_diff(ctx: Ctx) -> None:
    populate(ctx.cache)
    events = list(ctx.cache.events())
    out = ok(ctx.cli("diff", events[1].id, events[-1].id)).splitlines()
    assert out == [
        "node n1",
        "  + pod prod/web-0",
        "  + pod prod/web-1",
        "  cpu requested: 0 -> 1",
        "  memory requested: 0 -> 2Gi",
        "node n2",
        "  + pod prod/db-0",
        "  cpu requested: 0 -> 1",
        "  memory requested: 0 -> 1Gi",
    ]


@case("cli worker expiry")
def _cli_worker_expiry(ctx: Ctx) -> None:
    cache = _due_and_lapsed(ctx)
    assert ok(ctx.cli("worker", "expiry", "--once", cache=cache)).strip() == "expired 1 pod"
    assert cache.pod_count() == 0
    # The default replica is unique per process: expiry-worker-<pod or host>-<pid>.
    assert all(e.replica.startswith("expiry-worker-") for e in list(cache.events())[-2:])


@case("cli worker compact")
def _cli_worker_compact(ctx: Ctx) -> None:
    populate(ctx.cache)
    out = ok(ctx.cli("worker", "compact", "--keep", "0.001s", "--once"))
    assert out.startswith("removed ") and ctx.cache.stream_length() < 5
    assert ctx.cache.verify() == [] and ctx.cache.replay().nodes == ctx.cache.dump().nodes


class _ImmediateEvent:
    """The commands' stop event (``StopEvent``) whose ``wait()`` returns at once
    (``schedcache metrics`` waits for a signal forever)."""

    def wait(self, timeout: float | None = None) -> bool:
        return True

    def set(self) -> None:
        pass

    def is_set(self) -> bool:  # not stopped while it waits for Redis at start
        return False


@case("cli metrics")
def _cli_metrics(ctx: Ctx) -> None:
    populate(ctx.cache)
    registry = CollectorRegistry(auto_describe=True)
    served: list[Any] = []
    handlers: dict[int, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        # The collector goes to a private registry, nothing listens, no signal handler of the
        # test process is replaced, and the wait for SIGTERM returns at once.
        patch.setattr(cli_serve, "REGISTRY", registry)
        patch.setattr(cli_serve, "start_http_server", lambda *a, **k: served.append((a, k)))
        patch.setattr(signal, "signal", lambda number, handler: handlers.update({number: handler}))
        patch.setattr(cli_lifecycle, "StopEvent", _ImmediateEvent)
        result = ctx.cli("metrics", "--port", "9999", "--address", "127.0.0.1")
    assert result.exit_code == 0, result.output
    assert served == [((9999,), {"addr": "127.0.0.1"})] and set(handlers) == {
        signal.SIGTERM,
        signal.SIGINT,
    }
    text = generate_latest(registry).decode()
    name = ctx.cache.name
    assert f'schedcache_cache_size{{cache="{name}",type="nodes"}} 2.0' in text
    assert f'schedcache_cache_size{{cache="{name}",type="pods"}} 3.0' in text
    assert f'schedcache_cache_size{{cache="{name}",type="assumed_pods"}} 1.0' in text
    assert f'schedcache_stream_length{{cache="{name}"}} 5.0' in text


# -- the enumeration ----------------------------------------------------------------------


def public_names() -> set[str]:
    """Every public method and property of ``CLASSES`` (with those of the parts in
    ``INHERITED``), every function exported by ``schedcache/__init__.py`` and every CLI
    command."""
    names = set()
    for cls in CLASSES:
        members = {}
        for klass in (*INHERITED.get(cls, ()), cls):
            members.update(vars(klass))
        for name, value in members.items():
            if name.startswith("_"):
                continue
            descriptor = isinstance(value, property | functools.cached_property)
            if callable(value) or descriptor:
                names.add(f"{cls.__name__}.{name}")
    for name in schedcache.__all__:
        value = getattr(schedcache, name)
        if callable(value) and not isinstance(value, type):
            names.add(f"schedcache.{name}")
    names |= {f"cli {command}" for command in cli_commands()}
    return names


def test_every_public_entry_point_has_a_parity_case():
    names = public_names()
    assert len(names) > 80  # the introspection itself works
    missing = sorted(names - set(CASES))
    stale = sorted(set(CASES) - names)
    assert not missing, f"public entry points without a parity case: {missing}"
    assert not stale, f"parity cases for names that are no longer public: {stale}"


# -- every case on every backend ------------------------------------------------------------


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    return Recorder().install(monkeypatch)


@pytest.fixture
def ctx(backend, client, request, tmp_path, recorder) -> Iterator[Ctx]:
    context = Ctx(backend, client, backend_url(backend, request), tmp_path)
    recorder.clear()  # what the fixtures themselves sent (cluster discovery) is not the case's
    yield context
    context.cleanup()


@pytest.mark.parametrize("name", sorted(CASES))
def test_parity(name, ctx, recorder):
    CASES[name](ctx)
    sent = recorder.sent()
    assert (
        "FCALL" in sent
        or "FCALL_RO" in sent
        or name.startswith(("Cache.check", "NodeInfo"))
        or name in ("cli completion", "cli acl")  # print text: no cache involved
    )
    # Default settings (wait_replicas=0): no WAIT on any backend.
    assert "WAIT" not in sent, f"{name} sent WAIT with wait_replicas=0"
    if ctx.backend == "fakeredis":
        assert not sent & FORBIDDEN_ON_EMBEDDED, (
            f"{name} sent {sorted(sent & FORBIDDEN_ON_EMBEDDED)}"
        )
        # Both recorders saw the same commands: the packer hook, which is all that the real
        # backends are checked with, misses nothing the server receives.
        assert set(recorder.packed) == set(recorder.received)


# -- the whole workload on the embedded default ---------------------------------------------


def test_embedded_workload_sends_no_command_fakeredis_lacks(tmp_path, monkeypatch, recorder):
    """Every case, one after the other, on the client ``schedcache.connect()`` makes with no
    URL (the embedded default) and ``Cache``'s default settings; every command the server
    received is recorded."""
    monkeypatch.delenv(ENV_URL, raising=False)
    client = connect()
    assert type(client).__name__ == "FakeRedis"
    received: dict[str, set[str]] = {}
    for name in sorted(CASES):
        recorder.clear()
        # Cache's own defaults (ttl 30 s, lease 15 s, wait_replicas 0), named "parity"
        # because the cases check the replica written into events.
        directory = tmp_path / name.replace(" ", "_")
        directory.mkdir()
        context = Ctx("fakeredis", client, EMBEDDED, directory, defaults={"replica": "parity"})
        try:
            CASES[name](context)
        finally:
            context.cleanup()
        received[name] = set(recorder.received)
    everything = set().union(*received.values())
    offenders = {name: sorted(cmds & FORBIDDEN_ON_EMBEDDED) for name, cmds in received.items()}
    assert not {name: cmds for name, cmds in offenders.items() if cmds}
    # The recording really saw single calls, pipelines (MULTI/EXEC of the lease), batches
    # (FCALL sc_batch on a raw connection), reads and the library load.
    assert {"FCALL", "FCALL_RO", "MULTI", "EXEC", "FUNCTION", "XRANGE", "SCAN"} <= everything


# -- WAIT -----------------------------------------------------------------------------------


def test_wait_replicas_on_a_server_without_replicas(recorder):
    """Real Redis (no replicas): ``wait_replicas=0`` sends no WAIT; ``wait_replicas=1`` sends
    one after every write, which is applied and then raises ``NotReplicated`` carrying its
    reply (single calls) or makes the batch raise ``BatchFailed`` naming it."""
    client = real_client()
    assert client.info("replication")["connected_slaves"] == 0
    plain = Cache(client, f"t-{uuid.uuid4().hex[:12]}")  # every default: wait_replicas=0
    waiting = Cache(client, plain.name, wait_replicas=1, wait_timeout=0.05)
    try:
        recorder.clear()
        plain.add_node(make_node("n1"))
        assert "WAIT" not in recorder.sent() and "FCALL" in recorder.sent()
        recorder.clear()
        started = time.monotonic()
        with pytest.raises(NotReplicated, match="only 0 of 1 replicas confirmed it") as error:
            waiting.add_node(make_node("n2"))
        assert time.monotonic() - started < 2.0
        assert recorder.packed.count("WAIT") == 1
        assert error.value.reply == 2 and plain.node_count() == 2  # applied all the same
        batch = waiting.batch().add_node(make_node("n3"))
        with pytest.raises(BatchFailed, match="only 0 of 1") as failed:
            batch.execute()
        assert [r.ok for r in failed.value.results] == [True] and plain.node_count() == 3
        assert isinstance(failed.value.failures[0][1], NotReplicated)
        # Reads never wait.
        recorder.clear()
        assert waiting.get_node_info("n3").name == "n3" and "WAIT" not in recorder.sent()
        # The expiry worker carries on after NotReplicated (the round was applied).
        assert ExpiryWorker(waiting).run_once() == []
    finally:
        plain.clear()
        client.close()


def test_wait_replicas_on_the_cluster(redis_cluster, recorder):
    """On the Cluster (one replica per primary) the same write is confirmed."""
    client = connect(redis_cluster.url)
    cache = Cache(client, f"t-{uuid.uuid4().hex[:12]}", wait_replicas=1, wait_timeout=2.0)
    try:
        recorder.clear()
        cache.add_node(make_node("n1"))
        with cache.batch() as batch:
            batch.add_node(make_node("n2"))
        assert recorder.packed.count("WAIT") == 2 and cache.node_count() == 2
    finally:
        cache.clear()
        client.close()


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_wait_replicas_through_the_async_api(where, request, recorder):
    """AsyncCache with ``wait_replicas=1``: WAIT on the write's own connection after every
    single command and every batch group; on the Cluster (one replica per primary) confirmed,
    on the real Redis without replicas applied and then ``NotReplicated``."""
    url = request.getfixturevalue("redis_cluster").url if where == "cluster" else REAL_REDIS_URL
    name = f"t-{uuid.uuid4().hex[:12]}"
    sync_client = connect(url)
    plain = Cache(sync_client, name)

    async def main() -> None:
        client = await connect_async(url)
        cache = await AsyncCache.open(client, name, wait_replicas=1, wait_timeout=0.5)
        recorder.clear()
        if where == "cluster":
            await cache.add_node(make_node("n1"))
            async with cache.batch() as batch:
                batch.add_node(make_node("n2"))
        else:
            with pytest.raises(NotReplicated, match="only 0 of 1 replicas") as error:
                await cache.add_node(make_node("n1"))
            assert error.value.reply == 1
            with pytest.raises(BatchFailed, match="only 0 of 1"):
                await cache.batch().add_node(make_node("n2")).execute()
        assert recorder.packed.count("WAIT") == 2 and plain.node_count() == 2
        await cache.aclose()
        await client.aclose()

    try:
        asyncio.run(main())
    finally:
        plain.clear()
        sync_client.close()


def test_wait_replicas_on_fakeredis_is_refused_when_the_cache_is_made(recorder):
    """fakeredis has no replicas and no WAIT: asking for them is a clear error up front, not a
    write applied and then reported as failed."""
    client = connect()
    before = keyspace(client, "*")
    with pytest.raises(ValidationError, match="wait_replicas: the embedded fakeredis has no"):
        Cache(client, "t-wait", wait_replicas=1)
    assert "WAIT" not in recorder.received
    assert keyspace(client, "*") == before


@pytest.mark.parametrize("timeout", [0, 0.0004])
def test_wait_timeout_that_rounds_to_zero_is_refused(backend, client, timeout):
    """``WAIT n 0`` blocks for ever: a wait_timeout under a millisecond is refused."""
    with pytest.raises(ValidationError, match=r"wait_timeout: .* must be at least 0.001 s"):
        Cache(client, "t-wait0", wait_replicas=1, wait_timeout=timeout)
