"""The extender's HTTP server (aiohttp): ``POST {prefix}/filter``, ``/prioritize``, ``/bind``,
``GET /healthz`` and ``GET /metrics``.

The verbs run the (blocking) cache calls in a thread pool, so a slow Redis call never stalls
the others. A malformed request answers 400 with a message naming the field; a failure of the
cache answers 500 with the error (kube-scheduler then treats the extender call as failed);
the server keeps serving either way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

from schedcache.errors import CacheError
from schedcache.extender import protocol
from schedcache.extender.protocol import ProtocolError
from schedcache.extender.service import Extender

log = logging.getLogger(__name__)

REQUEST_SECONDS = Histogram(
    "schedcache_extender_request_seconds",
    "Time to answer an extender request, by verb.",
    ["verb"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1),
)
REQUESTS = Counter(
    "schedcache_extender_requests_total",
    "Extender requests by verb and result: ok, bad_request (400), error (500), "
    "refused (a bind answered with an Error: fit conflict, API failure).",
    ["verb", "result"],
)

Verb = Callable[[Any], Any]


def make_app(extender: Extender, prefix: str = "", workers: int = 8) -> web.Application:
    """The aiohttp application; ``prefix`` is the KubeSchedulerConfiguration's urlPrefix path
    (``/scheduler`` for ``http://host:port/scheduler``)."""
    if "://" in prefix:  # the whole urlPrefix of the configuration: its path is what counts
        prefix = urlsplit(prefix).path
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    pool = ThreadPoolExecutor(workers, thread_name_prefix="schedcache-extender")
    app = web.Application(client_max_size=64 * 1024 * 1024)
    verbs: dict[str, tuple[Callable[[Any], Any], Verb]] = {
        "filter": (protocol.filter_args, extender.filter),
        "prioritize": (protocol.filter_args, extender.prioritize),
        "bind": (protocol.bind_args, extender.bind),
    }
    for verb, (decode, run) in verbs.items():
        app.router.add_post(f"{prefix}/{verb}", _handler(verb, decode, run, pool))
    app.router.add_get("/healthz", _healthz(extender, pool))
    app.router.add_get("/metrics", _metrics)

    async def shutdown(_: web.Application) -> None:
        pool.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(shutdown)
    return app


def _handler(
    verb: str, decode: Callable[[Any], Any], run: Verb, pool: ThreadPoolExecutor
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            args = decode(protocol.decode_json(await request.read()))
            answer = await asyncio.get_running_loop().run_in_executor(pool, run, args)
        except ProtocolError as error:
            REQUESTS.labels(verb, "bad_request").inc()
            return web.json_response({"Error": f"{verb}: {error}"}, status=400)
        except CacheError as error:
            REQUESTS.labels(verb, "error").inc()
            log.warning("extender %s failed: %s", verb, error)
            return web.json_response({"Error": f"{verb}: {error}"}, status=500)
        finally:
            REQUEST_SECONDS.labels(verb).observe(time.perf_counter() - started)
        refused = isinstance(answer, dict) and answer.get("Error")
        REQUESTS.labels(verb, "refused" if refused else "ok").inc()
        return web.json_response(answer, dumps=_dumps)

    return handle


def _healthz(
    extender: Extender, pool: ThreadPoolExecutor
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def healthz(_: web.Request) -> web.Response:
        try:
            await asyncio.get_running_loop().run_in_executor(pool, extender.cache.generation)
        except Exception as error:  # Redis away: not healthy, say why
            return web.Response(status=503, text=f"redis: {error}\n")
        return web.Response(text="ok\n")

    return healthz


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def serve(extender: Extender, host: str, port: int, prefix: str = "") -> None:
    """Serve until SIGTERM or Ctrl-C (aiohttp handles both and shuts down cleanly)."""
    web.run_app(make_app(extender, prefix), host=host, port=port, print=None)
