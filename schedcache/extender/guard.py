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

With TLS the site listens in plain TCP and each admitted connection does its handshake under
the guard (``loop.start_tls``), so a handshake counts against ``max_connections`` from its
first byte and the header timeout runs from the connection, not from the handshake's end:
asyncio's own TLS server hands a connection over only once its handshake is done, so
connections that never send a ClientHello were bounded by nothing, at ~300 KiB of buffers
each (4,000 of them took the process from 68 to 1,266 MiB). A handshake that fails is counted
and logged by :class:`~schedcache.extender.tls.Refusals`.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import ssl
from collections import OrderedDict
from typing import Any, cast

from aiohttp import web
from prometheus_client import Counter, Gauge

from schedcache.extender.tls import Refusals
from schedcache.extender.trim import Trimmer

CONNECTIONS = Gauge("schedcache_extender_connections", "Open connections to the extender.")
CUT = Counter(
    "schedcache_extender_connections_cut_total",
    "Connections the extender closed: evicted (the oldest without a request but for the "
    "quarter that asked last, for a new one at --max-connections), over_limit (every "
    "connection busy), header_timeout (no complete request within --read-timeout).",
    ["reason"],
)


class Guard:
    """The open connections (handshakes included), and whether a request is being served on
    each; ``ssl_context``: every connection does its TLS handshake under the guard."""

    def __init__(
        self,
        max_connections: int,
        header_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.ssl_context = ssl_context
        self.refusals = refusals or Refusals()
        self.open: dict[Any, GuardedProtocol] = {}  # aiohttp's handler -> its guard
        # Handlers by when their last request ended, the latest last (make_room keeps these).
        self.recent: OrderedDict[Any, None] = OrderedDict()
        self.kept = max(1, max_connections // 4)
        self.trimmer = Trimmer(lambda: len(self.open))

    def request_started(self, handler: Any) -> None:
        guarded = self.open.get(handler)
        if guarded is not None:
            guarded.busy = True
            guarded.disarm()

    def request_finished(self, handler: Any) -> None:
        guarded = self.open.get(handler)
        if guarded is not None:
            guarded.busy = False
            self.recent[handler] = None
            self.recent.move_to_end(handler)
            guarded.arm()

    def closed(self, handler: Any) -> None:
        """``handler``'s connection is gone (closed, cut or evicted)."""
        self.open.pop(handler, None)
        self.recent.pop(handler, None)

    def make_room(self) -> bool:
        """At the limit, close the oldest connection without a request, passing over the
        ``kept`` (a quarter of the limit) whose last request ended most recently; False if
        all are serving one. A kept-alive client that keeps asking (kube-scheduler's) outlives
        a burst of new connections, even of ones their clients closed already, which on
        asyncio's loop count as open until their end is read; connections that asked once
        and idle (an attacker's) are still evicted oldest first, before a newcomer (both
        found in review)."""
        if len(self.open) < self.max_connections:
            return True
        kept = set(itertools.islice(reversed(self.recent), self.kept))
        fallback = None
        for handler, guarded in self.open.items():  # oldest first
            if guarded.busy:
                continue
            if handler not in kept:
                break
            if fallback is None:
                fallback = handler, guarded
        else:
            if fallback is None:
                return False
            handler, guarded = fallback
        self.closed(handler)
        CUT.labels("evicted").inc()
        guarded.cut()
        return True


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the limit and the header timeout."""

    def __init__(self, inner: Any, guard: Guard) -> None:
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.admitted = False
        self.busy = False  # a request is being served
        self.cut_by_guard = False  # evicted or timed out: not a TLS refusal
        self.handed_over = False  # aiohttp has the connection (after the handshake, with TLS)
        self.handshake: asyncio.Task[None] | None = None
        # Decrypted bytes asyncio delivers as the handshake ends, before start_tls returns.
        self.early: list[bytes] = []
        self.early_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream's transport (uvloop's are not asyncio.Transport's subclasses: no isinstance)
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        if not self.guard.make_room():
            CUT.labels("over_limit").inc()
            transport.abort()
            return
        self.admitted = True
        self.guard.open[self.inner] = self
        self.guard.trimmer.opened()
        CONNECTIONS.inc()
        self.arm()  # from the first byte: the handshake, then the request's headers
        if self.guard.ssl_context is None:
            self._hand_over(transport)
        else:
            self.handshake = asyncio.ensure_future(self._start_tls(transport))

    async def _start_tls(self, raw: asyncio.Transport) -> None:
        """The TLS handshake of an admitted connection; aiohttp gets the connection once it
        is done. A failed one is counted and logged (:class:`Refusals`), never raised."""
        context = self.guard.ssl_context
        assert context is not None
        if not self.admitted or raw.is_closing():
            # Cut before its handshake began (many connections accepted in one loop turn):
            # a handshake started on a closed transport would keep its buffers until its own
            # timer fired.
            self._release(None)
            return
        peer = raw.get_extra_info("peername")
        loop = asyncio.get_running_loop()
        try:
            wrapped = await loop.start_tls(
                raw,
                self,
                context,
                server_side=True,
                # The guard's own timer decides (_timed_out); asyncio's is a backstop.
                ssl_handshake_timeout=self.guard.header_timeout + 1,
            )
        except Exception as error:  # ssl.SSLError, a reset, the backstop's timeout
            if not self.cut_by_guard:
                self.guard.refusals.refused(error, peer)
            raw.abort()
            self._release(error)
            _drop_traceback(error)
            return
        if wrapped is None or not self.admitted:
            raw.abort()  # cut during its handshake
            self._release(None)
            return
        self._hand_over(wrapped)

    def _hand_over(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.handed_over = True
        self.inner.connection_made(transport)
        early, self.early = self.early, []
        for data in early:
            self.inner.data_received(data)
        if self.early_eof and self.inner.eof_received() is not True:
            transport.close()

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
            if self.handshake is not None and not self.handed_over:  # a TLS client too slow
                peer = self.transport.get_extra_info("peername")
                self.guard.refusals.refused(TimeoutError("no handshake in time"), peer)
            self.cut()

    def cut(self) -> None:
        self.disarm()
        self.cut_by_guard = True
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.handed_over:
            self.inner.data_received(data)
        elif self.admitted:
            self.early.append(data)  # at most one TLS read (256 KiB) before the hand-over

    def eof_received(self) -> bool | None:
        if self.handed_over:
            keep: bool | None = self.inner.eof_received()
            return keep
        self.early_eof = self.admitted
        return True  # keep it open until the hand-over answers

    def connection_lost(self, exc: Exception | None) -> None:
        self._release(exc)

    def _release(self, exc: Exception | None) -> None:
        """The connection is gone (closed, cut, or its handshake failed): once only."""
        self.disarm()
        if self.admitted:
            self.admitted = False
            self.guard.closed(self.inner)
            CONNECTIONS.dec()
            if self.handed_over:
                self.inner.connection_lost(exc)
            self.guard.trimmer.closed()

    def pause_writing(self) -> None:
        if self.handed_over and self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.handed_over and self.admitted:
            self.inner.resume_writing()


def _drop_traceback(error: BaseException | None) -> None:
    """Break the cycle a failed handshake leaves (its exception's traceback holds start_tls's
    frame, whose future holds the exception), so that the connection's TLS protocol and its
    256 KiB buffer go at once, not at the next full collection: a flood of refused handshakes
    otherwise kept them all (tests/test_extender_tls_flood.py)."""
    seen = 0
    while error is not None and seen < 8:  # the exception and what it was raised from
        error.__traceback__ = None
        error = error.__context__ or error.__cause__
        seen += 1


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

        def protocol() -> GuardedProtocol:
            return GuardedProtocol(server(), guard)

        loop = asyncio.get_running_loop()
        # Plain TCP: with TLS, each admitted connection's handshake runs under the guard
        # (GuardedProtocol._start_tls), counted against the connection limit.
        guard.ssl_context = self._ssl_context
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
