"""The extender on both event loops it can run on: uvloop's (``schedcache extender`` over
plain HTTP, where uvloop is installed) and asyncio's own (with TLS, and wherever uvloop is
not installed). The verbs answer byte for byte the same, and the guard's limits hold on
either; the rest of the extender's tests run on the loop the command would pick."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import uvloop

from schedcache import Cache
from schedcache.extender import server
from schedcache.extender.limits import Limits
from schedcache.extender.server import event_loop_factory, event_loop_name
from schedcache.extender.service import Extender
from tests.conftest import real_client
from tests.extender_server import LOOPS, RunningExtender, extender_process
from tests.factories import make_node
from tests.test_extender_attacks import binding, pending, slow_clients_are_evicted_then_cut


def raw_post(port: int, path: str, body: Any) -> bytes:
    """The answer's body, as bytes (the answers of the two loops are compared whole)."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: bytes = response.read()
        return answer


def test_the_command_picks_uvloop_for_plain_http_and_asyncio_for_tls() -> None:
    """uvloop reads a new connection at once, before the guard's own ``start_tls`` could take
    it (a ClientHello lost, a handshake that hangs): TLS stays on asyncio's loop."""
    assert event_loop_factory() is uvloop.new_event_loop
    assert event_loop_name() == "uvloop"
    assert event_loop_factory(tls=True) is None
    assert event_loop_name(tls=True) == "asyncio"


def test_tls_on_uvloop_is_refused_before_anything_is_served(cache: Cache) -> None:
    """Found in review: ``start`` (the library's way in) took TLS on uvloop's loop, where 7
    of 20 mTLS requests hung; it says why instead (the command never asks it)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server = RunningExtender(
        Extender(cache), ssl_context=context, loop_factory=uvloop.new_event_loop
    )
    with pytest.raises(ValueError, match="TLS on asyncio's event loop only"):
        server.__enter__()
    server.__exit__(None, None, None)  # (its loop's thread)
    assert server.runner is None


@pytest.mark.parametrize("error", ["RuntimeError", "OSError", "AttributeError"])
def test_a_broken_uvloop_falls_back_to_asyncio_and_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: str,
) -> None:
    """Found in review: a uvloop installed but broken otherwise than by ImportError (a wheel of
    another platform, a missing symbol) ended the command; it serves on asyncio's loop, once
    warned."""
    broken = tmp_path / "uvloop"
    broken.mkdir()
    (broken / "__init__.py").write_text(f"raise {error}('a broken build')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "uvloop")
    server._uvloop_factory.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="schedcache.extender.server"):
            assert event_loop_factory() is None
            assert event_loop_name() == "asyncio"
    finally:
        server._uvloop_factory.cache_clear()
    warned = [r.getMessage() for r in caplog.records if "uvloop" in r.getMessage()]
    assert len(warned) == 1 and "a broken build" in warned[0] and "asyncio" in warned[0]


def test_tls_is_refused_on_a_subclass_of_uvloops_loop(cache: Cache) -> None:
    """Found in review: ``start`` knew uvloop's loop by its module's name, so a subclass of it
    defined elsewhere took TLS (and hung its handshakes)."""

    class Instrumented(uvloop.Loop):  # type: ignore[misc]  # (e.g. a tracing wrapper)
        pass

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    running = RunningExtender(Extender(cache), ssl_context=context, loop_factory=Instrumented)
    with pytest.raises(ValueError, match="TLS on asyncio's event loop only"):
        running.__enter__()
    running.__exit__(None, None, None)
    assert running.runner is None
    plain = asyncio.new_event_loop()
    try:
        assert not server.on_uvloop(plain)
    finally:
        plain.close()


def test_the_verbs_answer_the_same_bytes_on_either_loop(cache: Cache) -> None:
    for name, cpu in (("small", "2"), ("big", "8"), ("full", "1")):
        cache.add_node(make_node(name, cpu, "8Gi"))
    answers: dict[str, list[bytes]] = {}
    for loop, factory in LOOPS.items():
        pod = pending(f"web-{loop}", cpu="1500m")
        asked = {"Pod": pod, "NodeNames": ["small", "big", "full", "gone"]}
        with RunningExtender(Extender(cache), loop_factory=factory) as server:
            answers[loop] = [
                raw_post(server.port, "/filter", asked),
                raw_post(server.port, "/prioritize", asked),
            ]
            bound = raw_post(server.port, "/bind", binding(f"web-{loop}", "big"))
        assert json.loads(bound) == {"Error": ""}
        assert cache.pod_state(f"uid-web-{loop}") == "assumed"
        cache.forget_pod(cache.get_pod(f"uid-web-{loop}"))  # the next loop sees the same nodes
    assert answers["uvloop"] == answers["asyncio"]
    filtered = json.loads(answers["uvloop"][0])
    assert filtered["NodeNames"] == ["small", "big"]
    assert list(filtered["FailedNodes"]) == ["full"]
    assert list(filtered["FailedAndUnresolvableNodes"]) == ["gone"]


@pytest.mark.parametrize("loop", LOOPS)
def test_slow_clients_are_evicted_and_cut_on_either_loop(cache: Cache, loop: str) -> None:
    """Attack 4 of test_extender_attacks.py, smaller: connections that never finish their
    headers, with room for 8; probes still get in, and the last are cut after the timeout."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    limits = Limits(max_connections=8, header_timeout=1.0)
    with RunningExtender(Extender(cache), limits=limits, loop_factory=LOOPS[loop]) as server:
        slow_clients_are_evicted_then_cut(server, 24)


@pytest.mark.parametrize("loop", LOOPS)
def test_bodies_too_large_or_too_slow_are_refused_on_either_loop(cache: Cache, loop: str) -> None:
    limits = Limits(max_body_bytes=8 * 1024, header_timeout=5, body_timeout=0.5)
    with RunningExtender(Extender(cache), limits=limits, loop_factory=LOOPS[loop]) as server:
        status, answer = server.post("filter", {"Pod": pending("x"), "NodeNames": ["n"] * 4000})
        assert status == 413 and "over 8192 bytes" in answer["Error"]
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive" in reply


def test_the_command_says_which_loop_it_serves_on(tmp_path: Path) -> None:
    """The banner names the loop (real Redis); the process serves on it and ends cleanly."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    cache = Cache(real_client(), name)
    cache.add_node(make_node("n1", "1", "8Gi"))
    process, port = extender_process(name, "--no-api")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = raw_post(port, "/filter", {"Pod": pending("web"), "NodeNames": ["n1"]})
                break
            except OSError:
                assert time.monotonic() < deadline, "the extender did not come up"
                time.sleep(0.1)
        assert json.loads(answer)["NodeNames"] == ["n1"]
        process.terminate()
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert f"http://127.0.0.1:{port} (uvloop event loop)" in err
        assert "Traceback" not in err
    finally:
        process.kill()
        cache.clear()
