"""What the extender keeps for name lists that recur (the columns' rows, the answers of filter
calls that passed every name): values by key, the least recently used let go first, bounded in
count and in a size of each entry's own, all together. One mechanism for both, so that their
bounds are kept alike."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class Kept(OrderedDict[str, V], Generic[V]):
    """An ``OrderedDict`` oldest first; ``size`` is the sum of ``size_of(key, value)`` over
    what it holds. Not thread-safe: its callers hold their own lock."""

    def __init__(self, size_of: Callable[[str, V], int]) -> None:
        super().__init__()
        self.size_of = size_of
        self.size = 0

    def take(self, key: str) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def keep(self, key: str, value: V, most: int, most_size: int) -> None:
        """Keep ``value`` for ``key`` (not kept yet), unless it alone is over ``most_size``;
        then let the oldest go until at most ``most`` entries and ``most_size`` remain."""
        size = self.size_of(key, value)
        if size > most_size:
            return
        self[key] = value
        self.size += size
        while len(self) > most or self.size > most_size:
            oldest, gone = self.popitem(last=False)
            self.size -= self.size_of(oldest, gone)

    def clear(self) -> None:
        super().clear()
        self.size = 0
