"""Review of af3ef15 and c383505: the guard's eviction order (af3ef15 evicted connections that
never completed a request first; now the quarter of the limit that asked last is kept), the
extender's ``client_gone`` answer, and ``start()`` refusing TLS on
uvloop's loop."""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
import redis
import uvloop
from redis.backoff import NoBackoff
from redis.retry import Retry

from schedcache import Cache
from schedcache.extender.guard import CUT, bind_socket
from schedcache.extender.limits import Limits
from schedcache.extender.server import REQUESTS, start
from schedcache.extender.service import Extender
from schedcache.store.connection import embedded_client
from schedcache.store.retry import RetryPolicy
from tests.conftest import REAL_REDIS_URL, real_client
from tests.extender_server import LOOPS, RunningExtender
from tests.factories import make_node
from tests.tcp_proxy import FaultyProxy
from tests.test_extender_attacks import NS, pending


@pytest.fixture
def embedded() -> Cache:
    """A cache on fakeredis, for the guard's tests (no Redis command is under test there)."""
    return Cache(embedded_client(), f"t-{uuid.uuid4().hex[:12]}")


def count(verb: str, result: str) -> float:
    return float(REQUESTS.labels(verb, result)._value.get())


def cut(reason: str) -> float:
    return float(CUT.labels(reason)._value.get())


def healthz(connection: http.client.HTTPConnection) -> tuple[int, bytes]:
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    return response.status, response.read()


def served_connections(port: int, n: int) -> list[http.client.HTTPConnection]:
    """``n`` kept-alive connections, each with one cheap request completed (``served``)."""
    held = []
    for _ in range(n):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        assert healthz(connection) == (200, b"ok\n")
        held.append(connection)
    return held


def filter_body() -> dict[str, Any]:
    return {"Pod": pending("web"), "NodeNames": ["n1"]}


# -- 1. the eviction order --------------------------------------------------------------------


@pytest.mark.parametrize("loop", LOOPS)
def test_served_idle_connections_do_not_shield_themselves_from_a_new_probe(
    embedded: Cache, loop: str
) -> None:
    """Found in review (mended): with connections that never completed a request evicted
    first (af3ef15), an attacker's connections that asked once and idle shielded themselves:
    its next connect evicted a newcomer (a probe) before its request was read, 0 of 3
    answered. Now only the quarter of the limit that asked last is passed over."""
    limits = Limits(max_connections=16, header_timeout=30)
    with RunningExtender(Extender(embedded), limits=limits, loop_factory=LOOPS[loop]) as server:
        held = served_connections(server.port, 15)  # the attacker's, kept alive
        answers = []
        for _ in range(3):
            # The loop stalls a moment (a collection, a slow callback) while a probe connects
            # and sends its request, and the attacker connects once more.
            server.loop.call_soon_threadsafe(time.sleep, 0.2)
            time.sleep(0.02)
            probe = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            try:
                answers.append(probe.recv(1000).split(b"\r\n", 1)[0])
            except OSError as error:
                answers.append(repr(error).encode())
            probe.close()
            extra.close()
            for i, connection in enumerate(held):  # the attacker keeps its set served
                try:
                    healthz(connection)
                except (OSError, http.client.HTTPException):
                    connection.close()
                    held[i] = served_connections(server.port, 1)[0]
        for connection in held:
            connection.close()
    assert answers == [b"HTTP/1.1 200 OK"] * 3


@pytest.mark.parametrize("loop", LOOPS)
def test_a_served_idle_connection_is_still_cut_by_the_header_timeout(
    embedded: Cache, loop: str
) -> None:
    limits = Limits(header_timeout=0.5)
    before = cut("header_timeout")
    with RunningExtender(Extender(embedded), limits=limits, loop_factory=LOOPS[loop]) as server:
        idle, busy = served_connections(server.port, 2)
        for _ in range(4):  # requests every 0.3 s: its timer starts again after each
            time.sleep(0.3)
            assert healthz(busy) == (200, b"ok\n")
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            healthz(idle)  # idle 1.2 s since its response
        idle.close()
        busy.close()
    assert cut("header_timeout") - before >= 1


@pytest.mark.parametrize("loop", LOOPS)
def test_when_every_idle_connection_is_served_a_new_one_evicts_the_oldest(
    embedded: Cache, loop: str
) -> None:
    limits = Limits(max_connections=4, header_timeout=30)
    before = cut("evicted")
    with RunningExtender(Extender(embedded), limits=limits, loop_factory=LOOPS[loop]) as server:
        held = served_connections(server.port, 4)
        newcomer = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        assert healthz(newcomer) == (200, b"ok\n")
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            healthz(held[0])
        assert [healthz(connection) for connection in held[1:]] == [(200, b"ok\n")] * 3
        for connection in [newcomer, *held]:
            connection.close()
    assert cut("evicted") - before == 1


# -- 2. client_gone -------------------------------------------------------------------------


def test_a_connection_reset_raised_by_the_verb_is_internal_not_client_gone(
    cache: Cache, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A ConnectionResetError from the verb (its threads) is no client gone: the verb's own
    ``except Exception`` answers 500 with Error, counted internal, logged."""
    cache.add_node(make_node("n1", "64", "64Gi"))
    extender = Extender(cache)

    def reset(_: Any) -> Any:
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(extender, "filter_answer", reset)
    gone, internal = count("filter", "client_gone"), count("filter", "internal")
    with caplog.at_level(logging.ERROR), RunningExtender(extender) as server:
        status, answer = server.post("filter", filter_body())
    assert status == 500
    assert answer["Error"] == "filter: internal error (logged by the extender)"
    assert count("filter", "client_gone") == gone
    assert count("filter", "internal") - internal == 1
    assert any(record.exc_info for record in caplog.records)


class ResettingBinder:
    """An API server whose connection resets during the Binding POST; the pod reads as
    pending (not bound) before and after."""

    def __init__(self) -> None:
        self.binds = 0

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        return pending(name)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.binds += 1
        raise ConnectionResetError(104, "Connection reset by peer")


def test_an_api_server_reset_during_the_binding_is_a_bind_result_with_error(cache: Cache) -> None:
    cache.add_node(make_node("n1", "64", "64Gi"))
    binder = ResettingBinder()
    extender = Extender(cache, binder=binder)
    gone, refused = count("bind", "client_gone"), count("bind", "refused")
    with RunningExtender(extender) as server:
        body = {"PodName": "web", "PodNamespace": NS, "PodUID": "uid-web", "Node": "n1"}
        status, answer = server.post("bind", body)
    assert binder.binds == 1
    assert status == 200
    assert answer["Error"] == (
        f"binding pod {NS}/web: the API server did not answer (ConnectionResetError)"
    )
    assert count("bind", "client_gone") == gone
    assert count("bind", "refused") - refused == 1


def test_redis_resetting_its_connections_is_redis_unavailable_not_client_gone() -> None:
    """Real Redis behind a proxy that cuts every connection: 503 redis_unavailable."""
    port = int(REAL_REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    real_client().ping()
    proxy = FaultyProxy("127.0.0.1", port)
    client = redis.Redis(
        port=proxy.port, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
    )
    name = f"t-{uuid.uuid4().hex[:12]}"
    retry = RetryPolicy(attempts=3, within=1.0, first_delay=0.001, max_delay=0.01)
    cache = Cache(client, name, retry=retry, lease_ttl=0)
    cache.add_node(make_node("n1", "64", "64Gi"))
    gone, unavailable = count("filter", "client_gone"), count("filter", "redis_unavailable")
    try:
        with RunningExtender(Extender(cache)) as server:
            assert server.post("filter", filter_body())[0] == 200
            proxy.set_down(True)
            status, answer = server.post("filter", filter_body())
            proxy.set_down(False)
    finally:
        Cache(real_client(), name).clear()
    assert status == 503
    assert answer["Error"].startswith("filter: the cache is unreachable")
    assert count("filter", "client_gone") == gone
    assert count("filter", "redis_unavailable") - unavailable == 1


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_gone_amid_its_body_logs_nothing(
    cache: Cache, loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The 499 written to a gone client: counted once, nothing logged (not even a warning),
    and the connection's slot is given back."""
    cache.add_node(make_node("n1", "64", "64Gi"))
    caplog.set_level(logging.DEBUG)
    before = count("filter", "client_gone")
    limits = Limits(filter_concurrency=1, queue_timeout=2)
    with RunningExtender(Extender(cache), limits=limits, loop_factory=LOOPS[loop]) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.3)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # a reset (RST)
        time.sleep(0.3)
        assert count("filter", "client_gone") - before == 1
        assert server.post("filter", filter_body())[0] == 200  # its one slot is free again
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], [r.getMessage() for r in noisy]


# -- 3. TLS on uvloop -----------------------------------------------------------------------


def test_tls_refused_on_uvloop_leaves_the_callers_socket_open_and_nothing_started(
    embedded: Cache,
) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    sock = bind_socket("127.0.0.1", 0)
    threads = threading.active_count()
    loop = uvloop.new_event_loop()
    try:
        with pytest.raises(ValueError) as raised:
            loop.run_until_complete(start(Extender(embedded), sock, ssl_context=context))
        assert "TLS on asyncio's event loop only" in str(raised.value)
        assert "uvloop" in str(raised.value)
        assert sock.fileno() != -1  # the caller's, still open, still listening
        assert threading.active_count() == threads  # no verb threads started
        assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []
    finally:
        loop.close()
    # The same socket then serves plain HTTP on asyncio's loop: nothing else holds it.
    asyncio_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=asyncio_loop.run_forever, daemon=True)
    thread.start()
    extender = Extender(embedded)
    runner = asyncio.run_coroutine_threadsafe(start(extender, sock), asyncio_loop).result(10)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", sock.getsockname()[1], timeout=5)
        assert healthz(connection) == (200, b"ok\n")
        connection.close()
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), asyncio_loop).result(10)
        extender.forgetter.stop()
        asyncio_loop.call_soon_threadsafe(asyncio_loop.stop)
        thread.join(10)
        asyncio_loop.close()
        sock.close()
