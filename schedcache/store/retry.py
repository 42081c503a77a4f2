"""How long a command is sent again when Redis does not answer.

Every command carries an id (``lua/_command_ids.lua``), so sending it again after a lost reply is
safe: if the first send ran, Redis answers with its first outcome. That makes a generous policy
cheap, and failovers need one: Redis Cluster promotes a replica after ``cluster-node-timeout``
plus an election, Sentinel after ``down-after-milliseconds`` plus its own election, and a
restarted server refuses commands while it loads its AOF. Set ``within`` above that time.

But Redis remembers a command id for ``COMMAND_ID_TTL_MS`` (two minutes, ``lua/_command_ids.lua``):
a resend after that would be applied a second time. So ``within`` is capped at
:data:`MAX_RETRY_WINDOW`, which leaves the last resend a margin to reach the server (its socket
timeout, a slow network), and a command or batch group with an id made or first sent longer ago
is refused (:func:`too_late_to_resend`). A feeder's versioned changes
(``commands.VERSIONED``) go without an id and are idempotent by their resourceVersion (sent again
once applied, they are answered ``dropped repeated``): they are resent for up to
:data:`MAX_VERSIONED_RESEND`, while Redis still holds the tombstone of a delete made after their
first send (``TOMBSTONE_MS``, ``lua/_versions.lua``): later, a resent add or update of an object
deleted meanwhile would bring it back.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass
from typing import TypeVar

from redis.exceptions import (
    ClusterDownError,
    ConnectionError,
    MovedError,
    ReadOnlyError,
    TimeoutError,
    TryAgainError,
)

from schedcache.errors import ValidationError
from schedcache.store.commands import Command, sent_with_id

# How long Redis remembers a command id (lua/_command_ids.lua; a test keeps them equal).
COMMAND_ID_TTL_MS = 120_000
# The longest time after its first send that a command may be sent again: 30 s under the
# memory, for the resend to reach the server (socket timeout, network) and for clock drift.
MAX_RETRY_WINDOW = 90.0
# How long Redis keeps a deleted object's version as a tombstone (lua/_versions.lua; a test
# keeps them equal), and the longest time after its first send that a versioned change (no id)
# may be sent again: a minute under the tombstone's life, as MAX_RETRY_WINDOW is under the ids'.
TOMBSTONE_MS = 3_600_000
MAX_VERSIONED_RESEND = TOMBSTONE_MS / 1000 - 60.0

# Errors after which the command may be sent again: the connection broke (the command may or
# may not have run), or the server refused it without running it (the cluster is electing a
# new primary, the slot moved to another node, the server was demoted to a replica).
RETRYABLE: tuple[type[Exception], ...] = (
    ConnectionError,
    TimeoutError,
    ClusterDownError,
    TryAgainError,
    MovedError,
    ReadOnlyError,
)
# Of those, the ones that mean "ask the cluster (or Sentinel) again where the primary is".
TOPOLOGY_CHANGED: tuple[type[Exception], ...] = (
    ConnectionError,
    TimeoutError,
    ClusterDownError,
    MovedError,
    ReadOnlyError,
)


def too_late_to_resend(commands: Collection[Command], first_sent: float) -> str | None:
    """Why ``commands`` (one command, or one ``sc_batch`` group), made or first sent at
    ``first_sent`` (``time.monotonic()``), must not be sent again, or None while Redis surely
    still remembers their id. Commands sent without an id (``commands.sent_with_id``: a
    feeder's versioned changes only) are recognised by their resourceVersion instead, for
    :data:`MAX_VERSIONED_RESEND` (a delete's tombstone outlives that)."""
    age = time.monotonic() - first_sent
    if not sent_with_id(commands):
        if age <= MAX_VERSIONED_RESEND:
            return None
        return (
            f"versioned changes first sent {age:.0f} s ago, over {MAX_VERSIONED_RESEND:g} s: "
            f"Redis keeps a deleted object's version for {TOMBSTONE_MS // 1000} s, so a resend "
            "could bring back an object deleted meanwhile; let the feed list again (a relist "
            "sends what is current)"
        )
    if age <= MAX_RETRY_WINDOW:
        return None
    return (
        f"made or first sent {age:.0f} s ago, over {MAX_RETRY_WINDOW:g} s: Redis remembers ids "
        f"for {COMMAND_ID_TTL_MS // 1000} s, so a resend could be applied twice; check what "
        "was applied (cache.get_pod, get_node_info, verify) and send what is missing as new "
        "commands"
    )


@dataclass(frozen=True)
class RetryPolicy:
    """Send again up to ``attempts`` times, for at most ``within`` seconds in all, waiting
    ``first_delay`` seconds before the first resend and doubling up to ``max_delay``."""

    attempts: int = 30
    within: float = 15.0
    first_delay: float = 0.05
    max_delay: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise ValidationError("retry policy", "attempts", f"{self.attempts!r} is not an int")
        if self.attempts < 0:
            raise ValidationError("retry policy", "attempts", f"{self.attempts} must be >= 0")
        for name in ("within", "first_delay", "max_delay"):
            value = getattr(self, name)
            finite = isinstance(value, int | float) and math.isfinite(value)
            if isinstance(value, bool) or not finite or value < 0:
                raise ValidationError(
                    "retry policy", name, f"{value!r} must be a finite number of seconds >= 0"
                )
            if value > MAX_RETRY_WINDOW:
                raise ValidationError(
                    "retry policy",
                    name,
                    f"{value!r} s is over {MAX_RETRY_WINDOW:g} s: Redis remembers a command id "
                    f"for {COMMAND_ID_TTL_MS // 1000} s, and a command resent later than that "
                    "would be applied twice",
                )

    def delays(self) -> Iterator[float]:
        """The waits before each resend; exhausted when the policy gives up."""
        deadline = time.monotonic() + self.within
        delay = self.first_delay
        for _ in range(self.attempts):
            if time.monotonic() + delay > deadline:
                return
            yield delay
            delay = min(self.max_delay, delay * 2)


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(attempts=0, within=0.0)


T = TypeVar("T")


def call_with_retries(
    call: Callable[[], T],
    delays: Iterator[float],
    on_retry: Callable[[Exception, float], None],
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """``call()``, sent again after each :data:`RETRYABLE` error while ``delays`` lasts (waiting
    each delay; ``on_retry(error, delay)`` first, to log and re-route); the last error is
    raised when ``delays`` is exhausted. The one retry loop of single commands, reads of the
    workers and the expiry worker's reconnection (a batch resends whole groups, with the same
    delays)."""
    while True:
        try:
            return call()
        except RETRYABLE as error:
            delay = next(delays, None)
            if delay is None:
                raise
            on_retry(error, delay)
            sleep(delay)


async def call_with_retries_async(
    call: Callable[[], Awaitable[T]],
    delays: Iterator[float],
    on_retry: Callable[[Exception, float], Awaitable[None]],
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """:func:`call_with_retries` for coroutines: the same rule, waiting with
    ``asyncio.sleep`` so the rest of the event loop runs meanwhile."""
    while True:
        try:
            return await call()
        except RETRYABLE as error:
            delay = next(delays, None)
            if delay is None:
                raise
            await on_retry(error, delay)
            await sleep(delay)


def backoff(first: float, maximum: float, until: Callable[[], bool]) -> Iterator[float]:
    """Delays without end, doubling from ``first`` to ``maximum``, until ``until()`` is true:
    for workers that must outlast any outage (a policy with a limit is for callers who wait)."""
    delay = first
    while not until():
        yield delay
        delay = min(maximum, delay * 2)
