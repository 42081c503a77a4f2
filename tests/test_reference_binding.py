"""The reference scheduler's binding cycle runs off the scheduling loop (issue 34, item 3): the
next pod is placed and claimed while a Binding is still waiting for the API server, on a
snapshot that counts the first claim; the claims are finished when their Bindings answer. On
every backend; the API server is tests/apiserver.py through the official client."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from schedcache import Cache
from schedcache.cli.app import main
from schedcache.ops.expiry import ExpiryWorker
from schedcache.scheduler import bindings as binding_cycle
from schedcache.scheduler.bindings import PROCESS_GONE, BindingProcess
from schedcache.scheduler.loop import ReferenceScheduler
from schedcache.store.commands import MAX_TTL
from schedcache.store.metrics import COMMANDS
from tests.apiserver import FakeApiServer
from tests.conftest import REAL_REDIS_URL, real_client
from tests.scheduling import eventually, fed_scheduler, node, pending
from tests.test_resilience import cli, component, start, stop


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def test_the_next_pod_is_claimed_while_a_binding_waits(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Before: bind, then finish_binding, then the next pod: one slow Binding held the loop."""
    server.create(node("a", "2"))
    server.create(node("b", "2"))
    release = threading.Event()
    binds: list[str] = []

    def slow_first(scheduler: ReferenceScheduler) -> None:
        bind = scheduler.binder.bind

        def slow(namespace: str, name: str, uid: str, node: str) -> None:
            binds.append(name)
            if name == "first":
                release.wait(30)
            bind(namespace, name, uid, node)

        scheduler.binder.bind = slow  # type: ignore[method-assign]

    try:
        with fed_scheduler(cache, server, tmp_path, prepare=slow_first) as scheduler:
            server.create(pending("first", "1500m"))
            eventually(lambda: binds == ["first"])
            server.create(pending("second", "1500m"))
            # Claimed and handed to the pool while the first Binding still waits; the
            # snapshot counted the first claim: the second pod went to the other node.
            eventually(lambda: scheduler.bound == 1, timeout=5)
            assert not release.is_set() and binds == ["first", "second"]
            assert cache.pod_state("uid-first") == "assumed"
            nodes = {cache.get_pod_record(f"uid-{n}").node for n in ("first", "second")}
            assert nodes == {"a", "b"}
            release.set()
            eventually(lambda: scheduler.bound == 2)
            assert {(server.get("Pod", n) or {})["spec"].get("nodeName") for n in binds} == nodes
    finally:
        release.set()


def sent(command: str) -> float:
    """How many ``command`` calls this process's caches sent (the library's own counter)."""
    return COMMANDS.labels(command, "applied")._value.get()  # type: ignore[no-any-return]


def test_a_placed_pod_s_life_sends_no_finish_binding(
    cache: Cache, server: FakeApiServer, tmp_path: Path
) -> None:
    """Issue 40: the claim carries its deadline (one call), and a Binding that answers well
    within it needs no ``finish_binding``: sync's confirmation is the pod's next call."""
    server.create(node("a", "2"))
    server.create(node("b", "2"))
    claims, finishes = sent("timed_claim"), sent("finish_binding")
    with fed_scheduler(cache, server, tmp_path) as scheduler:
        for i in range(4):
            server.create(pending(f"p{i}", "500m"))
        eventually(lambda: all(cache.pod_state(f"uid-p{i}") == "added" for i in range(4)))
        assert scheduler.bound == 4
    assert sent("finish_binding") == finishes
    assert sent("timed_claim") - claims == 4
    pods = [server.get("Pod", f"p{i}") or {} for i in range(4)]
    assert sorted(p["spec"].get("nodeName") for p in pods) == ["a", "a", "b", "b"]


def lost_bindings(
    answered: list[float], after: float = 0.0
) -> Callable[[ReferenceScheduler], None]:
    """A ``prepare`` for ``fed_scheduler``: the scheduler's Bindings are answered (after
    ``after`` seconds, each answer's time appended to ``answered``) and never land."""

    def prepare(scheduler: ReferenceScheduler) -> None:
        def answer(*args: str) -> None:
            time.sleep(after)
            answered.append(time.time())

        scheduler.binder.bind = answer  # type: ignore[method-assign]

    return prepare


def test_an_assumed_pod_whose_binding_never_shows_up_still_expires(
    make_cache: Callable[..., Cache],
    server: FakeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Binding answered but lost (the pod never shows up bound): the claim keeps the room at
    least the cache's ttl after the answer, for sync to confirm it, then the expiry worker
    releases it, with no finish_binding sent. The allowance is cut to 1 s for the test."""
    monkeypatch.setattr(binding_cycle, "BINDING_ALLOWANCE", 1.0)
    cache = make_cache(ttl=2.0, replica="ref")
    server.create(node("a", "2"))
    answered: list[float] = []

    with fed_scheduler(cache, server, tmp_path, prepare=lost_bindings(answered)) as scheduler:
        server.create(pending("ghost", "1500m"))
        eventually(lambda: scheduler.bound == 1)
        record = cache.get_pod_record("uid-ghost")
        assert record.state == "assumed" and record.node == "a"
        assert record.deadline_ms is not None
        assert record.deadline_ms >= answered[0] * 1000 + 2_000 - 50  # the ttl after the answer
    assert (server.get("Pod", "ghost") or {})["spec"].get("nodeName") is None
    worker = ExpiryWorker(cache)
    eventually(lambda: worker.run_once() == ["uid-ghost"], timeout=10)
    assert cache.pod_state("uid-ghost") is None
    assert cache.get_node_info("a").requested.milli_cpu == 0


def test_a_binding_slower_than_its_allowance_sends_finish_binding(
    make_cache: Callable[..., Cache],
    server: FakeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim's deadline would leave less than the ttl after a slow Binding: then, and only
    then, ``finish_binding`` moves it to the ttl from the answer (the allowance cut to 0.2 s;
    the Binding answers after 0.5 s and never lands, so sync leaves the claim as it is)."""
    monkeypatch.setattr(binding_cycle, "BINDING_ALLOWANCE", 0.2)
    cache = make_cache(ttl=30.0, replica="ref")
    server.create(node("a", "2"))
    answered: list[float] = []

    finishes = sent("finish_binding")
    with fed_scheduler(
        cache, server, tmp_path, prepare=lost_bindings(answered, after=0.5)
    ) as scheduler:
        server.create(pending("slow", "500m"))
        eventually(lambda: scheduler.bound == 1)
        assert sent("finish_binding") - finishes == 1
        record = cache.get_pod_record("uid-slow")
        assert record.state == "assumed" and record.deadline_ms is not None
        assert record.deadline_ms >= answered[0] * 1000 + 30_000 - 50


def test_bindings_from_a_process_of_their_own_place_every_pod_once(
    server: FakeApiServer, tmp_path: Path
) -> None:
    """Issue 40: ``BindingProcess`` posts the Bindings and finishes the claims from a process
    of its own. Real Redis only: the process reaches the cache by URL, which fakeredis (one
    process's memory) has none of; Redis Cluster is the store's business, not this one's."""
    client = real_client()
    name = f"t-{uuid.uuid4().hex[:12]}"
    cache = Cache(client, name, replica="ref")
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    server.create(node("a", "2"))
    server.create(node("b", "2"))
    bindings = BindingProcess.from_url(kubeconfig, REAL_REDIS_URL, name, "ref", 4, cache.ttl)
    failed: list[str] = []
    try:
        with fed_scheduler(cache, server, tmp_path, bindings=bindings) as scheduler:
            binding_failed = scheduler._binding_failed
            scheduler._binding_failed = lambda p, why: (  # type: ignore[method-assign]
                failed.append(f"{p.name}: {why}"),
                binding_failed(p, why),
            )
            for i in range(6):
                server.create(pending(f"p{i}", "500m"))
            eventually(lambda: scheduler.bound == 6, timeout=30)
            pods = [server.get("Pod", f"p{i}") or {} for i in range(6)]
            assert sorted(p["spec"].get("nodeName") for p in pods) == ["a"] * 3 + ["b"] * 3
            eventually(lambda: all(cache.pod_state(f"uid-p{i}") == "added" for i in range(6)))
            assert failed == []
        assert not bindings.process.is_alive()  # closed when the loop stopped
    finally:
        bindings.close()
        for key in client.scan_iter(match=f"*{name}*", count=1000):
            client.delete(key)


def test_a_binding_process_that_died_fails_the_bindings_and_the_loop_goes_on(
    server: FakeApiServer, tmp_path: Path
) -> None:
    """A dead binding process answers every Binding as failed: the claim is forgotten and the
    pod given back, instead of the loop raising on the pipe or waiting for ever. Real Redis
    only (see above)."""
    client = real_client()
    name = f"t-{uuid.uuid4().hex[:12]}"
    cache = Cache(client, name, replica="ref")
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    server.create(node("a", "2"))
    bindings = BindingProcess.from_url(kubeconfig, REAL_REDIS_URL, name, "ref", 4, cache.ttl)
    bindings.process.kill()
    bindings.process.join(10)
    failed: list[str] = []
    try:
        with fed_scheduler(cache, server, tmp_path, bindings=bindings) as scheduler:
            binding_failed = scheduler._binding_failed
            scheduler._binding_failed = lambda p, why: (  # type: ignore[method-assign]
                failed.append(f"{p.name}: {why}"),
                binding_failed(p, why),
            )
            server.create(pending("p0", "500m"))
            server.create(pending("p1", "500m"))
            eventually(lambda: {f.split(":")[0] for f in failed} == {"p0", "p1"}, timeout=30)
            assert all(f.endswith(PROCESS_GONE) for f in failed)
            assert not scheduler.stop.is_set() and scheduler.bound == 0
            eventually(lambda: "assumed" not in {cache.pod_state(f"uid-p{i}") for i in range(2)})
            assert (server.get("Pod", "p0") or {})["spec"].get("nodeName") is None
    finally:
        bindings.close()
        for key in client.scan_iter(match=f"*{name}*", count=1000):
            client.delete(key)


def test_a_ttl_too_long_for_a_deadline_claims_without_one() -> None:
    """60 s plus a ttl past ``MAX_TTL`` would refuse every claim (no pod ever placed): such a
    ttl claims as ``ttl=0`` does, without a deadline, ``finish_binding`` after each Binding."""
    allowance = binding_cycle.BINDING_ALLOWANCE
    assert binding_cycle.claim_deadline(30.0) == allowance + 30.0
    assert binding_cycle.claim_deadline(MAX_TTL - allowance) == MAX_TTL
    assert binding_cycle.claim_deadline(MAX_TTL) is None
    assert binding_cycle.claim_deadline(0.0) is None


def spawned_children(pid: int) -> list[str]:
    """The command lines of ``pid``'s child processes that multiprocessing spawned."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                line = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:  # it ended meanwhile
                continue
            if b"multiprocessing" in line:
                found.append(line.decode(errors="replace"))
    return found


def test_the_scheduler_command_posts_bindings_from_a_process_of_its_own(
    server: FakeApiServer, tmp_path: Path
) -> None:
    """``schedcache scheduler --binding-process``: the replica binds every pod, its Bindings
    posted by a spawned process made with the command's own settings, which ends with the
    command. Real Redis only: the processes share the cache through a server (the CLI refuses
    the embedded backend for the scheduler)."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    server.create(node("a", "2"))
    server.create(node("b", "2"))
    sync = start(cli(REAL_REDIS_URL, name, *component("sync", server, tmp_path, "sync-1")))
    command = [*component("scheduler", server, tmp_path, "ref-1"), "--binding-process"]
    scheduler = start(cli(REAL_REDIS_URL, name, *command))
    try:
        for i in range(6):
            server.create(pending(f"p{i}", "500m"))
        bound = lambda: [  # noqa: E731
            (server.get("Pod", f"p{i}") or {})["spec"].get("nodeName") for i in range(6)
        ]
        eventually(lambda: all(bound()), timeout=60)
        assert sorted(bound()) == ["a"] * 3 + ["b"] * 3
        assert scheduler.poll() is None, scheduler.err()
        assert spawned_children(scheduler.pid), "no binding process"
        took, err = stop(scheduler)
        assert scheduler.returncode == 0 and took < 15, err
        assert "6 bound" in err
    finally:
        for process in (scheduler, sync):
            if process.poll() is None:
                process.kill()
                process.wait(10)
        client = real_client()
        for key in client.scan_iter(match=f"*{name}*", count=1000):
            client.delete(key)


def test_the_binding_process_is_refused_on_the_embedded_backend(tmp_path: Path) -> None:
    """``--embedded --binding-process``: the binding process would open an embedded Redis of
    its own (its finish_binding calls lost to another store): a usage error, exit 2, nothing
    started."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    result = CliRunner().invoke(
        main,
        ["--embedded", "scheduler", "--scheduler-name", "ref", "--kubeconfig", str(kubeconfig),
         "--binding-process"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--binding-process needs --redis" in result.output
