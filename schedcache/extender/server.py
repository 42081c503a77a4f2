"""The extender's HTTP server (aiohttp): ``POST {prefix}/filter``, ``/prioritize``, ``/bind``,
``/preempt`` (ProcessPreemption: :mod:`.preempt`; it holds filter's slots),
``GET /healthz`` (liveness), ``GET /readyz`` (Redis answers) and ``GET /metrics``.

Bounded by construction (:class:`~schedcache.extender.limits.Limits`): each verb has its own
threads (:class:`~.lanes.Lane`) and slot count; a request first waits (``queue_timeout``) for a
slot of its verb, only then is its body read (``body_timeout``, at most ``max_body_bytes``) and
decoded, in the verb's threads, never on the event loop; so the bodies held at once are bounded
by the slots, and ``/healthz`` answers from the event loop whatever the workers do. Connections
are limited and cut when their headers do not arrive (:mod:`.guard`).

Every failure is the protocol's answer, the verb's result (ExtenderFilterResult,
ExtenderBindingResult) with ``Error`` set: 400 for malformed input (deeply nested JSON
included), 408 for a body that did not arrive, 413 for one too large, 503 when Redis is
unreachable, the verb's slots stayed full or the extender is stopping (:class:`Draining`);
HTTP 200 for a bind refused or failed and for another cache error (prioritize, whose list has
no ``Error``: 500). Each is counted by reason in ``schedcache_extender_requests_total``; only an
unexpected exception logs a traceback (500).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from redis.exceptions import RedisError

from schedcache.errors import CacheError, RetriesExhausted
from schedcache.extender import preempt, protocol
from schedcache.extender.guard import Guard, GuardedSite
from schedcache.extender.lanes import Lane
from schedcache.extender.limits import Limits
from schedcache.extender.protocol import ProtocolError
from schedcache.extender.service import Extender
from schedcache.extender.stop_signals import SIGNALS, StopSignals

log = logging.getLogger(__name__)

REQUEST_SECONDS = Histogram(
    "schedcache_extender_request_seconds",
    "Time to answer an extender request, by verb.",
    ["verb"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1),
)
REQUESTS = Counter(
    "schedcache_extender_requests_total",
    "Extender requests by verb and result: ok; refused (an answer with Error: fit conflict, "
    "pod not served, Binding failed); bad_request (400), body_timeout (408), too_large (413), "
    "busy (503: the verb's slots stayed full), redis_unavailable (503), cache_error, "
    "shutting_down (503: it waited for a slot or its body when the extender began to stop), "
    "client_gone (the client left before its whole body was read, while it waited for a "
    "slot or sent it: no answer), "
    "internal (500, logged with its traceback).",
    ["verb", "result"],
)

Verb = Callable[[Any], Any]
READY_TIMEOUT = 2.0  # seconds /readyz waits for Redis


class Failure(Exception):
    """An answer other than the verb's own: HTTP status, metric reason, message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def shutting_down(message: str = "the extender is shutting down; try again") -> Failure:
    return Failure(503, "shutting_down", message)


# What aiohttp still waits for, per connection, once Draining.stop returned: answers being
# written. Twice at most (aiohttp 3.14 waits its shutdown timeout twice, see Draining.stop).
DRAINED_TIMEOUT = 1.0


class Draining:
    """The server's stop as its requests see it. Requests that only wait, for their verb's
    slot or for their body, hold nothing a client would lose: from :meth:`stop` on they are
    answered 503 ``shutting_down`` at once (kube-scheduler tries the pod again), and so is
    every request that comes after, where each would have held the stop until its own timeout
    (up to ``--read-timeout`` for each slot in turn: found in review, ten clients stalled
    mid-body kept SIGTERM waiting past the kubelet's 30 s grace). A verb already running (a
    bind waiting on the API server) may finish for ``timeout`` seconds (``--drain-timeout``);
    then it is answered ``shutting_down`` too, its outcome unknown to the client (its thread
    ends on its own; a claim whose Binding did not finish lapses at its deadline)."""

    def __init__(self, timeout: float = Limits.drain_timeout) -> None:
        self.timeout = timeout
        self.stopping = False
        self.waiting: set[asyncio.Task[Any]] = set()
        self.cut: set[asyncio.Task[Any]] = set()
        self.running: set[asyncio.Future[Any]] = set()  # the verbs' jobs (Lane futures)

    async def stop(self, app: web.Application | None = None) -> None:
        """aiohttp's ``on_shutdown``: after the listener closed, before aiohttp waits for the
        connections (``DRAINED_TIMEOUT``: only answers being written are left by then)."""
        self.stopping = True
        self.cut = set(self.waiting)
        for task in self.cut:
            task.cancel()
        if self.running:
            # Bounded here, not by aiohttp's shutdown timeout: aiohttp 3.14 waits that twice
            # for a handler (then cancels its payload, then waits again: found in review, a
            # stuck verb held the stop 2 x --drain-timeout, past the grace period).
            _, late = await asyncio.wait(set(self.running), timeout=self.timeout)
            for future in late:
                future.cancel()

    def wait(self) -> Waiting:
        """``with draining.wait(): await ...``: a wait :meth:`stop` ends with ``shutting_down``."""
        if self.stopping:
            raise shutting_down()
        task = asyncio.current_task()
        assert task is not None  # (a request's handler is a task)
        return Waiting(self, task)


class Waiting:
    """One request's wait (:meth:`Draining.wait`)."""

    __slots__ = ("draining", "task")

    def __init__(self, draining: Draining, task: asyncio.Task[Any]) -> None:
        self.draining = draining
        self.task = task

    def __enter__(self) -> None:
        self.draining.waiting.add(self.task)

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        draining = self.draining
        draining.waiting.discard(self.task)
        # Cancelled by the stop (not by anything else): answered, the cancel taken back.
        cancelled = kind is not None and issubclass(kind, asyncio.CancelledError)
        if cancelled and self.task in draining.cut:
            draining.cut.discard(self.task)
            self.task.uncancel()
            raise shutting_down() from None


def make_app(
    extender: Extender, prefix: str = "", limits: Limits | None = None, guard: Guard | None = None
) -> web.Application:
    """The aiohttp application; ``prefix`` is the KubeSchedulerConfiguration's urlPrefix path
    (``/scheduler`` for ``http://host:port/scheduler``)."""
    limits = limits or Limits()
    if "://" in prefix:  # the whole urlPrefix of the configuration: its path is what counts
        prefix = urlsplit(prefix).path
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    middlewares = [_guarded(guard)] if guard is not None else []
    app = web.Application(client_max_size=limits.max_body_bytes, middlewares=middlewares)
    verbs: dict[str, tuple[Callable[[Any], Any], Verb]] = {
        # the pod the pending pods' watch decoded when the body's is that object (filter_args)
        # (every name passed: its JSON written from the names' JSON kept, filter_answer)
        "filter": (extender.filter_args, extender.filter_answer),
        # its HostPriorityList written straight from the scores (prioritize_answer)
        "prioritize": (extender.filter_args, extender.prioritize_answer),
        "bind": (protocol.bind_args, extender.bind),
        "preempt": (preempt.preempt_args, partial(preempt.process_preemption, extender)),
    }
    ready = ThreadPoolExecutor(1, thread_name_prefix="schedcache-extender-readyz")
    draining = Draining(limits.drain_timeout)
    app.on_shutdown.append(draining.stop)
    lanes: list[Lane] = []
    semaphores: dict[str, asyncio.Semaphore] = {}
    for verb, (decode, run) in verbs.items():
        share = "filter" if verb == "preempt" else verb  # preempt holds filter's slots
        slots = limits.concurrency(share)
        lane = Lane(slots, f"schedcache-extender-{verb}")
        lanes.append(lane)
        semaphore = semaphores.setdefault(share, asyncio.Semaphore(slots))
        route = Route(verb, decode, run, lane, semaphore, limits, draining)
        app.router.add_post(f"{prefix}/{verb}", route.handle)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz(extender, ready))
    app.router.add_get("/metrics", _metrics)

    async def shutdown(_: web.Application) -> None:
        ready.shutdown(wait=False, cancel_futures=True)
        for lane in lanes:
            lane.shutdown()

    app.on_cleanup.append(shutdown)
    return app


class Route:
    """One verb: its slots, its threads (:class:`~.lanes.Lane`), its body limit."""

    def __init__(
        self,
        verb: str,
        decode: Callable[[Any], Any],
        run: Verb,
        pool: Lane,
        slots: asyncio.Semaphore,
        limits: Limits,
        draining: Draining | None = None,
    ) -> None:
        self.verb = verb
        self.draining = draining or Draining()
        self.decode = decode
        self.run = run
        self.pool = pool
        self.slots = slots
        self.limits = limits
        self.limit = limits.body_limit(verb)
        # The verb's metric children, looked up once (a labels() call takes a lock and builds
        # a key on every request).
        self.seconds = REQUEST_SECONDS.labels(verb)
        self.answered = {False: REQUESTS.labels(verb, "ok"), True: REQUESTS.labels(verb, "refused")}

    async def handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            refused, payload = await self._answer(request)
        except Failure as failure:
            REQUESTS.labels(self.verb, failure.reason).inc()
            return web.json_response(self._failed(f"{self.verb}: {failure}"), status=failure.status)
        except ConnectionResetError:
            # The client went away while its body was read (a timeout of its own, a reset,
            # a crash): nobody to answer, nothing to log but the count (found in review).
            REQUESTS.labels(self.verb, "client_gone").inc()
            return web.Response(status=499)
        finally:
            self.seconds.observe(time.perf_counter() - started)
        self.answered[refused].inc()
        return web.Response(body=payload, content_type="application/json", charset="utf-8")

    def _failed(self, error: str) -> dict[str, Any]:
        """The verb's own result with ``Error`` set: an ExtenderFilterResult for filter (no
        node passed), an ExtenderBindingResult for bind; prioritize's list has no room for an
        error, so ``{"Error"}`` alone."""
        if self.verb == "filter":
            return {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": error,
            }
        return {"Error": error}

    async def _answer(self, request: web.Request) -> tuple[bool, bytes]:
        length = request.content_length
        if length is not None and length > self.limit:
            raise Failure(413, "too_large", f"the body is over {self.limit} bytes")
        if self.draining.stopping:
            raise shutting_down()
        if self.slots.locked():
            try:
                with self.draining.wait():
                    async with asyncio.timeout(self.limits.queue_timeout):
                        await self.slots.acquire()
            except TimeoutError:
                raise Failure(503, "busy", "too many requests at once; try again") from None
        else:
            await self.slots.acquire()  # a free slot is taken at once: no timer
        try:
            body = await self._body(request)
            job = self.pool.run(self._decode_and_run, body)
            running = self.draining.running
            running.add(job)
            try:
                answer: tuple[bool, bytes] = await job
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if job.cancelled() and self.draining.stopping and task and not task.cancelling():
                    raise shutting_down(  # cut by the drain (Draining.stop), not a cancel
                        f"the extender stopped before this {self.verb} finished "
                        f"(--drain-timeout {self.draining.timeout:g} s); its outcome is unknown"
                    ) from None
                raise
            finally:
                running.discard(job)
            return answer
        finally:
            self.slots.release()

    async def _body(self, request: web.Request) -> bytes:
        content = request.content
        if content.is_eof():  # the whole body arrived already (with its headers): no timer
            body = content.read_nowait()
            if len(body) > self.limit:
                raise Failure(413, "too_large", f"the body is over {self.limit} bytes")
            if content.at_eof():
                return body
            chunks = [body]  # (not all of it read at once: the rest as below)
        else:
            chunks = []
        size = sum(map(len, chunks))
        try:
            with self.draining.wait():
                async with asyncio.timeout(self.limits.body_timeout):
                    async for chunk in request.content.iter_any():
                        size += len(chunk)
                        if size > self.limit:
                            raise Failure(413, "too_large", f"the body is over {self.limit} bytes")
                        chunks.append(chunk)
        except TimeoutError:
            raise Failure(
                408, "body_timeout", f"the body did not arrive within {self.limits.body_timeout} s"
            ) from None
        return b"".join(chunks)

    def _decode_and_run(self, body: bytes) -> tuple[bool, bytes]:
        """In the verb's threads: decode, run, encode the answer (whether it is a refusal, and
        its JSON: 5,000 scores take milliseconds to encode, which the event loop, answering
        ``/healthz``, should not spend), and turn every expected failure into a Failure."""
        try:
            args = self.decode(protocol.decode_json(body))
        except ProtocolError as error:
            raise Failure(400, "bad_request", str(error)) from None
        del body
        try:
            answer = self.run(args)
            if isinstance(answer, bytes):  # written already (prioritize)
                return False, answer
            refused = isinstance(answer, dict) and bool(answer.get("Error"))
            return refused, protocol.encode(answer)
        except (RetriesExhausted, RedisError) as error:
            raise Failure(503, "redis_unavailable", f"the cache is unreachable: {error}") from None
        except CacheError as error:
            log.warning("extender %s failed: %s", self.verb, error)
            # filter and bind say it in their result (HTTP 200); prioritize cannot.
            status = 500 if self.verb == "prioritize" else 200
            raise Failure(status, "cache_error", str(error)) from None
        except Exception:
            log.exception("extender %s: unexpected error", self.verb)
            raise Failure(500, "internal", "internal error (logged by the extender)") from None


def _guarded(guard: Guard) -> Any:
    """Tells the guard a request's headers arrived (its header timer stops), and that its
    response is written (the timer starts again for the next request on the connection)."""

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        guard.request_started(request.protocol)
        try:
            return await handler(request)
        finally:
            guard.request_finished(request.protocol)

    return middleware


async def _healthz(_: web.Request) -> web.Response:
    """Liveness: the event loop answers. Nothing here waits on a worker or on Redis."""
    return web.Response(text="ok\n")


def _readyz(
    extender: Extender, pool: ThreadPoolExecutor
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def readyz(_: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.run_in_executor(pool, extender.cache.generation), READY_TIMEOUT
            )
        except TimeoutError:
            return web.json_response({"Error": "redis: no answer"}, status=503)
        except Exception as error:  # Redis away: not ready, say why
            return web.json_response({"Error": f"redis: {error}"}, status=503)
        return web.Response(text="ok\n")

    return readyz


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


async def start(
    extender: Extender,
    sock: socket.socket,
    prefix: str = "",
    limits: Limits | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> web.AppRunner:
    """Serve on ``sock`` (bound beforehand) in the running loop; ``runner.cleanup()`` stops.
    TLS only on asyncio's own loop (see :func:`event_loop_factory`)."""
    if ssl_context is not None and on_uvloop(asyncio.get_running_loop()):
        raise ValueError(
            "the extender serves TLS on asyncio's event loop only: on uvloop's, handshakes "
            "hang (uvloop reads a connection before the guard's start_tls takes it)"
        )
    limits = limits or Limits()
    guard = Guard(limits.max_connections, limits.header_timeout)
    runner = web.AppRunner(
        make_app(extender, prefix, limits, guard),
        access_log=None,
        shutdown_timeout=DRAINED_TIMEOUT,  # (the verbs' own drain: Draining.stop)
    )
    await runner.setup()
    await GuardedSite(runner, sock, guard, ssl_context).start()
    return runner


def serve(
    extender: Extender,
    sock: socket.socket,
    prefix: str = "",
    limits: Limits | None = None,
    ssl_context: ssl.SSLContext | None = None,
    stopped: threading.Event | None = None,
) -> None:
    """Serve until SIGTERM or Ctrl-C (a repeat while stopping changes nothing); the handlers
    of those signals are given back as they were once the event loop has closed.

    ``stopped`` is an event the caller's own handlers set: one set before the server's
    handlers took over (a SIGTERM while it started) ends it at once instead of being lost."""
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}

    async def main() -> None:
        stop = asyncio.Event()
        signals = StopSignals(asyncio.get_running_loop(), stop)  # first: one while it starts
        try:
            if stopped is not None and stopped.is_set():
                return
            runner = await start(extender, sock, prefix, limits, ssl_context)
            try:
                await stop.wait()
            finally:
                await runner.cleanup()
        finally:
            # Ignored until the loop has closed: its close left the default action (a
            # repeated SIGTERM in the ~200 ms to the exit killed the process after a clean
            # stop: exit -15), and the caller's own handler, given back while the loop still
            # ran, was called from inside it (uvloop logged the exception it raised as a
            # traceback: found in CI).
            signals.close()

    try:
        with asyncio.Runner(loop_factory=event_loop_factory(tls=ssl_context is not None)) as runner:
            runner.run(main())
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def event_loop_factory(tls: bool = False) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop for plain HTTP where it is installed (the ``extender`` extra, but
    for Windows), else asyncio's own (``None``). The event loop carries every request's HTTP
    parsing, writing and thread hops (issue 43's profile: about half the extender's CPU a
    pod); uvloop does its part in C (libuv).

    Not with TLS: the guard starts each handshake itself (``loop.start_tls``, so that it
    counts against the connection limit), and uvloop starts reading a connection as soon as
    it is made, before that call can take it: a ClientHello read then is lost to the
    handshake, which hangs (asyncio reads from the next loop turn on)."""
    return None if tls else _uvloop_factory()


@cache
def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop``, or None where uvloop is not installed, or installed but
    broken (a wheel of another platform, a missing libuv symbol: found in review, anything but
    ImportError ended the command), said once in the log."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    except ImportError:
        return None
    except Exception as error:
        log.warning("uvloop is installed but does not load (%r): serving on asyncio's loop", error)
        return None
    return factory


def on_uvloop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is uvloop's (its class or a subclass; found in review: the module's
    name alone missed a subclass defined elsewhere). uvloop not imported: it cannot be."""
    uvloop = sys.modules.get("uvloop")
    loop_class = getattr(uvloop, "Loop", None)
    return isinstance(loop_class, type) and isinstance(loop, loop_class)


def event_loop_name(tls: bool = False) -> str:
    """``uvloop`` or ``asyncio``: the loop :func:`serve` runs on (the command's banner)."""
    return "asyncio" if event_loop_factory(tls) is None else "uvloop"
