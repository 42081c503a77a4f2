"""The node tree: live nodes grouped by zone, iterated round robin across zones.

Kept in Redis by the node commands (``lua/_helpers.lua``: zones in first-insertion order, nodes
in insertion order within a zone, empty zones dropped and re-appended at the end when they
return). ``list()`` is the stateless interleaving every snapshot's ``node_info_list`` uses (the
cursor-built list of kube-scheduler ≤ 1.18 duplicated and dropped nodes with uneven zones,
#91601); ``next()`` is the original round-robin cursor, kept in Redis so replicas share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schedcache.store import commands
from schedcache.store.store import Store


def interleave(zones: Sequence[Sequence[str]]) -> list[str]:
    """Zone 1's first node, zone 2's first node, ..., then the second nodes, skipping zones
    that ran out."""
    longest = max((len(nodes) for nodes in zones), default=0)
    return [nodes[index] for index in range(longest) for nodes in zones if index < len(nodes)]


def parse_tree(reply: Sequence[Any]) -> tuple[int, dict[str, list[str]]]:
    """``(tree generation, {zone: [node, ...]})`` from ``sc_tree_read``'s reply, in order."""
    generation, *zones = reply
    return int(generation), {
        zone.decode(): [node.decode() for node in nodes] for zone, nodes in zones
    }


class NodeTree:
    """A view of one cache's node tree; every call reads Redis."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _read(self) -> tuple[int, dict[str, list[str]]]:
        return parse_tree(self.store.read_function("tree_read"))

    def zones(self) -> dict[str, list[str]]:
        """Zone key -> node names, both in tree order."""
        return self._read()[1]

    def list(self) -> list[str]:
        """Every live node once, round robin across zones."""
        return interleave(list(self.zones().values()))

    def num_nodes(self) -> int:
        return sum(len(nodes) for nodes in self.zones().values())

    def next(self) -> str:
        """The next node of the shared round-robin cursor; "" when the tree is empty."""
        # A command like any other: its id keeps a retry from advancing the cursor twice, and
        # it goes through the store's retry policy, routing and WAIT.
        reply: bytes = self.store.run(commands.tree_next())
        return reply.decode()
