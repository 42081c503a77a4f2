"""A snapshot's catch-up without a function call: the head in one ``MGET``, with its page.

A snapshot that follows the stream reads, once a pod in every replica and on every extender
``filter``, the head (``sc_snapshot_delta G T -1``: the generation, the tree generation, the
incarnation, the stream's last event, the namespaces' generation) and the stream's page after
its last event (:data:`~schedcache.store.reads.FOLLOW_READ`). Through the function the head
costs Redis ~115,000 instructions: the FCALL and the library's wrapper, before it reads five
strings. Here the same five strings and the page are read in one transaction::

    MULTI
    MGET gen treegen incarnation lastevent
    GET nsgen
    XRANGE events <snapshot's last event> + COUNT <n>
    EXEC

(~76,000 instructions with a page of four events, against ~184,000 for the function and its
page: docs/performance.md, "The head without a function".) The transaction makes the two one
atomic read, so the page is the stream's whole tail at the head's moment, and one check
replaces the function's: a page that is not full must end at ``lastevent`` (else something
appended to the stream without the library's ``emit``: a stream restored by hand, a
stranger's ``XADD``).

The answer is the function's instead (:func:`plain_head` answers None, and the caller sends
the function's head read) whenever this read cannot vouch for it: a key missing (a cache
before its first change) or of another type (``MGET`` answers nil for both: the function
names the corrupt key; ``nsgen``, missing until a namespace is synced, is read by ``GET``,
which tells the two apart), a generation that is not an integer as the library writes it
(``013``, `` 13`` or ``+13`` are corruption there, not 13), a node tree that changed (the
function sends the tree), a full page (1,000 new events or more: the page holds the
snapshot's last event too), a page that does not end at ``lastevent``, or any error
reply (a user without ``MULTI``, a server that refused the transaction). So a stranger's
changes to these keys are judged as before, by the function.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import redis

from schedcache.store.keys import Keys
from schedcache.store.responses import stream_page

Page = list[tuple[bytes, dict[bytes, bytes]]]
# An integer as the library writes one (its stored_int refuses anything else as corruption).
INTEGER = re.compile(rb"(0|-?[1-9][0-9]{0,18})\Z")


def head_keys(keys: Keys) -> tuple[str, ...]:
    """The strings the transaction's ``MGET`` reads, in order (``nsgen`` is read apart)."""
    return (keys.generation, keys.tree_generation, keys.incarnation, keys.last_event)


def transaction(keys: Keys, first: str, count: int) -> tuple[tuple[Any, ...], ...]:
    """The words of the transaction's commands, in order (``MULTI`` ... ``EXEC``)."""
    return (
        ("MULTI",),
        ("MGET", *head_keys(keys)),
        ("GET", keys.namespace_generation),
        ("XRANGE", keys.events, first, "+", "COUNT", count),
        ("EXEC",),
    )


def plain_head(
    head_args: Sequence[Any], count: int, strings: Any, namespaces: Any, raw_page: Any
) -> tuple[list[Any], Page] | None:
    """The function's ``(head reply, page)`` from the transaction's replies (``MGET``'s
    strings, ``GET nsgen``, the ``XRANGE`` page, raw or as redis-py parsed it; an error reply
    in place), or None when the function must answer (see the module's text).
    ``head_args``: the head read's (generation, tree generation, -1); ``count``: the page's
    ``COUNT``."""
    if not isinstance(strings, list) or len(strings) != 4 or None in strings:
        return None
    gen, tree_gen, incarnation, last = strings
    numbers = (gen, tree_gen, b"0" if namespaces is None else namespaces)
    if not all(isinstance(text, bytes) and INTEGER.match(text) for text in numbers):
        return None  # (the function names the corrupt key)
    generation, tree_generation, namespace_generation = (int(text) for text in numbers)
    if not all(-(2**63) <= value < 2**63 for value in (generation, tree_generation)):
        return None
    if tree_generation != int(head_args[1]) or not last:
        return None
    page = stream_page(raw_page) if _raw(raw_page) else raw_page
    if not isinstance(page, list) or not page or len(page) >= count or page[-1][0] != last:
        return None
    # As sc_snapshot_delta answers with limit -1: no live count, no names, no nodes, no tree.
    head = [generation, -1, [], [], [], [], incarnation, last, namespace_generation]
    return head, page


def refused_by_rules(error: BaseException) -> bool:
    """Whether the transaction was refused by the user's ACL rules: a command denied
    (NOPERM), EXEC denied (EXECABORT naming NOPERM; the transaction is discarded), or MULTI
    denied (redis-py's asyncio pipeline then raises EXEC's "EXEC without MULTI")."""
    text = str(error)
    return (
        isinstance(error, redis.exceptions.NoPermissionError)
        or "NOPERM" in text
        or "without MULTI" in text
    )


def _raw(page: Any) -> bool:
    """Whether ``page`` is ``XRANGE``'s raw reply (``[[id, [field, value, ...]], ...]``)
    rather than redis-py's parsed one (``[(id, {field: value}), ...]``)."""
    return isinstance(page, list) and bool(page) and isinstance(page[0], list)
