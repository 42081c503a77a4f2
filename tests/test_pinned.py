"""Single commands run on one connection per thread (schedcache/store/pinned.py): threads that
end give it back, a forked child never writes on its parent's socket, a broken call never
leaves a reply behind for the next one."""

from __future__ import annotations

import gc
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from schedcache import Cache, Snapshot
from schedcache.store import pinned
from schedcache.store.connection import connect
from schedcache.store.retry import RetryPolicy
from schedcache.views.snapshot import INLINE_NODES
from tests.conftest import backend_url
from tests.factories import make_node, make_pod

POOL = 8  # connections per server: room for POOL // 4 = 2 pinned ones


def bounded_client(client: redis.Redis, backend: str, request: pytest.FixtureRequest, size: int):
    """A client of this test's backend whose pools hold at most ``size`` connections."""
    if backend == "cluster":
        return connect(backend_url(backend, request), max_connections=size)
    pool = client.connection_pool
    small_pool = type(pool)(
        connection_class=pool.connection_class, max_connections=size, **pool.connection_kwargs
    )
    return type(client)(connection_pool=small_pool)


@pytest.fixture
def make_bounded(
    client: redis.Redis, backend: str, request: pytest.FixtureRequest
) -> Iterator[Callable[[int], Cache]]:
    """``make_bounded(size)``: a cache (with one node, n1) on a client of ``size`` connections
    per server."""
    made: list[tuple[Cache, Any]] = []

    def factory(size: int) -> Cache:
        small = bounded_client(client, backend, request, size)
        cache = Cache(
            small,
            f"pinned-{os.getpid()}-{backend}-{len(made)}",
            ttl=30.0,
            replica="pin",
            retry=RetryPolicy(attempts=2, within=1.0),
        )
        cache.clear()
        cache.add_node(make_node("n1", "64", "64Gi"))
        made.append((cache, small))
        return cache

    yield factory
    for cache, small in made:
        cache.clear()
        small.close()


@pytest.fixture
def bounded(make_bounded: Callable[[int], Cache]) -> Cache:
    return make_bounded(POOL)


def run_in_threads(count: int, at_once: bool, work: Callable[[int], object]) -> list[object]:
    """``work(i)`` on ``count`` threads, all at once or one after the other; their results
    (an exception stands for its thread's)."""
    results: list[object] = [None] * count

    def one(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as error:
            results[i] = error

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
        if not at_once:
            thread.join()
    for thread in threads:
        thread.join()
    return results


def test_threads_that_end_give_their_pinned_connection_back(bounded: Cache):
    pool = bounded.store.server().connection_pool

    def one_command(i: int) -> bool:  # a thread per request, as an HTTP server runs them
        bounded.add_pod(make_pod(f"p{i}", "n1", "10m", "1Mi"))
        return pinned._pin(pool) is not None  # it held one of the POOL // 4 pins

    assert run_in_threads(4 * POOL, False, one_command) == [True] * (4 * POOL)
    assert bounded.pod_count() == 4 * POOL


def test_threads_at_once_each_use_their_own_connection(bounded: Cache):
    def commands(t: int) -> None:
        for i in range(20):
            bounded.add_pod(make_pod(f"t{t}-{i}", "n1", "10m", "1Mi"))

    # The fixture's add_node pinned one connection to this (the main) thread, so POOL - 1
    # threads at once fill the pool exactly: one more would find it empty whenever all are
    # mid-call at the same moment, as redis-py's own pool does (MaxConnectionsError).
    threads = POOL - 1
    assert run_in_threads(threads, True, commands) == [None] * threads
    assert bounded.pod_count() == 20 * threads
    assert bounded.verify() == []


def test_pins_leave_a_small_pool_room_for_everything_else(make_bounded: Callable[[int], Cache]):
    lone = make_bounded(1)  # one connection: nothing may keep it
    lone.add_pod(make_pod("a", "n1", "10m", "1Mi"))
    with lone.batch() as batch:
        batch.add_pod(make_pod("b", "n1", "10m", "1Mi"))
    assert [e.type for e in lone.events()][-2:] == ["PodAdded", "PodAdded"]
    with lone.batch(chunk_size=500) as batch:
        for i in range(INLINE_NODES + 50):  # a snapshot read in chunks, ahead of decoding
            batch.add_node(make_node(f"m{i}", "1", "1Gi"))
    assert lone.update_snapshot(Snapshot()).changed_nodes == INLINE_NODES + 51
    assert lone.verify() == []
    few = make_bounded(4)  # more threads than connections: each call takes one and gives it back
    # All 8 threads live until every one has made its calls (the barrier), so a connection a
    # thread kept would still be kept; the calls themselves take turns (the lock): the pool is
    # never asked for more at once than threads that keep nothing need, however loaded the
    # machine (calls truly at once would meet redis-py's own MaxConnectionsError).
    turns, everyone_done = threading.Lock(), threading.Barrier(8)

    def two_commands(t: int) -> None:
        for i in range(2):
            with turns:
                few.add_pod(make_pod(f"w{t}-{i}", "n1", "10m", "1Mi"))
        everyone_done.wait(60)

    assert run_in_threads(8, True, two_commands) == [None] * 8
    assert few.pod_count() == 16


def test_a_dropped_client_frees_its_pool(
    client: redis.Redis, backend: str, request: pytest.FixtureRequest
):
    small = bounded_client(client, backend, request, POOL)
    cache = Cache(small, f"dropped-{os.getpid()}", ttl=30.0, replica="pin")
    cache.add_node(make_node("n1", "64", "64Gi"))
    cache.add_pod(make_pod("a", "n1", "10m", "1Mi"))
    pool = weakref.ref(cache.store.server().connection_pool)
    assert pinned._pin(pool()) is not None  # type: ignore[arg-type]
    cache.clear()
    small.close()
    del cache, small
    gc.collect()
    assert pool() is None


def test_a_forked_child_takes_a_connection_of_its_own(bounded: Cache):
    bounded.add_pod(make_pod("parent", "n1", "10m", "1Mi"))
    server = bounded.store.server()
    parents = pinned._pin(server.connection_pool).connection
    child = os.fork()
    if child == 0:  # the child: exit status 0 when it did not reuse the parent's connection
        os._exit(0 if pinned._pin(server.connection_pool).connection is not parents else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pinned._pin(server.connection_pool).connection is parents  # the parent's is intact
    bounded.add_pod(make_pod("after", "n1", "10m", "1Mi"))
    assert bounded.pod_count() == 2


def test_a_call_broken_off_leaves_no_reply_for_the_next(bounded: Cache):
    server = bounded.store.server()
    connection = pinned._pin(server.connection_pool).connection

    class Interrupted(BaseException):
        pass

    real_read = connection.read_response

    def interrupted_read(*args: object, **kwargs: object) -> object:
        raise Interrupted  # as a KeyboardInterrupt between the send and the reply

    connection.read_response = interrupted_read  # type: ignore[method-assign]
    try:
        with pytest.raises(Interrupted):
            bounded.add_pod(make_pod("a", "n1", "10m", "1Mi"))
    finally:
        connection.read_response = real_read  # type: ignore[method-assign]
    # The reply of that add_pod is still on its way; the connection was dropped with it, so
    # the next command reads its own reply, not that one.
    bounded.add_pod(make_pod("b", "n1", "10m", "1Mi"))
    assert bounded.pod_state("a") == "added"  # it ran: only its reply was lost
    assert bounded.pod_state("b") == "added"
    with pytest.raises(Exception, match="already added"):
        bounded.add_pod(make_pod("b", "n1", "10m", "1Mi"))


def test_a_connection_closed_under_a_call_is_replaced_at_once(
    bounded: Cache, caplog: pytest.LogCaptureFixture
):
    server = bounded.store.server()
    connection = pinned._pin(server.connection_pool).connection
    real_read = connection.read_response
    broken: list[bool] = []

    def closed_once(*args: object, **kwargs: object) -> object:
        if not broken:  # the command ran; its reply is lost with the connection
            broken.append(True)
            raise redis.ConnectionError("Connection closed by server.")
        return real_read(*args, **kwargs)

    connection.read_response = closed_once  # type: ignore[method-assign]
    try:
        bounded.add_pod(make_pod("a", "n1", "10m", "1Mi"))  # no "already added": once only
    finally:
        connection.read_response = real_read  # type: ignore[method-assign]
    assert broken == [True]
    assert "sending again" not in caplog.text  # sent again at once, not by the retry policy
    assert [e.type for e in bounded.history("a")] == ["PodAdded"]
