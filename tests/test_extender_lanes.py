"""The verbs' threads (schedcache.extender.lanes.Lane): what an executor gave the server, with
less work per call: results and exceptions come back to the awaiting request, threads start
as work comes up to the verb's slots, a job cancelled before a thread took it does not run,
and shutting down cancels the jobs not yet taken."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from schedcache.extender.lanes import Lane


def test_a_job_answers_its_result_or_its_exception_from_a_named_thread() -> None:
    lane = Lane(2, "schedcache-extender-test")

    def where(x: int) -> tuple[int, str]:
        if x < 0:
            raise ValueError("negative")
        return x * 2, threading.current_thread().name

    async def main() -> None:
        assert await lane.run(where, 21) == (42, "schedcache-extender-test_0")
        with pytest.raises(ValueError, match="negative"):
            await lane.run(where, -1)
        assert await lane.run(where, 1) == (2, "schedcache-extender-test_0")  # (idle: reused)
        lane.shutdown()

    asyncio.run(main())
    assert len(lane.threads) == 1


def test_threads_start_up_to_the_slots_and_a_job_cancelled_before_it_is_taken_never_runs() -> None:
    lane = Lane(2, "lane")
    release = threading.Event()
    ran: list[int] = []

    def job(x: int) -> int:
        release.wait(5)
        ran.append(x)
        return x

    async def main() -> None:
        first, second = lane.run(job, 1), lane.run(job, 2)
        third = lane.run(job, 3)  # both threads busy: it waits in the queue
        third.cancel()
        await asyncio.sleep(0.05)
        assert len(lane.threads) == 2
        release.set()
        assert sorted(await asyncio.gather(first, second)) == [1, 2]
        fourth = lane.run(job, 4)
        assert await fourth == 4
        time.sleep(0.05)
        lane.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            lane.run(job, 5)

    asyncio.run(main())
    for thread in lane.threads:
        thread.join(5)
        assert not thread.is_alive()
    assert sorted(ran) == [1, 2, 4]  # not 3


def test_shutting_down_cancels_the_jobs_no_thread_took() -> None:
    lane = Lane(1, "lane")
    release = threading.Event()

    async def main() -> None:
        busy = lane.run(lambda _: release.wait(5), None)
        waiting = lane.run(lambda x: x, "never")
        await asyncio.sleep(0.05)
        lane.shutdown()
        assert waiting.cancelled()
        release.set()
        assert await busy is True

    asyncio.run(main())
    lane.threads[0].join(5)
    assert not lane.threads[0].is_alive()


def test_a_lane_answers_again_after_a_thread_failed_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(Found in review: the job was queued for a thread that never started, and a verb of
    one slot waited for it forever.) The call fails; the next starts a thread and answers."""
    lane = Lane(1, "pids")
    start = threading.Thread.start
    failures = [1]

    def flaky(self: threading.Thread) -> None:
        if failures and self.name.startswith("pids"):
            failures.pop()
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", flaky)

    async def main() -> None:
        with pytest.raises(RuntimeError, match="can't start"):
            await lane.run(lambda x: x, 1)
        try:
            assert await asyncio.wait_for(lane.run(lambda x: x, 2), 3) == 2
        finally:
            lane.shutdown()

    asyncio.run(main())


def test_a_lane_of_no_threads_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Lane(0, "prioritize")
