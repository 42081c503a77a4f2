"""Single commands run on one connection per thread (schedcache/store/pinned.py): threads that
end give it back, a forked child never writes on its parent's socket, a broken call never
leaves a reply behind for the next one."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
import redis

from schedcache import Cache
from schedcache.store import pinned
from schedcache.store.connection import connect
from schedcache.store.retry import RetryPolicy
from tests.conftest import backend_url
from tests.factories import make_node, make_pod

LIMIT = 3


@pytest.fixture
def bounded(client: redis.Redis, backend: str, request: pytest.FixtureRequest) -> Iterator[Cache]:
    """A cache whose client may open at most LIMIT connections (per server)."""
    if backend == "cluster":
        small = connect(backend_url(backend, request), max_connections=LIMIT)
    else:
        pool = client.connection_pool
        bounded_pool = type(pool)(
            connection_class=pool.connection_class,
            max_connections=LIMIT,
            **pool.connection_kwargs,
        )
        small = type(client)(connection_pool=bounded_pool)
    cache = Cache(
        small,
        f"pinned-{os.getpid()}-{backend}",
        ttl=30.0,
        replica="pin",
        retry=RetryPolicy(attempts=2, within=1.0),
    )
    cache.clear()
    cache.add_node(make_node("n1", "64", "64Gi"))
    yield cache
    cache.clear()
    small.close()


def test_threads_that_end_give_their_connection_back(bounded: Cache):
    failures: list[BaseException] = []

    def one_command(i: int) -> None:
        try:
            bounded.add_pod(make_pod(f"p{i}", "n1", "10m", "1Mi"))
        except BaseException as error:
            failures.append(error)

    for i in range(4 * LIMIT):  # a thread per request, as an HTTP server runs them
        thread = threading.Thread(target=one_command, args=(i,))
        thread.start()
        thread.join()
    assert failures == []
    assert bounded.pod_count() == 4 * LIMIT


def test_threads_at_once_each_use_their_own_connection(bounded: Cache):
    barrier = threading.Barrier(LIMIT - 1)
    failures: list[BaseException] = []

    def commands(t: int) -> None:
        try:
            barrier.wait()
            for i in range(20):
                bounded.add_pod(make_pod(f"t{t}-{i}", "n1", "10m", "1Mi"))
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=commands, args=(t,)) for t in range(LIMIT - 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert bounded.pod_count() == 20 * (LIMIT - 1)
    assert bounded.verify() == []


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
