"""What the scheduling queue holds, read in one pipeline (``stats``, ``/metrics``,
``schedcache.ops.queue``): the queue's states and its pods per scheduler name and state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from schedcache.store.keys import Keys
from schedcache.store.responses import as_text

if TYPE_CHECKING:
    from schedcache.store.routing import Client

STATES: Final = ("active", "leased", "backoff", "parked")
"""A queued pod's states, as lua/_queue.lua names them (``parked``: unschedulable)."""


def queue_lengths(
    client: Client, keys: Keys, names: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """Queued pods per scheduler name and state: of ``names``, else of every scheduler name
    that has had a queue."""
    if names is None:
        names = sorted(as_text(name) for name in client.hkeys(keys.queues))
    pipe = client.pipeline(transaction=False)
    for name in names:
        for state in STATES:
            pipe.zcard(keys.queue(name, state))
    sizes = iter(pipe.execute())
    return {name: {state: int(next(sizes)) for state in STATES} for name in names}
