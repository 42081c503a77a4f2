"""``Store``: one cache's Redis, and the only place that talks to it about commands.

It holds what every call needs: the cache's keys, the route to the server that holds them
(the primary of the cache's slot in a Cluster), this client's replica name, the retry policy
and the ``WAIT`` setting. Every function call goes out through it with one argument
convention, ``FCALL sc_<command> 1 <prefix> <replica> <command id> <args...>`` (reads:
``FCALL_RO sc_<read> 1 <prefix> "" "" <args...>``), through one retry loop, with the library
reloaded when a server lost it and error replies turned into :class:`CacheError`\\ s. The
kube-style :class:`~schedcache.cache.Cache`, batches, snapshots, the node tree, leases,
checkpoints, verify and the workers all sit on a Store; none of them talks to Redis about
commands any other way.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import redis

from schedcache.errors import (
    CacheError,
    NotPermitted,
    NotReplicated,
    RetriesExhausted,
    ValidationError,
)
from schedcache.store import commands, metrics, pinned
from schedcache.store.commands import Command, sent_id
from schedcache.store.connection import url_problem
from schedcache.store.eviction import EvictionCheck, check_eviction
from schedcache.store.keys import Keys
from schedcache.store.library import (
    ensure_loaded,
    function_name,
    is_missing_function,
    library_write_commands,
)
from schedcache.store.replies import translate
from schedcache.store.retry import (
    DEFAULT_RETRY,
    RETRYABLE,
    TOPOLOGY_CHANGED,
    RetryPolicy,
    call_with_retries,
    too_late_to_resend,
)
from schedcache.store.routing import (
    PRIMARY,
    ReplicaRoute,
    SlotRoute,
    is_cluster,
    read_from_setting,
)
from schedcache.store.routing import (
    Client as Client,  # re-exported: the CLI and the facade name it from here
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# Words the Lua side stores in a replica's place: "-" is the pod record's "no claimer".
RESERVED_REPLICAS = frozenset({"-"})
MAX_REPLICA_LENGTH = 253  # a DNS name: pod names and hostnames fit


def is_embedded(client: object) -> bool:
    """Whether ``client`` is the embedded backend's (fakeredis, sync or asyncio: no replicas,
    no WAIT). fakeredis is imported only where the embedded backend is used (start-up time):
    while it is not, no client can be one of its."""
    fake = sys.modules.get("fakeredis")
    return fake is not None and isinstance(client, fake.FakeRedis | fake.FakeAsyncRedis)


def replica_name(replica: object, subject: str) -> str:
    """``replica`` checked: "" (anonymous, no lease) or a word the pod record, the event stream
    and the key ``lease:<replica>`` hold unambiguously. ``-`` is refused: it is the record's
    "no claimer" marker, so a replica of that name would lose its lease protection."""
    if not isinstance(replica, str):
        raise ValidationError(subject, "replica", f"{replica!r} is not a string")
    if replica in RESERVED_REPLICAS:
        raise ValidationError(
            subject, "replica", f"{replica!r} is reserved (the pod record's no-claimer marker)"
        )
    # Not printable: control characters, and lone surrogates (which UTF-8 cannot encode).
    if replica and (not replica.isprintable() or replica.split() != [replica]):
        raise ValidationError(
            subject, "replica", f"{replica!r} must be printable, without whitespace"
        )
    if len(replica) > MAX_REPLICA_LENGTH:
        raise ValidationError(
            subject, "replica", f"{len(replica)} characters, over {MAX_REPLICA_LENGTH}"
        )
    return replica


class StoreCore:
    """What the sync :class:`Store` and the asyncio ``AsyncStore`` share, with no I/O: the
    cache's keys, the replica name, the retry and ``WAIT`` settings (checked once), the
    ``FCALL`` argument convention, and how a reply, an error reply or a give-up becomes the
    result or the :class:`CacheError` a caller sees. The transports only send and wait."""

    def __init__(
        self,
        client: Any,
        name: str = "default",
        *,
        replica: str = "",
        retry: RetryPolicy = DEFAULT_RETRY,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        read_from: str = PRIMARY,
    ) -> None:
        self.keys = Keys(name)
        subject = f"cache {name}"
        self.client = client
        self.name = name
        self.replica = replica_name(replica, subject)
        if not isinstance(retry, RetryPolicy):
            raise ValidationError(subject, "retry", f"expected a RetryPolicy, got {retry!r}")
        self.retry = retry
        if type(wait_replicas) is not int or wait_replicas < 0:
            raise ValidationError(subject, "wait_replicas", f"{wait_replicas!r} must be >= 0")
        self.wait_replicas = wait_replicas
        wait_timeout = commands.seconds(
            wait_timeout, subject=subject, field="wait_timeout", maximum=commands.MAX_TIMEOUT
        )
        self.wait_timeout_ms = str(round(wait_timeout * 1000))
        if wait_replicas and int(self.wait_timeout_ms) < 1:  # WAIT n 0 blocks for ever
            raise ValidationError(
                subject, "wait_timeout", f"{wait_timeout!r} must be at least 0.001 s"
            )
        if wait_replicas and is_embedded(client):
            raise ValidationError(
                subject,
                "wait_replicas",
                "the embedded fakeredis has no replicas (and no WAIT): use 0, or a real Redis",
            )
        # Snapshot reads from a replica (docs/storage.md); checked here, routed by the transport.
        self.read_from = read_from
        self.reads_replica, self.replica_url = read_from_setting(read_from, subject)
        if self.replica_url is not None:
            # Read as connect() reads a URL (found in review: redis-py's errors for a replica URL
            # whose password breaks it apart quoted a piece of the password).
            problem = url_problem(self.replica_url)
            if problem is not None:
                raise ValidationError(subject, "read_from", problem)
        # The library's commands this client's Redis user may not run (sc_permitted), read
        # when the store opens: writes are refused while any is missing.
        self.denied: tuple[str, ...] = ()
        # Catch-ups read the head by a plain transaction (store/plain_head.py) until the
        # user's rules refuse it.
        self.plain_heads = True
        self.may_read_config = False  # whether the user may run CONFIG GET (eviction check)
        if self.reads_replica and is_embedded(client):
            raise ValidationError(
                subject,
                "read_from",
                "the embedded fakeredis has no replicas: use 'primary', or a real Redis",
            )

    # -- the FCALL convention ---------------------------------------------------------------

    def function_args(self, name: str, command_id: str, args: Sequence[Any]) -> list[Any]:
        """``FCALL``'s arguments after the command word: ``sc_<name> 1 <prefix> <replica> <id>
        <args...>``, as ``lua/_register.lua`` reads them."""
        return [function_name(name), 1, self.keys.prefix, self.replica, command_id, *args]

    def read_args(self, name: str, *args: Any) -> list[Any]:
        """``FCALL_RO``'s arguments for a read: no replica, no command id."""
        return [function_name(name), 1, self.keys.prefix, "", "", *args]

    # -- outcomes ---------------------------------------------------------------------------

    def permitted_args(self) -> list[Any]:
        """``FCALL_RO``'s arguments for ``sc_permitted``: the commands this user lacks."""
        return [function_name("permitted"), 1, self.keys.prefix]

    def note_permitted(self, reply: Any) -> None:
        """``sc_permitted``'s reply: the library's commands this user lacks, and whether it may
        run CONFIG GET (empty, and False, for a user that may not even ask)."""
        denied, config = reply if reply else ([], 0)
        self.may_read_config = bool(int(config))
        self.denied = tuple(sorted(d.decode() if isinstance(d, bytes) else str(d) for d in denied))
        if not self.denied:
            return
        if library_write_commands() <= {name.upper() for name in self.denied}:
            # A reader by design (docs/security.md's reader role): nothing to warn about
            # (found in review: every command of a reader logged this warning).
            log.debug("cache %s: this Redis user writes nothing: a reader", self.name)
            return
        log.warning(
            "cache %s: this Redis user may not run %s, which the library's functions call: "
            "its writes are refused (`schedcache acl %s --role ROLE` prints the rules)",
            self.name,
            " ".join(self.denied),
            self.name,
        )

    def check_permitted(self, name: str) -> None:
        """Refuse (nothing sent) a write when this user lacks a command the functions call:
        Redis would deny it inside the function, possibly after its first write."""
        if self.denied:
            raise NotPermitted(
                f"sc_{name} on cache {self.name}: this Redis user may not run "
                f"{', '.join(self.denied)}, which the library's functions call, so no write is "
                f"sent; grant the rules `schedcache acl {self.name} --role ROLE` prints "
                "(docs/security.md)"
            )

    def check_sendable(self, command: Command) -> None:
        """Refuse (nothing sent) a command with an id too old for Redis to still remember it
        (a versioned one, sent without, only past ``retry.MAX_VERSIONED_RESEND``:
        ``retry.too_late_to_resend``), or one this user's ACL rules would stop halfway."""
        self.check_permitted(command.name)
        late = too_late_to_resend((command,), command.created)
        if late is not None:
            raise ValidationError(command.subject, f"sc_{command.name} command id", late)

    def gave_up(
        self, command: Command, attempts: int, started: float, error: Exception
    ) -> RetriesExhausted:
        """The error for a command Redis never answered, however often it was sent."""
        return RetriesExhausted(
            f"sc_{command.name} {command.subject} (command id {command.id}): no answer "
            f"from Redis after {attempts} attempts in {time.monotonic() - started:.1f} s "
            f"({type(error).__name__}: {error}); it may or may not have been applied: run "
            "the same command again to settle it exactly once",
            command=command,
        )

    def refused(self, command: Command, error: redis.ResponseError) -> Exception:
        """The :class:`CacheError` for an error reply (counted as not applied)."""
        translated = translate(command.name, command.subject, error)
        if isinstance(translated, CacheError):
            metrics.count_command(command.name, applied=False)
        return translated

    def applied(self, command: Command, reply: Any) -> Any:
        metrics.count_command(command.name, applied=True)
        return reply

    def check_replicated(self, replicas: Any, what: str, reply: Any = None) -> None:
        """Raise :class:`NotReplicated` if ``WAIT`` answered fewer than ``wait_replicas``."""
        if isinstance(replicas, Exception):
            raise replicas
        if int(replicas) < self.wait_replicas:
            raise NotReplicated(
                f"{what}: applied on the primary, but only {int(replicas)} of "
                f"{self.wait_replicas} replicas confirmed it within {self.wait_timeout_ms} ms",
                reply,
            )

    def resending(self, what: str, error: Exception) -> bool:
        """Log a resend; True when the route must be asked again (a failover may have moved
        the primary)."""
        log.warning("%s: %s; sending again", what, error)
        return isinstance(error, TOPOLOGY_CHANGED)


class Store(StoreCore):
    """One named cache on a Redis server (or Cluster, or Sentinel-managed primary).

    ``replica`` names this client in every event it writes; ``retry`` says how often and how
    long a command is sent again when Redis does not answer (every command carries an id, or
    its object's version for a feeder's change, so a resend is never applied twice);
    ``wait_replicas``/``wait_timeout``: each write is followed by ``WAIT`` and raises
    :class:`NotReplicated` when fewer replicas confirmed it in time.
    """

    def __init__(self, client: Client, name: str = "default", **options: Any) -> None:
        """``options``: ``replica``, ``retry``, ``wait_replicas``, ``wait_timeout``,
        ``read_from``."""
        super().__init__(client, name, **options)
        self.client: Client = client
        self.route = SlotRoute(client, self.keys.prefix)
        # Where snapshot updates read (None: the primary); nothing else reads there.
        self.replicas = (
            ReplicaRoute(client, self.keys.prefix, self.replica_url) if self.reads_replica else None
        )
        ensure_loaded(self.route.get())
        try:
            permitted = self.read(lambda: self.route.get().fcall_ro(*self.permitted_args()))
        except redis.exceptions.NoPermissionError:  # not this user's cache: every call says so
            permitted = None
        self.note_permitted(permitted)

    @property
    def store(self) -> Store:
        """The Store itself: whatever takes a cache or its store (:func:`store_of`)."""
        return self

    def eviction(self) -> EvictionCheck:
        """Whether the server may evict this cache's keys (``maxmemory-policy``), read only
        when this user may run CONFIG GET."""
        return check_eviction(self.server(), self.may_read_config)

    def server(self) -> redis.Redis:
        """The plain client of the server holding the cache (in a Cluster, its slot's
        primary): for pipelines and transactions on the cache's keys."""
        return self.route.get()

    # -- reads through the library ----------------------------------------------------------

    def read_function(self, name: str, *args: Any) -> Any:
        """``FCALL_RO sc_<name>`` (a read: no replica, no command id), through :meth:`read`.
        On one server, on this thread's connection (:mod:`schedcache.store.pinned`); a
        Cluster client routes it by its key (and follows a moved slot by itself)."""
        words = self.read_args(name, *args)
        if is_cluster(self.client):
            return self.read(lambda: self.client.fcall_ro(*words))
        return self.read(lambda: pinned.reply(self.route.get(), "FCALL_RO", *words))

    # -- commands ---------------------------------------------------------------------------

    def run(self, command: Command) -> Any:
        """Run one command; raise the matching :class:`CacheError` if it is rejected.

        Running the same command again settles it after :class:`RetriesExhausted`, but only
        while Redis surely remembers its id: a command made longer ago than
        ``retry.MAX_RETRY_WINDOW`` is refused (:class:`ValidationError`, nothing sent). A
        feeder's versioned change (``commands.VERSIONED``) goes without its id: sent again
        once applied, it is answered ``dropped repeated``, not with its first outcome, and it
        is refused only past ``retry.MAX_VERSIONED_RESEND``."""
        self.check_sendable(command)
        started, resends = time.monotonic(), 0

        def before_resend(error: Exception, _: float) -> None:
            nonlocal resends
            resends += 1
            self._before_resend(f"sc_{command.name}", error)

        try:
            reply = call_with_retries(
                lambda: self._call_reloading(command), self.retry.delays(), before_resend
            )
        except RETRYABLE as error:
            raise self.gave_up(command, resends + 1, started, error) from error
        except redis.ResponseError as error:
            raise self.refused(command, error) from None
        return self.applied(command, reply)

    def retrying(self, call: Callable[[], T], what: str) -> T:
        """``call()`` (a read or a transaction of its own) under the retry policy, re-routed
        after a failover; the last error when the policy gives up."""
        return call_with_retries(
            call, self.retry.delays(), lambda error, _: self._before_resend(what, error)
        )

    def _before_resend(self, what: str, error: Exception) -> None:
        if self.resending(what, error):
            self.route.refresh()

    def _call_reloading(self, command: Command) -> Any:
        try:
            return self._call(command)
        except redis.ResponseError as error:
            if not is_missing_function(error):
                raise
        self.reload_library()
        return self._call(command)

    def _call(self, command: Command) -> Any:
        """One ``FCALL`` (and its ``WAIT``) on this thread's connection to the server
        (:mod:`schedcache.store.pinned`: redis-py's per-call pool round costs more CPU than
        Redis spends on the command)."""
        fcall = ("FCALL", *self.function_args(command.name, sent_id(command), command.args))
        if not self.wait_replicas:
            (reply,) = pinned.call(self.route.get(), fcall)
            replicas = None
        else:
            wait = ("WAIT", self.wait_replicas, self.wait_timeout_ms)
            reply, replicas = pinned.call(self.route.get(), fcall, wait)
        if isinstance(reply, Exception):
            raise reply
        if replicas is not None:
            self.check_replicated(replicas, f"sc_{command.name} {command.subject}", reply)
        return reply

    def reload_library(self) -> None:
        """The server lost the library (restarted without persistence, or flushed): load it."""
        log.warning("schedcache functions missing on the server; loading them again")
        ensure_loaded(self.route.get())

    # -- reads ------------------------------------------------------------------------------

    def read(self, call: Callable[[], T]) -> T:
        """Run a read that uses the library's read functions, reloading the library once if the
        server lost it; a corrupt key it meets raises :class:`CorruptRecord`."""
        try:
            return call()
        except redis.ResponseError as error:
            if not is_missing_function(error):
                raise translate("read", f"cache {self.name}", error) from None
        ensure_loaded(self.route.get())
        try:
            return call()
        except redis.ResponseError as error:
            raise translate("read", f"cache {self.name}", error) from None


class HasStore(Protocol):
    """Anything that stands for a cache's Store (a ``Cache``): what the workers, retention and
    metrics accept, without importing the facade."""

    @property
    def store(self) -> Store: ...


def store_of(target: Store | HasStore) -> Store:
    """The Store of a ``Cache`` or a Store."""
    return target.store


def log_skipped(cache: str, action: str, uids: list[bytes]) -> None:
    """Pods whose stored record is corrupt are skipped by the expiry and lease sweeps (so the
    rest goes on) and said here; their uids name the keys to inspect (``pod:<uid>``)."""
    if uids:
        metrics.SKIPPED_CORRUPT.labels(cache=cache).inc(len(uids))
        log.error(
            "cache %s: could not %s %d pods with a corrupt record: %s",
            cache,
            action,
            len(uids),
            ", ".join(repr(uid.decode(errors="replace")) for uid in uids[:20]),
        )


def sweep_reply(
    cache: str, action: str, reply: object, limit: int
) -> tuple[list[str], list[bytes], bool]:
    """The uids an expiry call (``sc_cleanup_assumed_pods``, ``sc_forget_lapsed``) settled,
    those it skipped as corrupt (logged and counted here), and whether more are due: it hit
    ``limit``, or stopped at its byte bound (the reply's third item, 1; a library older than
    that bound answers two items)."""
    assert isinstance(reply, list) and len(reply) in (2, 3), reply
    done, skipped = list(reply[0]), list(reply[1])
    log_skipped(cache, action, skipped)
    more = len(done) + len(skipped) >= limit or (len(reply) == 3 and int(reply[2]) == 1)
    return [uid.decode() for uid in done], skipped, more
