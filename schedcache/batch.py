"""``CommandBatch``: many commands in few round trips, for informer ingest and bulk loads.

Commands are grouped into ``sc_batch`` calls of ``chunk_size`` commands, and the calls are sent
in one pipeline. Each command is still all-or-nothing on its own and applied in order; one that
is rejected does not stop the others. ``execute()`` returns one :class:`BatchResult` per command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis import ResponseError

from schedcache import commands
from schedcache.commands import Command
from schedcache.errors import CacheError
from schedcache.library import ensure_loaded, is_missing_function
from schedcache.models import Node, Pod
from schedcache.replies import error_from_reply

if TYPE_CHECKING:
    from schedcache.cache import Cache


@dataclass(frozen=True)
class BatchResult:
    """The outcome of one command of a batch: its reply, or the error it was rejected with."""

    command: Command
    reply: Any = None
    error: CacheError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class CommandBatch:
    """Collects commands; nothing is sent before :meth:`execute`."""

    def __init__(self, cache: Cache, chunk_size: int = 200) -> None:
        self.cache = cache
        self.chunk_size = chunk_size
        self.pending: list[Command] = []

    def __len__(self) -> int:
        return len(self.pending)

    def __enter__(self) -> CommandBatch:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.execute()

    def add(self, command: Command) -> CommandBatch:
        self.pending.append(command)
        return self

    def assume_pod(self, pod: Pod) -> CommandBatch:
        return self.add(commands.assume_pod(pod))

    def finish_binding(self, pod: Pod, now: float | None = None) -> CommandBatch:
        return self.add(commands.finish_binding(pod, now, self.cache.ttl))

    def forget_pod(self, pod: Pod) -> CommandBatch:
        return self.add(commands.forget_pod(pod))

    def add_pod(self, pod: Pod) -> CommandBatch:
        return self.add(commands.add_pod(pod))

    def update_pod(self, old: Pod, new: Pod) -> CommandBatch:
        return self.add(commands.update_pod(old, new))

    def remove_pod(self, pod: Pod) -> CommandBatch:
        return self.add(commands.remove_pod(pod))

    def add_node(self, node: Node) -> CommandBatch:
        return self.add(commands.add_node(node))

    def update_node(self, old: Node | None, new: Node) -> CommandBatch:
        return self.add(commands.update_node(old, new))

    def remove_node(self, node: Node | str) -> CommandBatch:
        return self.add(commands.remove_node(node))

    def execute(self) -> list[BatchResult]:
        """Send everything collected; the batch is empty afterwards."""
        pending, self.pending = self.pending, []
        if not pending:
            return []
        groups = [pending[i : i + self.chunk_size] for i in range(0, len(pending), self.chunk_size)]
        replies = self._send(groups)
        results: list[BatchResult] = []
        for group, reply in zip(groups, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            for index, command in enumerate(group):
                applied, value = reply[2 * index], reply[2 * index + 1]
                if applied:
                    results.append(BatchResult(command, reply=value))
                else:
                    text = value.decode() if isinstance(value, bytes) else str(value)
                    error = error_from_reply(command.name, command.subject, text)
                    results.append(BatchResult(command, error=error))
        return results

    def _send(self, groups: list[list[Command]]) -> list[Any]:
        """One pipeline of ``sc_batch`` calls; reloads the library once if the server lost it."""
        for attempt in range(2):
            pipe = self.cache.client.pipeline(transaction=False)
            for group in groups:
                args: list[Any] = []
                for command in group:
                    args += [command.name, len(command.args), *command.args]
                pipe.fcall("sc_batch", 1, self.cache.keys.prefix, self.cache.replica, *args)
            replies = pipe.execute(raise_on_error=False)
            first = replies[0]
            # A missing library fails every call of the pipeline, so none was applied.
            if attempt == 0 and isinstance(first, ResponseError) and is_missing_function(first):
                ensure_loaded(self.cache.client)
                continue
            return replies
        raise AssertionError("unreachable")
