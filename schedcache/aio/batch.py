"""``AsyncCommandBatch``: :class:`~schedcache.store.batch.CommandBatch` for asyncio.

``async with cache.batch() as batch:`` collects commands (``batch.add_pod(pod)`` builds them
with the same ``schedcache.store.commands`` as the sync batch); leaving the block, or ``await
batch.execute()``, sends them in ``sc_batch`` groups of ``chunk_size``, ``WINDOW`` groups per
pipelined round trip, and judges the replies with the sync batch's rules
(:func:`~schedcache.store.batch.judge`): each command applied whole or not at all, in order, a
rejected one not stopping the others.

Every group carries an id derived from its commands' ids, so a group sent again (a broken
connection, a refused group and those after it, :meth:`settle`) is answered from its first
outcome if Redis applied it before; a group of a feeder's versioned changes only has none, and
its versions drop what it applied (``dropped repeated``). A coroutine cancelled inside
:meth:`execute` leaves every group applied or not; ``await batch.settle(batch.sent)`` then
settles them exactly once.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Self

from schedcache.errors import RetriesExhausted, ValidationError
from schedcache.store.batch import (
    WINDOW,
    BatchBuilder,
    BatchResult,
    Claimant,
    SentGroup,
    check_chunk_size,
    claim_args,
    claims_judged_again,
    derive_group_id,
    first_sent,
    first_unapplied,
    group_args,
    groups_unsettled,
    judge,
    kept_judged,
    library_missing,
    refuse_stale,
    refused_as_result,
    split_groups,
    too_old_to_resend,
    with_candidates,
)
from schedcache.store.commands import Command, judged_reply
from schedcache.store.retry import RETRYABLE

if TYPE_CHECKING:
    from collections.abc import Iterator

    from schedcache.aio.store import AsyncStore

Answer = tuple[str, SentGroup, Any, Any]


class AsyncCommandBatch(BatchBuilder):
    """Collects commands, then applies them in few round trips; see the module docstring.

    ``cache``: an ``AsyncCache`` (``cache.batch()``), or a bare ``AsyncStore``, whose batches
    take commands with :meth:`add` only."""

    def __init__(self, cache: Any, chunk_size: int = 200) -> None:
        check_chunk_size(chunk_size)
        self.store: AsyncStore = cache.store if hasattr(cache, "store") else cache
        self.cache = cache
        self.claimant = cache if isinstance(cache, Claimant) else None
        self.bare_claims = {}
        self.judged_unanswered = {}
        self.chunk_size = chunk_size
        self.commands: list[Command] = []
        self.sent: list[SentGroup] = []  # the groups of the last execute(), for settle()
        self.claims = False  # an assume_pod was added: hold the lease once they are sent

    def __len__(self) -> int:
        """Commands added since the last :meth:`execute`."""
        return len(self.commands)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            await self.execute()
        else:
            self.commands = []

    def add(self, command: Command) -> Self:
        self.store.check_permitted("batch")
        self.commands.append(command)
        return self

    def claimed(self, claimant: Claimant) -> None:
        """The lease heartbeat is a task on the running loop: started once the claims are sent
        (:meth:`execute` runs on a loop; adding may happen anywhere)."""
        self.claims = True

    async def execute(self) -> list[BatchResult]:
        """Apply every command added since the last call; the batch is empty afterwards.
        :class:`BatchFailed` if a group failed as a whole, :class:`RetriesExhausted` (with
        ``unsettled``) when Redis stayed away longer than the retry policy allows."""
        batch, self.commands = self.commands, []
        now = time.monotonic()
        groups = [SentGroup(group, now) for group in split_groups(batch, self.chunk_size)]
        try:
            return await self._apply(groups)
        finally:
            if self.claims and self.claimant is not None:
                self.claimant.hold_lease()
            self.claims = False

    async def settle(self, groups: list[list[Command]]) -> list[BatchResult]:
        """Send ``groups`` again as they were (``batch.sent`` after a cancellation, or
        ``RetriesExhausted.unsettled``): a group Redis applied before is answered with its
        first outcome, the others are applied now. A group with an id first sent more than
        ``MAX_RETRY_WINDOW`` seconds ago is refused (:class:`ValidationError`, nothing sent); a
        group of versioned commands only has none and is sent again for up to
        ``retry.MAX_VERSIONED_RESEND`` (an hour less a minute)."""
        for index, group in enumerate(groups):
            reason = too_old_to_resend(group)
            if reason is not None:
                raise ValidationError("batch settle", f"unsettled[{index}]", reason)
        return await self._apply([SentGroup(list(group), first_sent(group)) for group in groups])

    async def _apply(self, groups: list[SentGroup]) -> list[BatchResult]:
        self.sent = groups
        delays = self.store.retry.delays()
        pending = [(derive_group_id(group), group) for group in groups]
        answered: list[Answer] = []
        while pending:
            window = pending[:WINDOW]
            refuse_stale([group for _, group in window], self.sent)
            try:
                got = await self._send(window)
            except RETRYABLE as error:  # some groups may have run: the ids settle them
                await self._back_off(delays, error)
                continue
            first = first_unapplied(got)
            if first is None:
                answered += got
                pending = pending[WINDOW:]
                continue
            # Refused before it ran (library lost, cluster electing or moving the slot): send
            # it and every later group again, in order; one applied meanwhile is answered
            # from its id, one rejected is judged again in the right order.
            answered += got[:first]
            pending = pending[first:]
            reason = got[first][2]
            if library_missing(reason):
                await self.store.ensure_loaded()
            else:
                await self._back_off(delays, reason)
        results = judge(self.store, answered)
        with groups_unsettled(self.sent):
            await self._judge_unchecked(results)
        return results

    async def _judge_unchecked(self, results: list[BatchResult]) -> None:
        """The sync batch's ``_judge_unchecked``: bare claims refused ``unchecked`` claimed
        again, judged, each judged claim kept before it is sent until every one is answered
        (a cancellation included: :meth:`settle` sends them again as they were)."""
        with claims_judged_again(self, results) as (to_judge, make):
            for index, claim in to_judge:
                with refused_as_result(results, index):
                    command = self.judged_unanswered.get(results[index].command.id)
                    if command is None:
                        made = await make(*claim_args(claim))
                        command = kept_judged(self, results, index, made)
                    reply = await self.cache.run(command)
                    reply = judged_reply(reply, command, with_candidates(claim))
                    results[index] = BatchResult(results[index].command, reply)

    async def _send(self, window: list[tuple[str, SentGroup]]) -> list[Answer]:
        """One round trip: each group's ``FCALL sc_batch`` (and ``WAIT``), replies in place."""
        store = self.store
        calls: list[tuple[Any, ...]] = []
        for group_id, group in window:
            calls.append(("FCALL", *store.function_args("batch", group_id, group_args(group))))
            if store.wait_replicas:
                calls.append(("WAIT", store.wait_replicas, store.wait_timeout_ms))
        replies = await store.on_one_connection(calls)
        step = 2 if store.wait_replicas else 1
        return [
            (group_id, group, replies[i * step], replies[i * step + 1] if step == 2 else None)
            for i, (group_id, group) in enumerate(window)
        ]

    async def _back_off(self, delays: Iterator[float], reason: object) -> None:
        delay = next(delays, None)
        if delay is None:
            raise RetriesExhausted(
                f"sc_batch: Redis kept refusing or dropping groups of commands ({reason}); "
                "some may have been applied: settle them with batch.settle(error.unsettled) "
                "(the same batch: it keeps the judged claims of bare claims refused unchecked)",
                unsettled=self.sent,
            ) from (reason if isinstance(reason, BaseException) else None)
        error = reason if isinstance(reason, Exception) else RuntimeError(str(reason))
        await self.store.before_resend("sc_batch", error)
        await asyncio.sleep(delay)
