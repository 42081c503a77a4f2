"""Run the extender's aiohttp app on a free loopback port in a thread, for tests and benches."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import uvloop

from schedcache import Cache
from schedcache.extender.guard import bind_socket
from schedcache.extender.limits import Limits
from schedcache.extender.server import event_loop_factory, start
from schedcache.extender.service import Extender
from tests.conftest import REAL_REDIS_URL, real_client
from tests.factories import make_node

# Both event loops the extender serves on, for the tests that run on each.
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}


@pytest.fixture
def real_cache() -> Iterator[Cache]:
    """A cache holding node n1 on the real Redis, which extender processes are given."""
    cache = Cache(real_client(), f"t-{uuid.uuid4().hex[:12]}")
    cache.add_node(make_node("n1", "64", "64Gi"))
    yield cache
    cache.clear()


class RunningExtender:
    """``with RunningExtender(extender, prefix) as server: server.post("filter", {...})``."""

    def __init__(
        self,
        extender: Extender,
        prefix: str = "",
        limits: Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> None:
        self.extender = extender
        self.prefix = prefix
        self.limits = limits
        self.ssl_context = ssl_context
        # The event loop ``schedcache extender`` runs on (uvloop's for plain HTTP where
        # installed), unless a test asks for another (test_extender_event_loops.py).
        factory = loop_factory or event_loop_factory(tls=ssl_context is not None)
        self.loop = (factory or asyncio.new_event_loop)()
        self.runner: Any = None
        self.port = 0
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> RunningExtender:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> None:
        sock = bind_socket("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self.runner = await start(self.extender, sock, self.prefix, self.limits, self.ssl_context)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.extender.forgetter.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def post(self, verb: str, body: Any, raw: bytes | None = None) -> tuple[int, Any]:
        """POST JSON (or ``raw`` bytes); returns (status, decoded answer)."""
        data = raw if raw is not None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/{verb}", data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# The command as it runs where uvloop is not installed (asyncio's loop, as every TLS extender):
# ``python -c WITHOUT_UVLOOP ARGS`` instead of ``python -m schedcache.cli ARGS``.
WITHOUT_UVLOOP = (
    "import runpy, sys; sys.modules['uvloop'] = None; "
    "runpy.run_module('schedcache.cli', run_name='__main__')"
)


def extender_process(
    cache: str, *args: str, uvloop: bool = True
) -> tuple[subprocess.Popen[str], int]:
    """``schedcache --redis <real Redis> --cache CACHE extender --listen <free port> ARGS`` in a
    process of its own, as an operator runs it; stderr piped. Returns it and its port.
    ``uvloop=False``: as if uvloop were not installed (:data:`WITHOUT_UVLOOP`)."""
    port = free_port()
    start = ["-m", "schedcache.cli"] if uvloop else ["-c", WITHOUT_UVLOOP]
    cli = [sys.executable, *start, "--redis", REAL_REDIS_URL, "--cache", cache]
    process = subprocess.Popen(
        [*cli, "extender", "--listen", f"127.0.0.1:{port}", *args],
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, port


def wait_until_serving(port: int, timeout: float = 30.0) -> None:
    """Until the extender on ``port`` (plain HTTP) answers ``/healthz``: a process started."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "the extender did not come up"
            time.sleep(0.1)


def run_script(script: str, *args: str, timeout: float = 30) -> list[str]:
    """``python -c script args`` from the repository's root (a serve() used as a library, a
    command with a patched moment): its stdout's words, once it exited 0 without a traceback."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout.split()
