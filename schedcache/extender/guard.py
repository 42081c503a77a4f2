"""The connection guard in front of aiohttp: a connection limit and a header read timeout.

aiohttp has neither: a client may open connections until the file descriptors run out, and one
that sends its headers a byte at a time holds its connection for ever. :class:`GuardedSite`
listens on a socket bound beforehand (so the port is taken before anything says where the
extender is) and wraps each connection's protocol. At ``max_connections`` a new connection
evicts the oldest one that has no request in progress (a slow or idle client), so clients that
hold connections open cannot lock out kube-scheduler or the kubelet's probes; only when every
connection is serving a request is the new one closed at once. A connection whose request has
not arrived ``header_timeout`` seconds after it opened, or after its previous response, is
closed. Each is counted. The body's own timeout is the handler's (:mod:`.server`).

With TLS the site listens in plain TCP and each connection's handshake is done by
:mod:`.handshake` (within the header timeout), so a refused client is logged and counted
rather than dropped in silence; the limit applies once the handshake succeeded.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Gauge

from schedcache.extender.handshake import upgrade

CONNECTIONS = Gauge("schedcache_extender_connections", "Open connections to the extender.")
CUT = Counter(
    "schedcache_extender_connections_cut_total",
    "Connections the extender closed: evicted (the oldest without a request, for a new one at "
    "--max-connections), over_limit (every connection busy), header_timeout (no complete "
    "request within --read-timeout).",
    ["reason"],
)


class Guard:
    """The open connections, and whether a request is being served on each."""

    def __init__(self, max_connections: int, header_timeout: float) -> None:
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.open: dict[Any, GuardedProtocol] = {}  # aiohttp's handler -> its guard

    def request_started(self, handler: Any) -> None:
        guarded = self.open.get(handler)
        if guarded is not None:
            guarded.busy = True
            guarded.disarm()

    def request_finished(self, handler: Any) -> None:
        guarded = self.open.get(handler)
        if guarded is not None:
            guarded.busy = False
            guarded.arm()

    def make_room(self) -> bool:
        """At the limit, close the oldest connection without a request; False if all are
        serving one."""
        if len(self.open) < self.max_connections:
            return True
        for handler, guarded in self.open.items():  # oldest first
            if not guarded.busy:
                del self.open[handler]
                CUT.labels("evicted").inc()
                guarded.cut()
                return True
        return False


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the limit and the header timeout."""

    def __init__(self, inner: Any, guard: Guard, tls: ssl.SSLContext | None = None) -> None:
        self.inner = inner
        self.guard = guard
        self.tls = tls  # None: plain; else the handshake comes first (.handshake)
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.handshake: asyncio.Task[None] | None = None
        # What the client sent between its handshake's end and our seeing that end (the
        # handshake's task resumes a loop turn later): handed on at admission.
        self.early: list[bytes] = []
        self.admitted = False
        self.busy = False  # a request is being served

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self.tls is not None:
            transport.pause_reading()  # the ClientHello waits for start_tls
            loop = asyncio.get_running_loop()
            self.handshake = loop.create_task(self._handshake(transport, self.tls))
            return
        self._admit(transport)

    async def _handshake(self, transport: asyncio.Transport, tls: ssl.SSLContext) -> None:
        upgraded = await upgrade(transport, self, tls, self.guard.header_timeout)
        if upgraded is not None:
            self._admit(upgraded)

    def _admit(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        if transport.is_closing():  # gone between its handshake and now
            return
        if not self.guard.make_room():
            CUT.labels("over_limit").inc()
            transport.abort()
            return
        self.admitted = True
        self.guard.open[self.inner] = self
        CONNECTIONS.inc()
        self.inner.connection_made(transport)
        self.arm()
        early, self.early = self.early, []
        for data in early:
            self.inner.data_received(data)

    def arm(self) -> None:
        self.disarm()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.guard.header_timeout, self._timed_out)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timed_out(self) -> None:
        self.timer = None
        if self.transport is not None and not self.transport.is_closing():
            CUT.labels("header_timeout").inc()
            self.cut()

    def cut(self) -> None:
        self.disarm()
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self.inner.data_received(data)
        elif self.handshake is not None and self.transport is None:
            self.early.append(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self.admitted:
            self.admitted = False
            self.guard.open.pop(self.inner, None)
            CONNECTIONS.dec()
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()


class GuardedSite(web.BaseSite):
    """A site on a socket bound beforehand, every connection behind :class:`Guard`."""

    __slots__ = ("_guard", "_sock")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        guard: Guard,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._sock = sock
        self._guard = guard

    @property
    def name(self) -> str:
        host, port = self._sock.getsockname()[:2]
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        guard = self._guard

        tls = self._ssl_context

        def protocol() -> GuardedProtocol:
            return GuardedProtocol(server(), guard, tls)

        loop = asyncio.get_running_loop()
        # Plain TCP even with TLS: each protocol does its handshake (within the header
        # timeout), so a refusal is seen (.handshake).
        self._server = await loop.create_server(protocol, sock=self._sock, backlog=self._backlog)


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound now: a port in use fails here, before any banner."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
