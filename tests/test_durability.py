"""Restarts: what survives when the Redis server holding a cache dies or is stopped.

* ``appendfsync always`` + SIGKILL: every acknowledged command survives.
* ``appendfsync everysec`` + SIGKILL under load: Redis writes the AOF before it replies and
  fsyncs once a second, so a SIGKILL (the kernel keeps the written pages) usually loses
  nothing, but only a power loss-free second is promised: the test asserts what is guaranteed
  (the state is a consistent prefix: ``verify()`` is clean, what was lost is the last
  acknowledgements, nothing is stored that was not sent, nothing is applied twice) and
  measures the loss instead of asserting it is zero.
* ``appendfsync everysec`` + SIGTERM under load: shutdown fsyncs, so nothing acknowledged is
  lost.

In every case the library comes back with the AOF (functions are persisted), and clients and
the expiry worker carry on without manual action. Each test starts its own redis-server
(``tests/servers.py``); real Redis only, so no ``backend`` fixture: fakeredis has no process
to kill.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from schedcache import Cache
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store.library import library_name
from schedcache.store.retry import RetryPolicy
from tests.factories import make_node, make_pod
from tests.load import Load, add_nodes, applied_twice
from tests.servers import Server, free_port, wait_until

# Long enough for a restart: the server is down, then loads its AOF.
RESTART_RETRY = RetryPolicy(attempts=200, within=30.0, max_delay=0.2)


def durable_server(directory: Path, fsync: str, port: int | None = None) -> Server:
    return Server(
        port or free_port(), directory, ["--appendonly", "yes", "--appendfsync", fsync]
    ).start()


def test_acknowledged_commands_survive_sigkill_with_appendfsync_always(tmp_path: Path) -> None:
    server = durable_server(tmp_path, "always")
    try:
        cache = Cache(server.client(), "durable", ttl=0, replica="r")
        cache.add_node(make_node("n1", "64", "64Gi"))
        acknowledged = []
        for i in range(300):
            pod = make_pod(f"p{i}", "n1", "10m", "1Mi")
            cache.add_pod(pod)
            acknowledged.append(pod.uid)
        with cache.batch() as batch:
            for i in range(300, 600):
                batch.add_pod(make_pod(f"p{i}", "n1", "10m", "1Mi"))
        acknowledged += [f"p{i}" for i in range(300, 600)]
        server.kill(signal.SIGKILL)

        server.start()
        client = server.client()
        assert client.function_list(library=library_name()), "functions are persisted in the AOF"
        cache = Cache(client, "durable", ttl=0, replica="r")
        assert {p.uid for p in cache.list_pods()} == set(acknowledged)
        assert cache.verify() == []
        cache.add_pod(make_pod("after", "n1", "10m", "1Mi"))  # and it carries on
        assert cache.pod_count() == 601
    finally:
        server.kill()


def test_a_client_carries_on_across_a_restart_without_manual_action(tmp_path: Path) -> None:
    server = durable_server(tmp_path, "always")
    try:
        cache = Cache(server.client(), "durable", ttl=0, replica="r")
        cache.add_node(make_node("n1"))
        server.kill(signal.SIGKILL)
        server.start()
        cache.add_pod(make_pod("a", "n1", "10m", "1Mi"))  # the same client object, reconnected
        assert cache.pod_count() == 1 and cache.verify() == []
    finally:
        server.kill()


@dataclass
class Restart:
    """What a restart under load left: acknowledged commands lost, and how long it took."""

    lost: list[str]
    acknowledged: int
    recovery: float


@contextmanager
def restart_under_load(
    directory: Path, fsync: str, sig: int, before: int = 500, after: int = 200
) -> Iterator[tuple[Restart, Load, Cache]]:
    """Load a server (``before`` pods acknowledged), stop it with ``sig`` and start it again on
    the same port and AOF while the load and an expiry worker keep running (until ``after``
    more); checks that both carry on by themselves."""
    server = durable_server(directory, fsync)
    try:
        client = redis.Redis(port=server.port, socket_timeout=5, socket_connect_timeout=1)
        cache = Cache(client, "durable", ttl=2, replica="r", retry=RESTART_RETRY)
        add_nodes(cache)
        expiring = make_pod("expiring", "n0", "1m", "1Ki")
        cache.assume_pod(expiring)
        cache.finish_binding(expiring)  # expires 2 s later: around the restart
        time.sleep(1.1)  # everysec: the nodes are on disk before the load starts
        worker = ExpiryWorker(cache, interval=0.1, max_backoff=0.5)
        rounds: list[float] = []
        worker_thread = threading.Thread(
            target=worker.run, args=(lambda _: rounds.append(time.monotonic()),), daemon=True
        )
        worker_thread.start()
        with Load(cache) as load:
            load.wait_for(before)
            server.kill(sig)  # returns once the process is gone
            stopped_at = time.monotonic()
            acknowledged = load.acknowledged_before(stopped_at)
            server.start()
            restarted_at = time.monotonic()
            load.wait_for(after)
        wait_until(lambda: rounds[-1] > restarted_at, 10, "an expiry round after the restart")
        # Due 2 s after finish_binding: usually after the restart, then expired by the worker.
        wait_until(lambda: cache.pod_state("expiring") is None, 10, "the worker expires it")
        worker.stop()
        worker_thread.join(timeout=10)
        assert not worker_thread.is_alive()
        assert client.function_list(library=library_name()), "functions are persisted in the AOF"
        stored = {pod.uid for pod in cache.list_pods()}
        lost = [uid for uid in acknowledged if uid not in stored]
        yield Restart(lost, len(acknowledged), load.recovery_after(stopped_at)), load, cache
    finally:
        server.kill()


def assert_consistent(load: Load, cache: Cache, lost: list[str]) -> None:
    """What any restart must leave: a clean cache holding only pods that were sent, each once,
    and a loss (if any) made of the last acknowledgements, as an AOF prefix would."""
    assert load.failed == [], "callers saw no error: the retry policy covers the restart"
    assert cache.verify() == []
    stored = {pod.uid for pod in cache.list_pods()}
    assert stored <= set(load.attempted), "only pods that were sent"
    assert applied_twice(cache) == []
    if lost:
        first = load.acknowledged.index(lost[0])
        assert set(load.acknowledged[first:]) - stored == set(lost), "a prefix survived"


def test_sigkill_with_appendfsync_everysec_leaves_a_consistent_prefix(tmp_path: Path) -> None:
    with restart_under_load(tmp_path, "everysec", signal.SIGKILL) as (restart, load, cache):
        assert_consistent(load, cache, restart.lost)
    # At most the writes of the last fsync period or two (Redis may postpone a write for
    # 2 s while an fsync is slow), usually none: the kernel keeps what Redis wrote.
    last = load.ack_times[restart.acknowledged - 1]
    recent = [t for t in load.ack_times[: restart.acknowledged] if t > last - 2.5]
    assert len(restart.lost) <= len(recent), f"lost {len(restart.lost)}"
    print(f"everysec + SIGKILL: lost {len(restart.lost)} of {restart.acknowledged} acknowledged")


def test_sigterm_with_appendfsync_everysec_loses_nothing(tmp_path: Path) -> None:
    with restart_under_load(tmp_path, "everysec", signal.SIGTERM) as (restart, load, cache):
        assert restart.lost == [], "a graceful shutdown fsyncs the AOF"
        assert_consistent(load, cache, restart.lost)
