"""How long a command is sent again when Redis does not answer.

Every command carries an id (``lua/_command_ids.lua``), so sending it again after a lost reply is
safe: if the first send ran, Redis answers with its first outcome. That makes a generous policy
cheap, and failovers need one: Redis Cluster promotes a replica after ``cluster-node-timeout``
plus an election, Sentinel after ``down-after-milliseconds`` plus its own election, and a
restarted server refuses commands while it loads its AOF. Set ``within`` above that time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from redis.exceptions import (
    ClusterDownError,
    ConnectionError,
    MovedError,
    ReadOnlyError,
    TimeoutError,
    TryAgainError,
)

from schedcache.errors import ValidationError

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
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValidationError(
                    "retry policy", name, f"{value!r} must be a number of seconds >= 0"
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
