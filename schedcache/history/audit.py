"""The stream as audit, for the kube-style facade (:class:`~schedcache.cache.Cache` inherits
it): reading the events, one pod's or node's history, the fold of the stream (replay), and
what rests on the fold (checkpoints, compaction, verify). Kept apart from the commands and
the reads of the live state, which are the facade's own job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from schedcache.errors import ValidationError
from schedcache.history import checkpoints
from schedcache.history.invariants import invariants
from schedcache.history.replay import ReplayState
from schedcache.history.verify import Difference, compare, lost_keys, server_problems
from schedcache.model.nodeinfo import Dump
from schedcache.model.values import Pod
from schedcache.store.commands import pod_ref
from schedcache.store.events import Event, checked_stream_id, decode_entry
from schedcache.store.fetch import gc_paused
from schedcache.store.responses import stream_entries
from schedcache.store.store import Store

__all__ = ["StreamAudit"]


class StreamAudit:
    """The audit calls of one cache's :class:`Store` (``self.store``)."""

    store: Store

    def events(
        self, start: str | None = None, end: str | None = None, count: int = 1000
    ) -> Iterator[Event]:
        """The stream's events from ``start`` to ``end`` (ids, both included), in order."""
        low = start or "-"
        high = end or "+"
        while True:
            entries = stream_entries(
                self.store.client.xrange(self.store.keys.events, low, high, count=count)
            )
            for entry_id, raw in entries:
                yield decode_entry(entry_id, raw)
            if len(entries) < count:
                return
            low = "(" + entries[-1][0].decode()

    def last_events(self, count: int) -> list[Event]:
        """The newest ``count`` events, oldest first."""
        entries = stream_entries(self.store.client.xrevrange(self.store.keys.events, count=count))
        return [decode_entry(entry_id, raw) for entry_id, raw in reversed(entries)]

    def wait_for_events(
        self, after: str = "$", timeout: float = 1.0, count: int = 500
    ) -> list[Event]:
        """Up to ``count`` events after the id ``after`` (``"$"``: only events newer than the
        call), waiting up to ``timeout`` seconds for the first; [] when none came."""
        block = max(1, round(timeout * 1000))
        reply = self.store.client.xread({self.store.keys.events: after}, block=block, count=count)
        streams: list[Any] = list(reply or [])  # RESP2: [[stream, entries]]
        return [
            decode_entry(entry_id, raw)
            for _, entries in streams
            for entry_id, raw in stream_entries(entries)
        ]

    def history(self, pod: Pod | str) -> list[Event]:
        """The events of one pod (by uid), across nodes, in stream order."""
        uid, _ = pod_ref(pod)
        return [event for event in self.events() if event.uid == uid]

    def history_of_node(self, name: str) -> list[Event]:
        """The events that changed node ``name`` (its own and its pods'), in stream order."""
        return [
            event
            for event in self.events()
            if event.node == name or event.fields.get("from") == name
        ]

    def replay(
        self, until: str | None = None, progress: Callable[[int], None] | None = None
    ) -> Dump:
        """The state folded from the stream, up to and including event ``until``, shaped like
        :meth:`dump` (``last_id`` names the last event folded in): from the latest checkpoint
        when ``until`` is at or after it, else from the stream's start
        (:class:`HistoryCompacted` if that part was trimmed away)."""
        if until is not None:
            until = checked_stream_id(until, f"cache {self.store.name}", "until")
        return self._replay(until, progress).as_dump()

    def _replay(
        self, until: str | None = None, progress: Callable[[int], None] | None = None
    ) -> ReplayState:
        """The fold itself (checkpoints and verify work on it). The audit calls read the
        cache's primary directly: under the retry policy, and re-routed after a failover or
        a resharding moved the slot (a MOVED reply), as commands are."""
        with gc_paused():  # folding creates many objects and no cycles
            return self.store.retrying(
                lambda: checkpoints.replay(self.store, until, progress), "replay"
            )

    def checkpoint(self) -> str:
        """Store the folded state at the stream's last event; returns that event's id."""
        state = self._replay()
        return self.store.retrying(
            lambda: checkpoints.write_checkpoint(self.store, state), "checkpoint"
        )

    def compact(self, keep: int = 0) -> int:
        """Trim the stream before the checkpoint (keeping ``keep`` events before it), so
        replay = checkpoint + tail. Returns how many events were removed."""
        problem = checkpoints.keep_events_problem(keep)
        if problem is not None:
            raise ValidationError(f"cache {self.store.name}", "keep", problem)
        return self.store.retrying(lambda: checkpoints.compact(self.store, keep), "compact")

    def verify(self) -> list[Difference]:
        """Differences between the replayed stream and the live keys, and broken invariants;
        empty when the cache is consistent."""
        state = self._replay()
        return self.store.retrying(
            lambda: (
                server_problems(self.store)
                + lost_keys(self.store)
                + compare(state, self.store)
                + invariants(self.store)
            ),
            "verify",
        )
