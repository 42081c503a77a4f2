"""``CommandBatch``: many commands in few round trips, for informer ingest and bulk loads.

Commands are grouped into ``sc_batch`` calls of ``chunk_size`` commands. A group is sent as soon
as it is full, on a connection the batch keeps until :meth:`execute`, and replies are read
later, so Redis applies one group while Python builds the next. Each command is still
all-or-nothing on its own and the commands are applied in the order they were added; one that
is rejected does not stop the others. :meth:`execute` sends the rest, waits for every reply and
returns one :class:`BatchResult` per command.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

from redis import ConnectionPool, ResponseError
from redis.connection import Connection

from schedcache.errors import (
    BatchFailed,
    CacheError,
    FitConflict,
    NotReplicated,
    PodAlreadyExists,
    RetriesExhausted,
    ValidationError,
)
from schedcache.model.values import Node, Pod
from schedcache.store import commands, metrics
from schedcache.store.commands import Command, judged_reply, pod_subject, sent_with_id
from schedcache.store.library import is_missing_function
from schedcache.store.replies import UNCHECKED, error_from_reply, translate
from schedcache.store.retry import RETRYABLE, too_late_to_resend
from schedcache.store.store import HasStore, Store, StoreCore, store_of

log = logging.getLogger(__name__)
# Errors in a reply that mean the group was not run (send it again), as opposed to errors of
# the group itself (a Lua runtime error, which ``BatchFailed`` reports).
REFUSED = tuple(error for error in RETRYABLE if issubclass(error, ResponseError))

# Groups sent but not yet answered before the batch stops to read a reply: bounds the memory
# that unread replies take on both sides.
WINDOW = 8
# Commands per sc_batch call: one call holds Redis for its whole run (~10-40 us a command), and
# lua/batch.lua refuses more (MAX_BATCH_COMMANDS).
MAX_CHUNK_SIZE = 1_000
# Argument bytes per sc_batch call (lua/batch.lua's MAX_BATCH_BYTES): a group is cut before a
# command that would pass it (200 pods of 0.8 MiB in one call would hold Redis for ~0.3 s).
MAX_GROUP_BYTES = 4 * 1024 * 1024


def command_bytes(command: Command) -> int:
    """The bytes ``command`` adds to an ``sc_batch`` call's arguments, at least as many as
    lua/batch.lua counts (its name, its argument count, its arguments)."""
    total = len(command.name) + 8
    for arg in command.args:
        if isinstance(arg, bytes):
            total += len(arg)
        elif isinstance(arg, str):
            total += len(arg) if arg.isascii() else len(arg.encode())
        else:
            total += 24  # an integer's digits
    return total


def split_groups(commands: list[Command], chunk_size: int) -> list[list[Command]]:
    """``commands`` in ``sc_batch`` groups of at most ``chunk_size`` commands and
    ``MAX_GROUP_BYTES`` bytes, in order."""
    groups: list[list[Command]] = []
    group: list[Command] = []
    size = 0
    for command in commands:
        cost = command_bytes(command)
        if group and (len(group) >= chunk_size or size + cost > MAX_GROUP_BYTES):
            groups.append(group)
            group, size = [], 0
        group.append(command)
        size += cost
    if group:
        groups.append(group)
    return groups


class SentGroup(list[Command]):
    """One ``sc_batch`` call's commands, with the ``time.monotonic()`` of its first send: after
    ``retry.MAX_RETRY_WINDOW`` it is never sent again (Redis may have forgotten the ids),
    unless it is made of versioned commands only (sent without an id, resent for up to
    ``retry.MAX_VERSIONED_RESEND``: an hour less a minute).
    ``RetriesExhausted.unsettled`` holds these."""

    def __init__(self, commands: list[Command], first_sent: float) -> None:
        super().__init__(commands)
        self.first_sent = first_sent


def first_sent(group: list[Command]) -> float:
    """When ``group`` was first sent; for a plain list, when its oldest command was made (no
    send of it is earlier)."""
    if isinstance(group, SentGroup):
        return group.first_sent
    return min((command.created for command in group), default=time.monotonic())


def too_old_to_resend(group: list[Command]) -> str | None:
    """Why ``group`` must not be sent again (Redis may have forgotten its ids), or None (for a
    group of versioned commands only, sent without an id, up to ``retry.MAX_VERSIONED_RESEND``)."""
    return too_late_to_resend(group, first_sent(group))


@dataclass(frozen=True)
class BatchResult:
    """The outcome of one command of a batch: its reply, or the error it was rejected with."""

    command: Command
    reply: Any = None
    error: CacheError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class BareClaim:
    """A bare fit-checked claim of a batch, as ``execute()`` claims it again judged when Redis
    refused it as ``unchecked`` (``Cache.judged_claim(pod, candidates, deadline)``)."""

    pod: Pod
    candidates: tuple[str, ...] = ()
    deadline: float | None = None


@runtime_checkable
class Claimant(Protocol):
    """What a batch's ``assume_pod`` and ``finish_binding`` need of their cache: the ttl of
    finished bindings and the replica's lease (``Cache`` is one)."""

    @property
    def ttl(self) -> float: ...

    @property
    def lease_to_take(self) -> float: ...

    def hold_lease(self) -> None: ...


class BatchBuilder:
    """The commands a batch takes, by kube-style name (``batch.add_pod(pod)``), shared by the
    sync :class:`CommandBatch` and ``schedcache.aio.AsyncCommandBatch``: each shortcut builds the
    command with ``schedcache.store.commands`` and passes it to :meth:`add`."""

    claimant: Claimant | None
    # Bare fit-checked claims (no rules) by command id: Redis refuses one as `unchecked` while
    # pods with required anti-affinity are placed, and execute() claims it again judged.
    bare_claims: dict[str, BareClaim]
    # Judged claims Redis did not answer, by their bare claim's id: a settle sends them again
    # as they were (judged anew, one that landed would be refused as already there).
    judged_unanswered: dict[str, Command]
    cache: Any  # a cache (with judged_claim) or a bare store

    def add(self, command: Command) -> Self:
        raise NotImplementedError

    def assume_pod(
        self,
        pod: Pod,
        check_fit: bool = False,
        expect_generation: int | None = None,
        rules: tuple[int, str, str, str, str] | None = None,
        candidates: Sequence[str] = (),
        deadline: float | None = None,
    ) -> Self:
        """``rules``: with ``check_fit``, ``schedcache.views.claims.claim_context(snap, pod)``
        (the inter-pod rules judged on ``snap``, re-checked in the batch's script after the
        commands before it). ``candidates``: with ``check_fit`` and no ``rules``, up to seven
        more nodes, best first, as ``Cache.assume_pod`` takes them (the reply is then
        ``[generation, node]``: ``views.claims.taken_node``). ``deadline``: seconds; the claim
        gets that deadline in the same command (``sc_timed_claim``), as ``Cache.assume_pod``
        sets it."""
        claimant = self._claimant("assume_pod")
        candidates = commands.candidate_names(pod, candidates)
        if candidates and rules is not None:
            raise ValidationError(
                pod_subject(pod),
                "candidates",
                "a batch's claim takes candidates without rules only (each candidate's rules "
                "are judged apart: Cache.assume_pod)",
            )
        since, reads, domains, incarnation, seen = rules or (None, "", "", "", "")
        claim = commands.assume_pod(
            pod,
            check_fit,
            expect_generation,
            claimant.lease_to_take,
            since,
            reads,
            domains,
            incarnation,
            seen,
            [(node, "", "") for node in candidates],
        )
        command = commands.timed_claim(claim, deadline)
        if check_fit and expect_generation is None and rules is None:
            self.bare_claims[command.id] = BareClaim(pod, tuple(candidates), deadline)
        self.claimed(claimant)
        return self.add(command)

    def claimed(self, claimant: Claimant) -> None:
        """A claim was added: heartbeat the replica's lease from now on."""
        claimant.hold_lease()

    def finish_binding(self, pod: Pod, now: float | None = None) -> Self:
        return self.add(commands.finish_binding(pod, now, self._claimant("finish_binding").ttl))

    def forget_pod(self, pod: Pod) -> Self:
        return self.add(commands.forget_pod(pod))

    def add_pod(self, pod: Pod) -> Self:
        return self.add(commands.add_pod(pod))

    def update_pod(self, old: Pod, new: Pod) -> Self:
        return self.add(commands.update_pod(old, new))

    def remove_pod(self, pod: Pod) -> Self:
        return self.add(commands.remove_pod(pod))

    def add_node(self, node: Node) -> Self:
        return self.add(commands.add_node(node))

    def update_node(self, old: Node | None, new: Node) -> Self:
        return self.add(commands.update_node(old, new))

    def remove_node(self, node: Node | str) -> Self:
        return self.add(commands.remove_node(node))

    def _claimant(self, method: str) -> Claimant:
        if self.claimant is None:
            raise ValidationError(
                "batch",
                method,
                "a batch of a bare Store has no ttl or lease: use cache.batch(), or add() a "
                "command made with schedcache.store.commands",
            )
        return self.claimant


class CommandBatch(BatchBuilder):
    """Collects commands and streams them to Redis in groups; see the module docstring.

    ``cache``: a ``Cache`` (``cache.batch()`` is the usual way), or a bare :class:`Store`, whose
    batches take commands with :meth:`add` only (they have no ttl or lease for the shortcuts)."""

    def __init__(self, cache: Store | HasStore, chunk_size: int = 200) -> None:
        check_chunk_size(chunk_size)
        self.cache = cache  # as given: a Cache, or a Store
        self.store = store_of(cache)
        self.claimant = cache if isinstance(cache, Claimant) else None
        self.bare_claims = {}
        self.judged_unanswered = {}
        self.chunk_size = chunk_size
        self.group: list[Command] = []
        self.group_bytes = 0  # command_bytes of self.group
        self.in_flight: deque[tuple[str, SentGroup]] = deque()
        self.sent: list[SentGroup] = []  # every group since the last execute(), in order
        self.answered: list[tuple[str, SentGroup, Any, Any]] = []
        self.connection: Connection | None = None
        self.pool: ConnectionPool | None = None
        self.count = 0

    def __len__(self) -> int:
        """Commands added since the last :meth:`execute`."""
        return self.count

    def __enter__(self) -> CommandBatch:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.execute()
        else:
            self.close()

    def add(self, command: Command) -> Self:
        self.store.check_permitted("batch")
        cost = command_bytes(command)
        if self.group and self.group_bytes + cost > MAX_GROUP_BYTES:
            self._send_group()
        self.group.append(command)
        self.group_bytes += cost
        self.count += 1
        if len(self.group) >= self.chunk_size:
            self._send_group()
        return self

    def settle(self, groups: list[list[Command]]) -> list[BatchResult]:
        """Send ``groups`` again as they were (``RetriesExhausted.unsettled`` of a batch that
        gave up) and return the outcome of every command: a group Redis applied before is
        answered with its first outcome, the others are applied now — exactly once either way
        (a group of a feeder's versioned changes only goes without an id: those it applied are
        answered ``dropped repeated``, and one Redis rejected is tried again, as a second
        feeder's copy would be).
        Commands added since and not yet sent go after them (found in review: they were
        dropped). A group with an id first sent more than ``MAX_RETRY_WINDOW`` seconds ago is
        refused (:class:`ValidationError`, nothing sent): Redis may have forgotten its ids. A
        group of versioned commands only has none and is sent again for up to
        ``retry.MAX_VERSIONED_RESEND`` (an hour less a minute)."""
        for index, group in enumerate(groups):
            reason = too_old_to_resend(group)
            if reason is not None:
                raise ValidationError("batch settle", f"unsettled[{index}]", reason)
        waiting, waiting_bytes = self.group, self.group_bytes
        try:
            for group in groups:
                self.group = list(group)
                self.count += len(group)
                self._send_group(first_sent(group))
            self.group, self.group_bytes = waiting, waiting_bytes
        except BaseException:
            # Nothing of this try kept: settled again, the groups are sent once (found in
            # review: a settle retried after one that failed read every reply twice). The
            # commands waiting stay, for that settle.
            self.close()
            self.group, self.group_bytes, self.count = waiting, waiting_bytes, len(waiting)
            raise
        return self.execute()

    def execute(self) -> list[BatchResult]:
        """Send what is left, wait for every reply; the batch is empty and reusable afterwards."""
        delays = self.store.retry.delays()
        try:
            if self.group:
                self._send_group()
            while self.in_flight:
                self._read_reply()
            answered, self.answered = self.answered, []
            while (first := first_unapplied(answered)) is not None:
                # That group was refused before it ran: the server lost the library (restart
                # without persistence, flush), or the cluster is electing a primary or moved
                # the slot. Send it and every later group again, in order and with their ids:
                # a later group applied meanwhile is answered from its id, one rejected is
                # judged again in the right order.
                self._wait_before_resending(answered[first][2], delays)
                self._refuse_stale([group for _, group, _, _ in answered[first:]])
                for group_id, group, _, _ in answered[first:]:
                    self.in_flight.append((group_id, group))
                    try:
                        self._send(group_id, group)
                    except RETRYABLE:
                        self._reconnect_and_resend(delays)
                while self.in_flight:
                    self._read_reply()
                answered, self.answered = answered[:first] + self.answered, []
        finally:
            self.close()
        self.count = 0
        results = judge(self.store, answered)
        with groups_unsettled([group for _, group, _, _ in answered]):
            self._judge_unchecked(results)
        return results

    def _judge_unchecked(self, results: list[BatchResult]) -> None:
        """Bare claims Redis refused as ``unchecked`` claimed again, judged (in ``results``).
        Each judged claim is kept before it is sent, until every one is answered: a settle
        after any failure (its reply or a later one's lost, an interrupt) sends the very same
        judged claims again, answered from their ids where they landed (found in review)."""
        with claims_judged_again(self, results) as (to_judge, make):
            for index, claim in to_judge:
                with refused_as_result(results, index):
                    command = self.judged_unanswered.get(results[index].command.id)
                    if command is None:  # (not kept: a bare claim refused unchecked)
                        command = kept_judged(self, results, index, make(*claim_args(claim)))
                    reply = self.cache.run(command)
                    reply = judged_reply(reply, command, with_candidates(claim))
                    results[index] = BatchResult(results[index].command, reply)

    def close(self) -> None:
        """Give the connection back; unsent commands are dropped."""
        # With replies nobody will read, the connection is unusable.
        self._release_connection(disconnect=bool(self.in_flight))
        self.group, self.in_flight, self.sent, self.count = [], deque(), [], 0

    def _release_connection(self, disconnect: bool) -> None:
        if self.connection is not None and self.pool is not None:
            if disconnect:
                self.connection.disconnect()
            self.pool.release(self.connection)
        self.connection, self.pool = None, None

    def _send_group(self, sent_at: float | None = None) -> None:
        group = SentGroup(self.group, time.monotonic() if sent_at is None else sent_at)
        self.group = []
        self.group_bytes = 0
        self.in_flight.append((derive_group_id(group), group))
        self.sent.append(group)
        try:
            self._send(*self.in_flight[-1])
        except RETRYABLE:
            self._reconnect_and_resend(self.store.retry.delays())
        if len(self.in_flight) > WINDOW:
            self._read_reply()

    def _send(self, group_id: str, group: list[Command]) -> None:
        args = group_args(group)
        if self.connection is None:
            self.pool = self.store.server().connection_pool
            self.connection = self.pool.get_connection()
        self.connection.send_command("FCALL", *self.store.function_args("batch", group_id, args))
        if self.store.wait_replicas:
            self.connection.send_command(
                "WAIT", self.store.wait_replicas, self.store.wait_timeout_ms
            )

    def _read_reply(self) -> None:
        delays = self.store.retry.delays()
        while True:
            assert self.connection is not None
            try:
                reply = self._read_one()
                replicas = self._read_one() if self.store.wait_replicas else None
                break
            except RETRYABLE:
                self._reconnect_and_resend(delays)
        group_id, group = self.in_flight.popleft()
        self.answered.append((group_id, group, reply, replicas))

    def _read_one(self) -> Any:
        assert self.connection is not None
        try:
            return self.connection.read_response()
        except ResponseError as error:  # of the group: judged in execute()
            return error

    def _wait_before_resending(self, reason: Any, delays: Iterator[float]) -> None:
        if library_missing(reason):
            self.store.reload_library()
            return
        self._back_off(
            delays,
            f"sc_batch refused ({reason}); sending again",
            f"Redis kept refusing a group of commands ({reason}); the groups before it were "
            "applied, it and those after it may not have been",
            cause=reason,
        )

    def _reconnect_and_resend(self, delays: Iterator[float]) -> None:
        """The connection broke with groups unanswered: some may have been applied. Send them
        all again, in order, with their ids: Redis answers those it applied with the first
        outcome and applies the others (exactly once either way)."""
        while True:
            self._back_off(
                delays,
                f"connection lost with {len(self.in_flight)} groups unanswered; resending",
                f"no answer from Redis for {len(self.in_flight)} groups of commands after "
                "resending them as the retry policy allows; they may or may not have been applied",
            )
            self._refuse_stale([group for _, group in self.in_flight])
            try:
                for group_id, group in self.in_flight:
                    self._send(group_id, group)
                return
            except RETRYABLE:
                continue

    def _refuse_stale(self, groups: list[SentGroup]) -> None:
        refuse_stale(groups, self.sent)

    def _back_off(
        self,
        delays: Iterator[float],
        warning: str,
        exhausted: str,
        cause: BaseException | None = None,
    ) -> None:
        """Before sending again: drop the connection, ask where the cache's primary is now, and
        wait the policy's next delay; :class:`RetriesExhausted` (``exhausted`` says why, with
        every group of the batch to settle) when the policy is spent."""
        delay = next(delays, None)
        if delay is None:
            raise RetriesExhausted(
                f"sc_batch: {exhausted}: settle them with batch.settle(error.unsettled) (the "
                "same batch: it keeps the judged claims of bare claims refused unchecked)",
                unsettled=self.sent,
            ) from cause
        log.warning("%s", warning)
        self._release_connection(disconnect=True)
        self.store.route.refresh()
        time.sleep(delay)


def refuse_stale(groups: list[SentGroup], sent: list[SentGroup]) -> None:
    """:class:`RetriesExhausted` (every group ``sent``, to settle) instead of resending a
    group Redis may have forgotten."""
    for group in groups:
        reason = too_old_to_resend(group)
        if reason is not None:
            raise RetriesExhausted(
                f"sc_batch: a group of {len(group)} commands was not answered and is not sent "
                f"again: {reason}",
                unsettled=sent,
            )


def check_chunk_size(chunk_size: object) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise ValidationError("batch", "chunk_size", f"{chunk_size!r} is not an integer")
    if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise ValidationError("batch", "chunk_size", f"{chunk_size} is outside 1..{MAX_CHUNK_SIZE}")


def unchecked_claims(
    results: list[BatchResult], bare: dict[str, BareClaim]
) -> list[tuple[int, BareClaim]]:
    """The bare claims among ``results`` that Redis refused as ``unchecked`` (pods with
    required anti-affinity are placed): their index and claim, to be judged on a snapshot and
    claimed again (``Cache.judged_claim``)."""
    return [
        (index, bare[result.command.id])
        for index, result in enumerate(results)
        if result.command.id in bare
        and isinstance(result.error, FitConflict)
        and result.error.reasons == (UNCHECKED,)
    ]


@contextmanager
def claims_judged_again(
    batch: BatchBuilder, results: list[BatchResult]
) -> Iterator[tuple[list[tuple[int, BareClaim | None]], Any]]:
    """The refused ``results`` to claim again, judged, by the sync and the asyncio batch: a bare
    claim refused ``unchecked``, or one whose judged claim was sent before without every judged
    claim of its pass answered (``batch.judged_unanswered``: sent again as it was, with its id);
    their index and bare claim (None for the latter), and the cache's ``judged_claim_command``
    (None for a bare store's batch). The bare claims of this pass's commands are taken, and
    given back when the pass fails (settled again, they are judged again); those of another
    pass not yet settled stay (found in review: an execute between a failure and its settle
    dropped them); the judged claims are dropped once every one is answered."""
    bare = batch.bare_claims
    sent = {result.command.id for result in results}
    batch.bare_claims = {key: claim for key, claim in bare.items() if key not in sent}
    make = getattr(batch.cache, "judged_claim_command", None)
    kept = batch.judged_unanswered
    unchecked = dict(unchecked_claims(results, bare)) if make is not None else {}
    to_judge: list[tuple[int, BareClaim | None]] = []
    for index, result in enumerate(results):
        if result.ok:
            kept.pop(result.command.id, None)
        elif result.command.id in kept or index in unchecked:
            to_judge.append((index, unchecked.get(index)))
    try:
        yield to_judge, make
    except BaseException:
        batch.bare_claims = bare
        raise
    for index, _ in to_judge:  # every one answered
        kept.pop(results[index].command.id, None)


def claim_args(claim: BareClaim | None) -> tuple[Pod, tuple[str, ...], float | None]:
    """A bare claim's arguments to ``judged_claim_command``."""
    assert claim is not None  # (only a kept judged claim has none)
    return claim.pod, claim.candidates, claim.deadline


def with_candidates(claim: BareClaim | None) -> bool:
    """Whether a judged claim's reply names its node (``commands.judged_reply``): when its
    bare claim carried candidates, or is not known (a kept judged claim sent again)."""
    return claim is None or bool(claim.candidates)


def kept_judged(
    batch: BatchBuilder, results: list[BatchResult], index: int, command: Command
) -> Command:
    """``command``, the judged claim made for ``results[index]``, kept before it is sent."""
    batch.judged_unanswered[results[index].command.id] = command
    return command


@contextmanager
def refused_as_result(results: list[BatchResult], index: int) -> Iterator[None]:
    """Around claiming ``results[index]`` again: a refusal is that command's result."""
    try:
        yield
    except (FitConflict, PodAlreadyExists) as refused:
        results[index] = BatchResult(results[index].command, error=refused)


@contextmanager
def groups_unsettled(groups: list[SentGroup]) -> Iterator[None]:
    """Around judging a batch's bare claims again: a judged claim unanswered raises
    :class:`RetriesExhausted` with the batch's ``groups`` to settle (with the same batch,
    which keeps the judged claims), not the judged claim alone."""
    try:
        yield
    except RetriesExhausted as error:
        if error.unsettled:
            raise
        raise RetriesExhausted(
            f"sc_batch: a judged claim of the batch was not answered ({error}); settle the "
            "batch's groups with the same batch: batch.settle(error.unsettled)",
            unsettled=groups,
            command=error.command,
        ) from error


def judge(store: StoreCore, answered: list[tuple[str, SentGroup, Any, Any]]) -> list[BatchResult]:
    """Every command's :class:`BatchResult` from the groups' replies (``(group id, group,
    reply, WAIT reply)`` in order); :class:`BatchFailed` with them all if a group failed as a
    whole or was not replicated."""
    results: list[BatchResult] = []
    failures: list[tuple[list[Command], Exception]] = []
    for _, group, reply, replicas in answered:
        if isinstance(reply, Exception):
            failures.append((group, translate("batch", f"a batch of {len(group)} commands", reply)))
            continue
        results += _results(group, reply)
        if store.wait_replicas:
            try:
                store.check_replicated(replicas, f"sc_batch of {len(group)} commands")
            except (NotReplicated, ResponseError) as error:
                failures.append((group, error))
    if failures:
        raise BatchFailed(results, failures)
    return results


def group_args(group: list[Command]) -> list[Any]:
    """``sc_batch``'s arguments after the FCALL convention's: each command's name, argument
    count and arguments, in order."""
    args: list[Any] = []
    for command in group:
        args += [command.name, len(command.args), *command.args]
    return args


def derive_group_id(group: list[Command]) -> str:
    """The id of one ``sc_batch`` call, derived from its commands' ids: the same commands sent
    again in the same groups (:meth:`CommandBatch.settle`) are recognised as the same call.
    None (``""``) for a group of versioned commands only: Redis may apply it again harmlessly
    (:data:`~schedcache.store.commands.VERSIONED`), so it remembers nothing for it."""
    if not sent_with_id(group):
        return ""
    digest = hashlib.blake2b(digest_size=8)
    for command in group:
        digest.update(command.id.encode() + b"|")
    return digest.hexdigest()


def first_unapplied(answered: list[tuple[str, SentGroup, Any, Any]]) -> int | None:
    """The first group that Redis refused without running it (to be sent again)."""
    return next(
        (
            i
            for i, (_, _, reply, _) in enumerate(answered)
            if library_missing(reply) or isinstance(reply, REFUSED)
        ),
        None,
    )


def library_missing(reply: Any) -> bool:
    return isinstance(reply, ResponseError) and is_missing_function(reply)


def _results(group: list[Command], reply: Any) -> list[BatchResult]:
    results = []
    for index, command in enumerate(group):
        applied, value = reply[2 * index], reply[2 * index + 1]
        metrics.count_command(command.name, applied=bool(applied))
        if applied:
            results.append(BatchResult(command, reply=value))
        else:
            text = value.decode() if isinstance(value, bytes) else str(value)
            results.append(
                BatchResult(command, error=error_from_reply(command.name, command.subject, text))
            )
    return results
