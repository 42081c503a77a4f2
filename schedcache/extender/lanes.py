"""A verb's worker threads, handed work from the event loop with less than an executor costs.

``loop.run_in_executor`` on a :class:`~concurrent.futures.ThreadPoolExecutor` makes a work item,
a concurrent future with its condition, and chains it to an asyncio future with callbacks both
ways: ~130 us of the process's CPU a call against ~65 us here (a trivial function, 3 x 5,000
calls, 2026-11-29), three calls a pod in the full profile (issue 43). Here a job is a tuple put
on a :class:`queue.SimpleQueue` (in C); the thread that takes it runs it and settles the asyncio
future through ``loop.call_soon_threadsafe``, as the executor's chain finally does too.

As the executor: threads start as work comes and none is idle, up to ``count`` (the verb's
slots, so a job never waits behind another for a thread), named ``<prefix>_<i>``, daemons; a
job whose future was cancelled before a thread took it is not run; :meth:`shutdown` cancels the
jobs not yet taken and lets the threads end after the job they run.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[Any], Any], Any]


class Lane:
    """``count`` threads at most running one verb's jobs (see the module's text)."""

    def __init__(self, count: int, prefix: str) -> None:
        if count < 1:  # (as ThreadPoolExecutor refuses 0: a verb that could never answer)
            raise ValueError(f"{prefix}: {count} threads; at least 1")
        self.count = count
        self.prefix = prefix
        self.jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.idle = 0  # threads waiting for a job that no job put since has claimed
        self.lock = threading.Lock()
        self.stopped = False

    def run(self, function: Callable[[Any], Any], argument: Any) -> asyncio.Future[Any]:
        """``function(argument)`` on one of the threads; its result or exception, awaited."""
        if self.stopped:
            raise RuntimeError(f"{self.prefix}: shut down")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.lock:
            start = not self.idle and len(self.threads) < self.count
            if self.idle:
                self.idle -= 1  # (an idle thread takes it)
            elif start:
                thread = threading.Thread(
                    target=self._work, name=f"{self.prefix}_{len(self.threads)}", daemon=True
                )
                self.threads.append(thread)
        if start:
            # Started before the job is queued: a thread that cannot start (a pids limit) is
            # forgotten and the call fails, where a job queued for it would wait forever
            # (found in review: one failed start wedged a verb of one slot for good).
            try:
                thread.start()
            except BaseException:
                with self.lock:
                    self.threads.remove(thread)
                future.cancel()
                raise
        self.jobs.put((loop, future, function, argument))
        return future

    def shutdown(self) -> None:
        """From the event loop: cancel the jobs no thread took; each thread ends once idle."""
        self.stopped = True
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[1].cancel()
        for _ in self.threads:
            self.jobs.put(None)

    def _work(self) -> None:
        jobs = self.jobs
        while True:
            job = jobs.get()
            if job is None:
                return
            loop, future, function, argument = job
            del job
            settle: Callable[[asyncio.Future[Any], Any], None] | None = None
            if not future.cancelled():  # (cancelled before it was taken: not run)
                settle = _set_result
                try:
                    value = function(argument)
                except BaseException as error:
                    settle, value = _set_exception, error
            del function, argument
            # Idle before the answer goes: the request it answers may send the next job at
            # once, which should find this thread rather than start another.
            with self.lock:
                self.idle += 1
            if settle is not None:
                with contextlib.suppress(RuntimeError):  # (the loop closed: nobody waits)
                    loop.call_soon_threadsafe(settle, future, value)
                del value  # (the answer not kept alive while idle)
            del loop, future


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.cancelled():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.cancelled():
        future.set_exception(error)
