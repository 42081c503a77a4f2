"""Giving freed memory back to the system after a burst of connections.

Each TLS connection holds asyncio's 256 KiB read buffer (zeroed, so resident) while it is open.
Freed, those buffers go back to glibc's heap, not to the system: glibc raises its mmap threshold
after the first large free, so later buffers come from the heap, and a heap is returned only
from its top. After a burst (a flood of connections that never finish a handshake, then
closed) the process kept its peak for good. :class:`Trimmer` calls glibc's ``malloc_trim(0)``,
which returns every free page of the heap, once the open connections fell to half of their
peak since the last call: at once, or, within a second of the last call, a second later (in
the event loop). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import time
from collections.abc import Callable

# A peak of open connections under this is too small to be worth a trim.
MIN_PEAK = 32


def _malloc_trim() -> Callable[[], object] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class Trimmer:
    """Follows the open connections (``count``); trims when they fell to half of their peak.
    Called from the event loop only."""

    def __init__(
        self,
        count: Callable[[], int],
        trim: Callable[[], object] | None = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count = count
        self.trim = trim if trim is not None else _malloc_trim()
        self.interval = interval
        self.clock = clock
        self.peak = 0
        self.last = float("-inf")
        self.later: asyncio.TimerHandle | None = None
        self.trims = 0

    def opened(self) -> None:
        self.peak = max(self.peak, self.count())

    def closed(self) -> None:
        if self.trim is None or self.later is not None:
            return
        open_now = self.count()
        if self.peak < MIN_PEAK or open_now * 2 > self.peak:
            return
        wait = self.last + self.interval - self.clock()
        if wait <= 0:
            self._trim()
        else:
            self.later = asyncio.get_running_loop().call_later(wait, self._trim)

    def _trim(self) -> None:
        assert self.trim is not None
        self.later = None
        self.last = self.clock()
        self.peak = self.count()
        self.trims += 1
        self.trim()
