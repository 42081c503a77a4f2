"""A resend is either recognised by its command id or refused, never applied twice.

Redis remembers command ids for ``COMMAND_ID_TTL_MS`` (``lua/_command_ids.lua``); the retry
window (``RetryPolicy.within``), ``CommandBatch.settle`` and re-running a ``Command`` are all
capped at ``retry.MAX_RETRY_WINDOW``, below that memory. Refusals change nothing in Redis.
A feeder's versioned changes (``commands.VERSIONED``) go without an id: a resend of them, or
of a group of nothing else, is recognised by the resourceVersion for up to
``retry.MAX_VERSIONED_RESEND``, under the life of a delete's tombstone (``TOMBSTONE_MS``,
``lua/_versions.lua``), and refused after it.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from schedcache import Cache
from schedcache.errors import RetriesExhausted, ValidationError
from schedcache.store import commands
from schedcache.store.batch import SentGroup
from schedcache.store.retry import (
    COMMAND_ID_TTL_MS,
    MAX_RETRY_WINDOW,
    MAX_VERSIONED_RESEND,
    TOMBSTONE_MS,
    RetryPolicy,
)
from tests.factories import keyspace, make_node, make_pod

LUA = Path(__file__).resolve().parent.parent / "lua" / "_command_ids.lua"
VERSIONS_LUA = LUA.parent / "_versions.lua"


def test_the_python_window_stays_below_the_lua_memory():
    # A string in Lua (it goes to Redis as the PX argument as it is).
    match = re.search(r"^local COMMAND_ID_TTL_MS = '(\d+)'$", LUA.read_text(), re.MULTILINE)
    assert match, f"COMMAND_ID_TTL_MS not found in {LUA}"
    assert int(match[1]) == COMMAND_ID_TTL_MS
    # 30 s of margin for the last resend's own socket timeout and transit.
    assert MAX_RETRY_WINDOW * 1000 <= COMMAND_ID_TTL_MS - 30_000
    # The same for versioned changes, against a delete's tombstone.
    text = VERSIONS_LUA.read_text()
    match = re.search(r"^local TOMBSTONE_MS = (\d+)$", text, re.MULTILINE)
    assert match, f"TOMBSTONE_MS not found in {VERSIONS_LUA}"
    assert int(match[1]) == TOMBSTONE_MS
    assert MAX_VERSIONED_RESEND * 1000 <= TOMBSTONE_MS - 30_000


def test_a_retry_window_past_the_memory_is_refused_saying_why():
    assert RetryPolicy(within=MAX_RETRY_WINDOW).within == MAX_RETRY_WINDOW
    with pytest.raises(ValidationError, match=r"^retry policy: within: 125 s is over 90 s: Redis"):
        RetryPolicy(within=125)
    with pytest.raises(ValidationError, match=r"remembers a command id for 120 s"):
        RetryPolicy(within=3600.0)


def _aged(command: commands.Command, seconds: float) -> commands.Command:
    """The same command (same id) as if made ``seconds`` ago."""
    return replace(command, created=time.monotonic() - seconds)


def populate(cache: Cache) -> list[commands.Command]:
    node = commands.add_node(make_node("n1", "4", "1Gi"))
    pod = commands.add_pod(make_pod("a", "n1", "100m", "1Mi"))
    update = commands.update_node(None, make_node("n1", "8", "1Gi"))
    cache.batch().settle([[node, pod, update]])
    return [node, pod, update]


def test_settle_resends_a_group_within_the_window_exactly_once(cache: Cache):
    applied = populate(cache)
    generation, length = cache.generation(), cache.stream_length()
    group = SentGroup(applied, first_sent=time.monotonic() - (MAX_RETRY_WINDOW - 5))
    results = cache.batch().settle([group])
    assert [r.ok for r in results] == [True, True, True]  # answered from the ids
    assert (cache.generation(), cache.stream_length()) == (generation, length)


@pytest.mark.parametrize("form", ["SentGroup", "plain list of old commands"])
def test_settle_refuses_a_group_first_sent_past_the_window_and_sends_nothing(
    cache: Cache, form: str
):
    """The issue: a resend after 125 s was applied again (update_node twice). Now refused."""
    applied = populate(cache)
    before = keyspace(cache.client, cache.keys.pattern)
    fresh = [commands.add_pod(make_pod("b", "n1", "100m", "1Mi"))]
    if form == "SentGroup":
        old = SentGroup(applied, first_sent=time.monotonic() - 125)
    else:
        old = [_aged(command, 125) for command in applied]
    with pytest.raises(
        ValidationError, match=r"^batch settle: unsettled\[1\]: made or first sent 12[5-9] s ago"
    ):
        cache.batch().settle([fresh, old])
    assert keyspace(cache.client, cache.keys.pattern) == before  # not even the fresh group


def test_running_a_command_made_past_the_window_is_refused(cache: Cache):
    """``cache.run(command)`` settles a command after RetriesExhausted, within the window."""
    update = commands.update_node(None, make_node("n1", "4", "1Gi"))
    cache.run(update)
    again = _aged(update, MAX_RETRY_WINDOW - 1)
    cache.run(again)  # recognised: answered from its id
    assert [e.type for e in cache.events()] == ["NodeUpdated"]  # once
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match=r"^node n1: sc_update_node command id: made or "):
        cache.run(_aged(update, 125))
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_batch_does_not_resend_a_group_past_the_window(cache: Cache):
    """A group whose reply was lost is resent with the same id, unless it was first sent so
    long ago that Redis may have forgotten the id: then RetriesExhausted, applied at most once."""
    batch = cache.batch(chunk_size=2)
    batch.add_node(make_node("n1", "4", "1Gi"))
    batch.update_node(None, make_node("n1", "8", "1Gi"))  # the group is sent now
    batch.in_flight[0][1].first_sent -= 125  # as if sent 125 s ago
    assert batch.connection is not None
    batch.connection.disconnect()  # its reply is lost
    with pytest.raises(RetriesExhausted, match=r"is not sent again: made or first sent 12\d s"):
        batch.execute()
    assert len([e for e in cache.events() if e.type.startswith("Node")]) <= 2
    assert cache.verify() == []


# -- a feeder's versioned changes go without an id: no cap (commands.VERSIONED) ------------------

LONG_AGO = 3000.0  # far past the window and the ids' memory, within the tombstones': 50 min


def feeders_changes() -> list[commands.Command]:
    return [
        commands.sync_node(make_node("n1", "4", "1Gi"), "5"),
        commands.sync_pod(make_pod("web-0", "n1", "100m", "1Mi"), "10", True),
    ]


def state(cache: Cache) -> tuple[dict[bytes, object], list[str]]:
    return keyspace(cache.client, cache.keys.pattern), [e.type for e in cache.events()]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_versioned_command_made_past_the_window_is_sent_and_applied_once(cache: Cache):
    """A sync feed stalled by a long outage resends its changes: not refused past the ids'
    window (they were, found in review). Applied if Redis never saw them, else dropped as
    repeated; a command with an id made as long ago is still refused."""
    node, pod = (_aged(command, LONG_AGO) for command in feeders_changes())
    assert cache.run(node)[:2] == [b"applied", b"add"]
    assert cache.run(pod)[:2] == [b"applied", b"add"]
    before = state(cache)
    assert before[1] == ["NodeAdded", "PodAdded"]
    for command in (pod, node):  # the same changes again, a lost reply's resend
        assert cache.run(command)[:2] == [b"dropped", b"repeated"]
    assert state(cache) == before
    # A command with an id keeps the cap, in both APIs: refused, nothing sent.
    update = _aged(commands.update_node(None, make_node("n1", "8", "1Gi")), 125)
    with pytest.raises(ValidationError, match=r"^node n1: sc_update_node command id: made or "):
        cache.run(update)
    assert state(cache) == before


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("form", ["SentGroup", "plain list of old commands"])
def test_settle_resends_a_group_of_versioned_changes_however_old(cache: Cache, form: str):
    """A group of versioned changes only goes without an id: settled 50 minutes later, the
    changes Redis applied are dropped as repeated, the others applied; a group holding a
    command with an id is still refused, and nothing of the settle is sent."""

    def old(group: list[commands.Command]) -> list[commands.Command]:
        if form == "SentGroup":
            return SentGroup(group, first_sent=time.monotonic() - LONG_AGO)
        return [_aged(command, LONG_AGO) for command in group]

    node, pod = feeders_changes()
    assert [r.reply[:2] for r in cache.batch().settle([old([node])])] == [[b"applied", b"add"]]
    results = cache.batch().settle([old([node, pod])])
    assert [r.reply[:2] for r in results] == [[b"dropped", b"repeated"], [b"applied", b"add"]]
    before = state(cache)
    assert before[1] == ["NodeAdded", "PodAdded"]
    assert [r.reply[:2] for r in cache.batch().settle([old([pod, node])])] == [
        [b"dropped", b"repeated"]
    ] * 2
    assert state(cache) == before
    mixed = old([commands.sync_node(make_node("n2"), "6"), commands.add_node(make_node("n3"))])
    with pytest.raises(
        ValidationError, match=r"^batch settle: unsettled\[1\]: made or first sent \d+ s ago"
    ):
        cache.batch().settle([old([commands.sync_node(make_node("n4"), "7")]), mixed])
    assert state(cache) == before


def test_a_batch_resends_a_group_of_versioned_changes_past_the_window(cache: Cache):
    """A versioned group whose reply was lost is resent however long ago it was first sent
    (a group with an id is not: test_a_batch_does_not_resend_a_group_past_the_window)."""
    batch = cache.batch(chunk_size=2)
    for command in feeders_changes():
        batch.add(command)  # the group is sent now
    batch.in_flight[0][1].first_sent -= LONG_AGO  # as if sent 50 minutes ago
    assert batch.connection is not None
    batch.connection.disconnect()  # its reply is lost
    results = batch.execute()
    assert all(result.ok for result in results)
    assert [r.reply[0] for r in results] in (
        [b"applied", b"applied"],  # the first send never reached Redis
        [b"dropped", b"dropped"],  # it did: the resend is answered by the versions
    )
    assert [e.type for e in cache.events()] == ["NodeAdded", "PodAdded"]
    assert cache.verify() == []


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_versioned_change_past_its_tombstones_life_is_refused_and_nothing_sent(cache: Cache):
    """A delete made after a change's first send is remembered an hour (its tombstone): a
    resend later than that could bring the object back, so a versioned change, single or in
    a group, is refused past MAX_VERSIONED_RESEND, with nothing sent."""
    node = commands.sync_node(make_node("n1", "4", "1Gi"), "5")
    assert cache.run(node)[:2] == [b"applied", b"add"]
    gone = commands.sync_node_gone("n1", "6")
    assert cache.run(gone)[:2] == [b"applied", b"remove"]
    before = state(cache)
    late = MAX_VERSIONED_RESEND + 60
    with pytest.raises(ValidationError, match=r"versioned changes first sent \d+ s ago, over "):
        cache.run(_aged(node, late))
    with pytest.raises(ValidationError, match=r"^batch settle: unsettled\[0\]: versioned "):
        cache.batch().settle([SentGroup([node], first_sent=time.monotonic() - late)])
    assert state(cache) == before
