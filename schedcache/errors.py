"""Exceptions raised by schedcache.

Every error a caller can act on is a subclass of :class:`CacheError`. A command that raises
one of them has written nothing to Redis: the Lua functions check every precondition before
their first write, so "rejected" always means "the cache is exactly as before".

Messages name the object (``pod <namespace>/<name> (uid <uid>)`` or ``node <name>``) and, for
transitions, the state that forbade them, because the reader is usually an operator looking
at a log line with no other context.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError


class CacheError(Exception):
    """Base class of every schedcache error."""


class ValidationError(CacheError, ValueError):
    """Bad input: a manifest, quantity, selector or argument that cannot be used.

    ``obj`` names the object (``pod default/web-0``), ``field`` the dotted path inside it.
    """

    def __init__(self, obj: str, field: str, reason: str) -> None:
        self.obj = obj
        self.field = field
        self.reason = reason
        where = f"{obj}: {field}" if field else obj
        super().__init__(f"{where}: {reason}")


class CorruptRecord(CacheError, ValueError):
    """A value read back from Redis is not what schedcache writes there: not msgpack, over its
    size limit, or not the expected shape. ``what`` names the key, event or object; nothing
    is decoded past the limit (see ``events.Limits``)."""

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"{what}: {reason}")


class RedisFull(CacheError):
    """The Redis server reached its ``maxmemory`` and refuses writes (its ``OOM`` reply). A
    function that may write is refused before it runs, so nothing was changed."""


class TransitionError(CacheError):
    """A command that the pod's or node's current state does not allow."""


class PodAlreadyExists(TransitionError):
    """``assume_pod`` or ``add_pod`` of a pod the cache already holds in that state."""


class PodNotFound(TransitionError, KeyError):
    """The pod is not in the cache."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PodNotAssumed(TransitionError):
    """``forget_pod`` of a pod that is not assumed (absent or already added)."""


class InvalidTransition(TransitionError):
    """Any other illegal transition, e.g. updating an assumed pod, or a node mismatch."""


class NodeNotFound(TransitionError, KeyError):
    """The node is not in the cache (or is only a ghost where a live node is needed)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NodeAlreadyRemoved(NodeNotFound):
    """The node was removed already: only its pods keep it in the cache (a ghost), until the
    last of them goes."""


class FitConflict(TransitionError):
    """``assume_pod(check_fit=True)``: the node no longer has room (another replica was first),
    or, with ``expect_generation``, it changed since the snapshot the replica decided on.

    ``node`` names the node, ``reasons`` what was short (``cpu``, ``memory``, ``pods``,
    ``port:TCP/80``, a scalar resource name, ``stale`` or ``node-missing``).
    """

    def __init__(self, message: str, node: str = "", reasons: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.node = node
        self.reasons = reasons


class SchemaMismatch(CacheError):
    """The Lua library on the server is not the version this client was built for."""


class LibraryNotLoaded(CacheError):
    """The server lacks this version of the Lua library, and this Redis user may not load it
    (an ACL user without ``FUNCTION LOAD``): an admin runs ``schedcache scripts``."""


class NotPermitted(CacheError):
    """This Redis user may not run a command the library's functions call (its ACL rules lack
    it): the write is refused before it is sent, since a function denied a command after its
    first write would leave that write behind. ``schedcache acl`` prints the rules a role
    needs."""


class RetriesExhausted(CacheError, RedisConnectionError):
    """Redis did not answer a command, even after resending it as the retry policy allows.

    The command may or may not have been applied. Running the same :class:`Command` again
    (same id) once Redis is back settles it exactly once: it is applied if it was not, and
    answered with its first outcome if it was. From a batch, ``unsettled`` holds its groups of
    commands, to pass to the same batch's ``settle()`` for the same effect (a new batch settles
    the groups too, but not the judged claims the batch made for bare claims Redis refused as
    ``unchecked``: the batch keeps those, and its settle sends them again); from one command,
    ``command`` is that command, to pass to ``cache.run()`` (the scheduler settles its claims
    so: the answer says whether its claim landed, where a record cannot tell whose it is).
    """

    def __init__(
        self,
        message: str,
        unsettled: Sequence[Sequence[Any]] | None = None,
        command: Any = None,
    ) -> None:
        super().__init__(message)
        self.unsettled: list[Any] = list(unsettled or [])  # the groups as sent (SentGroup)
        self.command: Any = command  # a store.commands.Command


class NotReplicated(CacheError):
    """The command was applied on the primary, but fewer replicas than ``wait_replicas``
    confirmed it within ``wait_timeout``: a failover now could lose it. ``reply`` is the
    command's reply."""

    def __init__(self, message: str, reply: object = None) -> None:
        super().__init__(message)
        self.reply = reply


class HistoryCompacted(CacheError):
    """The stream before this point was trimmed away by ``compact()``."""


class PolicyError(CacheError):
    """A what-if placement policy that cannot be loaded, raised, or answered something other
    than a node name or None."""


class BatchFailed(CacheError):
    """Whole ``sc_batch`` calls failed (a Redis error, not a rejected command). ``results`` has
    the outcome (a ``BatchResult``) of every command that ran; ``failures`` the failed groups
    of commands with their errors. A group that ran but was not confirmed by enough replicas
    (:class:`NotReplicated`) is in both. A Lua runtime error may have applied part of its
    group: ``verify()`` tells."""

    def __init__(self, results: list[Any], failures: list[tuple[list[Any], Exception]]) -> None:
        count = sum(len(group) for group, _ in failures)
        super().__init__(
            f"{len(failures)} batch call(s) of {count} commands failed: {failures[0][1]}"
        )
        self.results = results
        self.failures = failures


# What a log line keeps of an error's message.
REASON_CHARS = 200


def log_reason(error: BaseException) -> str:
    """An error's first line for one log line, at most ~REASON_CHARS characters: a longer one
    keeps its start and its end, where a wrapped error says why (urllib3's ``Max retries
    exceeded ... (Caused by NewConnectionError(...: Connection refused'))``: cut at its start
    it lost the reason; found in review)."""
    lines = str(error).strip().splitlines()
    if not lines:
        return type(error).__name__
    line = lines[0]
    if len(line) <= REASON_CHARS:
        return line
    return f"{line[: REASON_CHARS // 2]} ... {line[-(REASON_CHARS // 2 - 5) :]}"
