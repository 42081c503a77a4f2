"""Review of the extender on uvloop (commit 86fc2cb): the command without uvloop, with mTLS,
under signals; what a burst of connections and clients that reset do on either loop."""

from __future__ import annotations

import http.client
import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from schedcache import Cache
from schedcache.extender.limits import Limits
from schedcache.extender.server import REQUESTS
from schedcache.extender.service import Extender
from tests.conftest import REAL_REDIS_URL
from tests.extender_server import (
    LOOPS,
    WITHOUT_UVLOOP,
    RunningExtender,
    extender_process,
    free_port,
    real_cache,
    wait_until_serving,
)
from tests.test_extender_attacks import pending, pki, tls_get

__all__ = ["pki", "real_cache"]  # fixtures defined elsewhere, used here too


def filter_body() -> bytes:
    return json.dumps({"Pod": pending("web"), "NodeNames": ["n1"]}).encode()


def post_filter(port: int, timeout: float = 5) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/filter", data=filter_body())
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()
        return int(response.status)


def end(process: subprocess.Popen[str], signum: int = signal.SIGTERM) -> tuple[float, str]:
    """Seconds the process took to exit after ``signum``, and its stderr."""
    started = time.monotonic()
    process.send_signal(signum)
    _, err = process.communicate(timeout=30)
    return time.monotonic() - started, err


def test_without_uvloop_the_command_serves_on_asyncio_and_says_so(real_cache: Cache) -> None:
    port = free_port()
    cli = [sys.executable, "-c", WITHOUT_UVLOOP, "--redis", REAL_REDIS_URL]
    listen = ["extender", "--listen", f"127.0.0.1:{port}", "--no-api"]
    process = subprocess.Popen(
        [*cli, "--cache", real_cache.name, *listen],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(port)
        assert [post_filter(port) for _ in range(20)] == [200] * 20
        _, err = end(process)
        assert process.returncode == 0, err
        assert f"http://127.0.0.1:{port} (asyncio event loop)" in err
        assert "Traceback" not in err
    finally:
        process.kill()


def test_the_mtls_command_serves_on_asyncio_request_after_request(
    real_cache: Cache, pki: Path
) -> None:
    tls = ["--tls-cert-file", str(pki / "server.crt"), "--tls-private-key-file"]
    tls += [str(pki / "server.key"), "--client-ca-file", str(pki / "ca.crt")]
    process, port = extender_process(real_cache.name, "--no-api", *tls)
    client = (pki / "ca.crt", pki / "client.crt", pki / "client.key")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                tls_get(port, *client)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the extender did not come up"
                time.sleep(0.1)
        assert [tls_get(port, *client) for _ in range(100)] == [200] * 100
        _, err = end(process)
        assert process.returncode == 0, err
        assert f"https://127.0.0.1:{port} (asyncio event loop)" in err
        assert "Traceback" not in err
    finally:
        process.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_amid_requests_on_uvloop_ends_the_command_at_once(
    real_cache: Cache, signum: int
) -> None:
    process, port = extender_process(real_cache.name, "--no-api")
    stop = threading.Event()
    answered: list[int] = []

    def clients() -> None:
        while not stop.is_set():
            try:
                answered.append(post_filter(port))
            except OSError:  # refused once the listener is closed
                time.sleep(0.05)

    threads = [threading.Thread(target=clients) for _ in range(3)]
    try:
        wait_until_serving(port)
        for thread in threads:
            thread.start()
        time.sleep(1)
        seconds, err = end(process, signum)
        assert process.returncode == 0, err
        assert seconds < 3, f"{seconds:.1f} s to exit"
        assert "(uvloop event loop)" in err and "Traceback" not in err
        assert answered and set(answered) == {200}
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        process.kill()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_burst_of_closed_connections_spares_an_idle_keep_alive_client(
    cache: Cache, loop: str
) -> None:
    """Found in review (mended): on asyncio's loop (every TLS extender's, and any without
    uvloop) the connections accepted while the loop stalled count as open before their EOF
    is read, and over max_connections the guard evicted the oldest idle one, a live
    kept-alive client's. Connections that never completed a request now go first."""
    limits = Limits(max_connections=16)
    with RunningExtender(Extender(cache), limits=limits, loop_factory=LOOPS[loop]) as server:
        kept = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        kept.request("GET", "/healthz")
        assert kept.getresponse().read() == b"ok\n"
        # The loop stalls half a second (a collection, a slow callback) while 40 clients
        # connect and close at once.
        server.loop.call_soon_threadsafe(time.sleep, 0.5)
        time.sleep(0.05)
        for _ in range(40):
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        time.sleep(0.8)
        try:
            kept.request("GET", "/healthz")
            response = kept.getresponse()
            answer = (response.status, response.read())
        except (ConnectionError, http.client.HTTPException) as error:
            answer = (0, repr(error).encode())
        finally:
            kept.close()
        assert answer == (200, b"ok\n")


@pytest.mark.parametrize("loop", LOOPS)
def test_clients_that_leave_amid_their_body_log_no_traceback(
    cache: Cache, loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Found in review (mended): a client gone while its body was read made the verb's
    handler raise ConnectionResetError, which aiohttp logged with a ~25-line traceback each
    (a flood of them filled an unread stderr pipe and stalled the server), uncounted. Now
    counted as ``client_gone``, nothing logged."""
    caplog.set_level(logging.ERROR)
    before = REQUESTS.labels("filter", "client_gone")._value.get()
    with RunningExtender(Extender(cache), loop_factory=LOOPS[loop]) as server:
        gone = []
        for _ in range(5):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            gone.append(sock)
        time.sleep(0.5)  # each handler waits on its body
        for sock in gone:
            sock.close()
        time.sleep(0.5)
        assert server.get("/healthz") == (200, "ok\n")
        assert REQUESTS.labels("filter", "client_gone")._value.get() - before == 5
    tracebacks = [record for record in caplog.records if record.exc_info]
    assert tracebacks == [], f"{len(tracebacks)} tracebacks: {tracebacks[0].getMessage()}"
