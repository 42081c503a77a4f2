"""Review of a05a662 (the extender's stop: ``Draining``, ``--drain-timeout``, uvloop fallback).

A helper who had not written it tried it as a stranger would. Tests marked "Found in review
(mended)" failed on a05a662 and pass since the mends."""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import click
import pytest

from schedcache import Cache
from schedcache.cli.extender import extender as extender_command
from schedcache.extender import server as server_module
from schedcache.extender.lanes import Lane
from schedcache.extender.limits import Limits
from schedcache.extender.server import Draining, Failure, Route
from schedcache.extender.service import Extender
from schedcache.ops.expiry import ExpiryWorker
from tests.apiserver import FakeApiServer
from tests.conftest import REAL_REDIS_URL
from tests.extender_server import (
    RunningExtender,
    extender_process,
    free_port,
    real_cache,
    wait_until_serving,
)
from tests.factories import make_node
from tests.test_extender_attacks import api_binder, binding
from tests.test_extender_attacks import pending as api_pending
from tests.test_extender_shutdown import answer_of, filter_body, stalled_mid_body

__all__ = ["real_cache"]  # the fixture (tests/extender_server.py), used here


# -- races inside one loop turn (Route as the server builds it, a fake request) --------------


class Content:
    """A request body that arrives when the test says (``arrive``)."""

    def __init__(self) -> None:
        self.chunk: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def is_eof(self) -> bool:
        return False

    async def iter_any(self) -> AsyncIterator[bytes]:
        yield await self.chunk


class FakeRequest:
    def __init__(self) -> None:
        self.content_length = None
        self.content = Content()


def route(draining: Draining, slots: asyncio.Semaphore) -> Route:
    lane = Lane(1, "review-drain")
    return Route("filter", lambda x: x, lambda x: {}, lane, slots, Limits(), draining)


def test_a_slot_handed_over_in_the_stops_turn_is_answered_and_not_lost() -> None:
    """The slot's holder releases it to the waiter, and the stop comes in the same loop turn:
    the waiter is answered ``shutting_down``, the slot is back, no cancel is left pending."""

    async def scenario() -> None:
        draining, slots = Draining(), asyncio.Semaphore(1)
        await slots.acquire()  # held by another request
        task = asyncio.ensure_future(route(draining, slots)._answer(FakeRequest()))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert task in draining.waiting
        slots.release()  # the waiter's future is set: it owns the slot now ...
        await draining.stop()  # ... and the stop cancels it before it runs
        with pytest.raises(Failure) as failure:
            await task
        assert failure.value.reason == "shutting_down" and failure.value.status == 503
        assert not slots.locked() and task.cancelling() == 0
        assert not draining.waiting and not draining.cut

    asyncio.run(scenario())


def test_a_body_that_completes_in_the_stops_turn_is_answered_and_frees_its_slot() -> None:
    async def scenario() -> None:
        draining, slots = Draining(), asyncio.Semaphore(1)
        request = FakeRequest()
        task = asyncio.ensure_future(route(draining, slots)._answer(request))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert task in draining.waiting and slots.locked()
        request.content.chunk.set_result(b"{}")  # the last byte arrives ...
        await draining.stop()  # ... in the stop's turn
        with pytest.raises(Failure) as failure:
            await task
        assert failure.value.reason == "shutting_down"
        assert not slots.locked() and task.cancelling() == 0 and not draining.cut

    asyncio.run(scenario())


def test_a_queue_timeout_firing_in_the_stops_turn_is_shutting_down_not_busy_or_cancelled() -> None:
    """asyncio.timeout's cancel and the stop's on one task: one answer, no cancel left."""

    async def scenario() -> None:
        draining, slots = Draining(), asyncio.Semaphore(1)
        await slots.acquire()
        answer = route(draining, slots)
        answer.limits = Limits(queue_timeout=0.05)
        task = asyncio.ensure_future(answer._answer(FakeRequest()))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        time.sleep(0.1)  # the timer is due: it fires in the same turn as the stop below
        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(draining.stop()))
        with pytest.raises(Failure) as failure:
            await task
        assert failure.value.reason == "shutting_down"
        assert task.cancelling() == 0 and not draining.cut

    asyncio.run(scenario())


# -- --drain-timeout --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf", "1e999", "3601"])
def test_bad_drain_timeouts_are_refused_by_click(value: str) -> None:
    option = next(p for p in extender_command.params if p.name == "drain_timeout")
    with pytest.raises(click.BadParameter):
        option.type.convert(value, option, None)


@pytest.mark.parametrize("name", ["drain_timeout", "read_timeout", "bind_timeout"])
def test_a_nan_timeout_is_refused_by_click(name: str) -> None:
    """Found in review (mended): click.FloatRange lets NaN through (every comparison is False):
    ``--drain-timeout nan`` started, and at SIGTERM with a connection open uvloop raised
    ValueError from call_at (traceback, exit 1), asyncio fired the NaN timer at once.
    ``--read-timeout`` and ``--bind-timeout`` took it too (before this change)."""
    option = next(p for p in extender_command.params if p.name == name)
    with pytest.raises(click.BadParameter):
        option.type.convert("nan", option, None)


class StuckBinder:
    """An API server whose Binding never answers (until the test ends), then fails."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.entered.set()
        self.release.wait(30)
        raise OSError("the test ended")

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        return dict(self.inner.read_pod(namespace, name))


def test_a_bind_cut_at_the_drain_timeout_leaves_a_claim_the_expiry_worker_releases(
    cache: Cache, tmp_path: Path
) -> None:
    """A bind still waiting on the API server at the drain timeout is answered 503, its outcome
    unknown; its claim is released at its --bind-timeout deadline (~2 s: the drain, then the
    1 s bind timeout)."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    with FakeApiServer() as api:
        api.create(api_pending("a", "1"))
        binder = StuckBinder(api_binder(api, tmp_path))
        extender = Extender(cache, binder, bind_timeout=1.0)
        server = RunningExtender(extender, limits=Limits(drain_timeout=0.5))
        answers: list[tuple[int, Any]] = []

        def client() -> None:
            answers.append(server.post("bind", binding("a", "n1")))

        thread = threading.Thread(target=client)
        try:
            with server:
                thread.start()
                assert binder.entered.wait(10)
            thread.join(10)
            # (since the mend of the 2x wait: answered 503 at the drain timeout, not cut)
            assert len(answers) == 1 and answers[0][0] == 503, answers
            assert "outcome is unknown" in answers[0][1]["Error"]
            assert cache.pod_state("uid-a") == "assumed"
            time.sleep(1.1)
            assert ExpiryWorker(cache).run_once() == ["uid-a"]
            assert cache.get_node_info("n1").requested.milli_cpu == 0
        finally:
            binder.release.set()


# -- the command under signals ---------------------------------------------------------------


@pytest.mark.parametrize("uvloop", [True, False])
def test_stalled_waiters_and_a_sigint_are_all_answered_and_counted(
    real_cache: Cache, uvloop: bool
) -> None:
    """SIGINT as SIGTERM: six stalled clients (four hold the filter's slots mid-body, two wait
    for one) are each answered 503 with the full ExtenderFilterResult; exit 0, no traceback."""
    process, port = extender_process(
        real_cache.name, "--no-api", "--read-timeout", "30", uvloop=uvloop
    )
    try:
        wait_until_serving(port)
        stalled = [stalled_mid_body(port) for _ in range(6)]  # 4 mid-body, 2 waiting for a slot
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        answers = [answer_of(sock) for sock in stalled]
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0 and "Traceback" not in err, err
        for answer in answers:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 "), answer[:100]
            result = json.loads(body)
            assert result["Error"] == "filter: the extender is shutting down; try again"
            assert result["NodeNames"] is None and result["FailedNodes"] == {}
    finally:
        process.kill()


def test_a_repeated_sigterm_during_the_stop_still_exits_0(real_cache: Cache) -> None:
    """Found in review (mended): the signal handlers went with the event loop, ~200 ms before
    the process ended: a second SIGTERM (an operator's, a supervisor's) in that window killed
    it, exit -15 after a clean stop."""
    process, port = extender_process(real_cache.name, "--no-api")
    try:
        wait_until_serving(port)
        deadline = time.monotonic() + 10
        while process.poll() is None and time.monotonic() < deadline:
            process.send_signal(signal.SIGTERM)  # every 20 ms until it is gone
            time.sleep(0.02)
        process.communicate(timeout=10)
        assert process.returncode == 0
    finally:
        process.kill()


def test_a_kept_alive_connection_is_closed_at_the_stop_not_answered(real_cache: Cache) -> None:
    """A request on an idle kept-alive connection after SIGTERM finds it closed (aiohttp closes
    idle connections as the stop begins; docs/extender.md said it was answered 503: found in
    review, the docs mended); nothing hangs, exit 0."""
    process, port = extender_process(real_cache.name, "--no-api")
    try:
        wait_until_serving(port)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("POST", "/filter", body=filter_body())
        assert conn.getresponse().read()
        holder = stalled_mid_body(port)  # keeps the stop going a moment
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        with pytest.raises((OSError, http.client.HTTPException)):
            conn.request("POST", "/filter", body=filter_body())
            conn.getresponse().read()
        assert answer_of(holder).startswith(b"HTTP/1.1 503 ")
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0 and "Traceback" not in err
    finally:
        process.kill()


# -- uvloop ------------------------------------------------------------------------------------


CLI = [sys.executable, "-m", "schedcache.cli", "--redis", REAL_REDIS_URL, "--cache"]


def test_the_command_with_a_broken_uvloop_serves_on_asyncio_and_says_so_once(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "uvloop"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise OSError('a wheel of another platform')\n")
    port = free_port()
    env = {"PYTHONPATH": f"{tmp_path}:{Path(__file__).parent.parent}", "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen(
        [
            *CLI,
            f"t-{uuid.uuid4().hex[:8]}",
            "extender",
            "--no-api",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        wait_until_serving(port)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0 and "Traceback" not in err, err
    assert "(asyncio event loop)" in err
    assert err.count("uvloop is installed but does not load") == 1


def test_on_uvloop_is_false_for_asyncio_also_when_uvloop_is_blocked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.new_event_loop()
    try:
        assert not server_module.on_uvloop(loop)
        monkeypatch.setitem(sys.modules, "uvloop", None)
        assert not server_module.on_uvloop(loop)
    finally:
        loop.close()


def test_the_waiting_sets_are_empty_after_many_waits() -> None:
    """A thousand waits, answered or not: nothing stays in ``waiting`` or ``cut``."""

    async def scenario() -> None:
        draining = Draining()
        for _ in range(1000):
            with draining.wait():
                await asyncio.sleep(0)
        assert not draining.waiting and not draining.cut

    asyncio.run(scenario())
