"""Replay: fold the event stream into the state it describes, independently of the Lua code.

The fold itself lives in :mod:`schedcache.store.fold`, one floor down, because snapshots
(``views/``) are fed by it too: replay, ``verify()``, ``Cache.at()`` and every snapshot apply
events with the same code. This module keeps the names the history tools import.
"""

from __future__ import annotations

from schedcache.store.fold import (
    POD_REMOVALS,
    NodeState,
    PodState,
    ReplayState,
    fold,
    fold_pages,
    stored,
)

__all__ = ["POD_REMOVALS", "NodeState", "PodState", "ReplayState", "fold", "fold_pages", "stored"]
