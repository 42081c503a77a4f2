"""The demo's replica processes: spawned together, released at one moment by a start barrier,
each sending back its report or its error. One that fails, or ends without a word (killed: the
out-of-memory killer, a signal), ends the run at once with its error; a Ctrl-C is the caller's
alone. (Found in review: on a ``multiprocessing.Pool`` a killed worker's job was never
answered, so the run waited for ever, and a Ctrl-C printed every worker's traceback.)"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnContext, SpawnProcess
from threading import Barrier, BrokenBarrierError
from typing import Any

from schedcache.errors import CacheError


class ReplicaLost(CacheError):
    """A replica process ended without its report (killed), or the replicas did not start in
    time."""


def _child(
    conn: Connection, start: Barrier, target: Callable[..., Any], job: Sequence[Any]
) -> None:
    """A replica process: ``target(*job, start=start)``, its report sent back; or its error,
    as text first, then itself (an exception whose class takes other arguments than its
    message does not cross back: the caller then raises the text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller ends the run on a Ctrl-C
    try:
        report = target(*job, start=start)
    except BaseException as error:
        start.abort()  # the others' wait, and the caller's, end at once (found in review:
        # Redis gone during start-up left the caller waiting STARTUP_SECONDS, 5 minutes)
        conn.send(("error", f"{type(error).__name__}: {error}"))
        with suppress(Exception):
            conn.send(error)
    else:
        conn.send(("report", report))
    conn.close()


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while the processes are spawned: an ignored signal stays ignored across
    exec, and Python does not install its handler over it, so a Ctrl-C during their start-up
    prints nothing either. Only the main thread may change it (tests run the demo elsewhere:
    then ``_child`` ignores it once it runs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class ReplicaProcesses:
    """``target(*job, start=barrier)`` in a process per job, named ``names``; used as a
    context manager, which ends every process still running on the way out."""

    def __init__(
        self,
        context: SpawnContext,
        target: Callable[..., Any],
        jobs: Sequence[Sequence[Any]],
        names: Sequence[str],
    ) -> None:
        # Every replica starts at one moment, once all have built their pods and first
        # snapshot; the caller passes the barrier too, to time the same part.
        self.start = context.Barrier(len(jobs) + 1)
        self.names = list(names)
        self.processes: list[SpawnProcess] = []
        self.conns: list[Connection] = []
        with _sigint_ignored():
            for job, name in zip(jobs, self.names, strict=True):
                reader, writer = context.Pipe(duplex=False)
                process = context.Process(
                    target=_child, args=(writer, self.start, target, job), name=name, daemon=True
                )
                process.start()
                writer.close()  # the child's now: its end closes when the child ends
                self.processes.append(process)
                self.conns.append(reader)
        self.outcomes: dict[int, tuple[bool, Any]] = {}
        self.failure: BaseException | None = None
        self.watcher = threading.Thread(target=self._watch, name="replica-watch", daemon=True)
        self.watcher.start()

    def __enter__(self) -> ReplicaProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(timeout=5)
        for conn in self.conns:
            conn.close()

    def _watch(self) -> None:
        """Each process's outcome as it comes; the first failure breaks the start barrier
        and ends the watch."""
        pending = dict(enumerate(self.conns))
        while pending:
            for ready in wait(list(pending.values())):
                index = next(k for k, conn in pending.items() if conn is ready)
                del pending[index]
                self.outcomes[index] = outcome = self._read(index)
                if not outcome[0]:
                    self.failure = outcome[1]
                    self.start.abort()
                    return

    def _read(self, index: int) -> tuple[bool, Any]:
        name, conn = self.names[index], self.conns[index]
        try:
            kind, value = conn.recv()
        except EOFError:
            process = self.processes[index]
            process.join(timeout=1)
            return False, ReplicaLost(
                f"replica {name} ended without its report (exit code {process.exitcode}; a "
                "negative code is the signal that ended it)"
            )
        if kind == "report":
            return True, value
        try:
            error = conn.recv()
        except Exception:  # (EOFError: it did not cross; or it does not rebuild here)
            error = CacheError(f"replica {name}: {value}")
        return False, error

    def wait_for_start(self, timeout: float) -> None:
        """Until every replica is ready to schedule; the first failure's error otherwise."""
        try:
            self.start.wait(timeout=timeout)
        except BrokenBarrierError:
            self.watcher.join(timeout)  # the others end soon: their barrier is broken
            if self.failure is not None:
                raise self.failure from None
            raise ReplicaLost(f"the replicas did not start within {timeout:.0f} s") from None

    def results(self) -> list[Any]:
        """Every replica's report, in the order of the jobs; the first failure's error
        instead, as soon as there is one."""
        self.watcher.join()
        if self.failure is not None:
            raise self.failure
        return [self.outcomes[index][1] for index in range(len(self.processes))]
