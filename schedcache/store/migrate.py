"""Bringing a cache written by an older schema to this one (``schedcache migrate``).

Schema 2 keeps a node's pods in a sorted set scored by the generation that placed each, so a
snapshot reads only the pods placed since it last looked; schema 1 kept them in a plain set.
``sc_migrate`` converts the sets a slice of node entries at a time (one short call each, so
Redis is never held long), checking every record of a slice before writing any of it. A set
once converted is left alone, so running this again is harmless. Run it before replicas and
feeders start: beside them, their commands on a node still unconverted are refused with a
``CorruptRecord`` that names this command.
"""

from __future__ import annotations

from schedcache.errors import ValidationError
from schedcache.store.commands import Command
from schedcache.store.responses import as_text
from schedcache.store.store import Store

# Node entries looked at per call (SSCAN's COUNT): about 30 pods each, a few ms of Redis.
NODES_PER_CALL = 200
MAX_NODES_PER_CALL = 1000  # lua/migrate.lua refuses more


def migrate(store: Store, nodes_per_call: int = NODES_PER_CALL) -> int:
    """Convert every node pod set of ``store``'s cache; returns how many were converted (0 when
    the cache is already of this schema)."""
    if (
        isinstance(nodes_per_call, bool)
        or not isinstance(nodes_per_call, int)
        or not 1 <= nodes_per_call <= MAX_NODES_PER_CALL
    ):
        raise ValidationError(
            f"cache {store.name}",
            "nodes_per_call",
            f"{nodes_per_call!r} must be an integer from 1 to {MAX_NODES_PER_CALL}",
        )
    cursor, converted = "0", 0
    while True:
        command = Command("migrate", f"cache {store.name}", (cursor, nodes_per_call))
        next_cursor, count = store.run(command)
        converted += int(count)
        cursor = as_text(next_cursor)
        if cursor == "0":
            return converted
