"""Pod groups' waits in the cache (``gangwait:<group>``), shared by a scheduler's replicas.

A reference scheduler replica that pops a member of a pod group still short of ``minMember``
records the member here and gives it back to the queue: the wait holds the members seen pending
(their pods as popped) and when it began, so whichever replica pops the member that completes
the group finds every other one (scheduler/gang.py, docs/gangs.md). Plain writes, no Lua: the
wait is bookkeeping of the schedulers, not the cluster's state (it writes no event), and every
write is idempotent (a member recorded twice is recorded once).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from schedcache.model.values import Pod
from schedcache.store.commands import pod_subject
from schedcache.store.records import decode_object, pack_object
from schedcache.store.responses import as_bytes, as_text
from schedcache.store.store import HasStore

# A wait's key outlives its group's timeout by this much (seconds), or lives this long when
# the group has none: a group nobody pops again is forgotten.
WAIT_KEPT = 600.0
# The wait hash's field holding when the wait began (ms); every other field is a member's uid
# (a member seen pending), or PLACED and a uid: a member a gang claim of the group placed, which
# counts toward ``minMember`` while the cache holds it (a placed group's later members are
# placed as extras, as Coscheduling counts the group's assigned pods).
SINCE = "since"
PLACED = "placed:"


@dataclass(frozen=True)
class GangWait:
    """A pod group's wait as the cache holds it: since when (ms), the members seen pending."""

    group: str
    since_ms: int
    members: tuple[Pod, ...]


class GangWaits:
    """The groups' waits in the cache (``gangwait:<group>``), shared by every replica."""

    def __init__(self, cache: HasStore) -> None:
        self.store = cache.store

    def all(self) -> list[GangWait]:
        """Every group's wait (for ``explain`` and ``whatif``): the groups the ``gangwaits``
        set names (no SCAN, which no restricted user gets: ops/acl.py) whose wait is still
        there (an expired one is skipped; nothing is written)."""
        keys = self.store.keys
        found = []
        for name in sorted(as_text(g) for g in self.store.client.smembers(keys.gang_waits)):
            key = keys.gang_wait(name)
            if not self.store.client.exists(key):
                continue  # expired, or restarted and not joined again
            since, members, _ = self._read(key, 0)
            if not members:
                continue  # placed, or every member gone: nothing waits
            found.append(GangWait(name, since, tuple(members.values())))
        return found

    def join(
        self, group: str, timeout: float | None, pod: Pod, now_ms: int
    ) -> tuple[int, dict[str, Pod], list[str]]:
        """Record ``pod`` in ``group``'s wait (kept ``timeout`` seconds and WAIT_KEPT more);
        when the wait began (ms), every member recorded pending, by uid, and the uids of the
        members the group's gang claims placed."""
        key = self.store.keys.gang_wait(group)
        client = self.store.client
        client.hsetnx(key, SINCE, now_ms)
        client.hset(key, pod.uid, pack_object(pod.to_dict(), pod_subject(pod)))
        kept = int(((timeout or 0) + WAIT_KEPT) * 1000)
        client.pexpire(key, kept)
        client.sadd(self.store.keys.gang_waits, group)
        # The set outlives every wait: its expiry set when it has none, else pushed later.
        client.pexpire(self.store.keys.gang_waits, kept, nx=True)
        client.pexpire(self.store.keys.gang_waits, kept, gt=True)
        return self._read(key, now_ms)

    def _read(self, key: Any, now_ms: int) -> tuple[int, dict[str, Pod], list[str]]:
        stored = self.store.client.hgetall(key)
        members, placed = {}, []
        since = now_ms
        for field, value in stored.items():
            text = as_text(field)
            if text == SINCE:
                since = int(value)
                continue
            if text.startswith(PLACED):
                placed.append(text[len(PLACED) :])
                continue
            what = functools.partial(str.format, "{} member {}", key, text)
            members[text] = decode_object(as_bytes(value), what, Pod.from_dict)
        return since, members, placed

    def leave(self, group: str, uids: list[str]) -> None:
        if uids:
            self.store.client.hdel(self.store.keys.gang_wait(group), *uids)

    def unplace(self, group: str, uids: list[str]) -> None:
        """Members placed before that the cache no longer holds (deleted, or their claim
        forgotten and back in the queue): they count no more."""
        self.leave(group, [PLACED + uid for uid in uids])

    def placed(self, group: str, uids: list[str]) -> None:
        """A gang claim placed ``uids``: they leave the pending and count as placed; the wait
        is over (the next one begins when a member is popped again)."""
        key = self.store.keys.gang_wait(group)
        self.store.client.hset(key, mapping={PLACED + uid: "1" for uid in uids})
        self.store.client.hdel(key, SINCE, *uids)

    def restart(self, group: str, uids: list[str]) -> None:
        """The wait of the pending ``uids`` timed out: it begins again with the next member
        popped (the placed members still count)."""
        self.leave(group, [SINCE, *uids])


def waits_of(cache: HasStore, ref: str) -> list[GangWait]:
    """The waits holding the pod ``ref`` names (uid or ``NAMESPACE/NAME``)."""
    return [
        wait
        for wait in GangWaits(cache).all()
        if any(ref in (m.uid, f"{m.namespace}/{m.name}") for m in wait.members)
    ]


def wait_text(wait: GangWait, now_ms: int) -> str:
    """One line for ``explain``: the group, how long it waits, the members seen pending."""
    names = ", ".join(sorted(f"{m.namespace}/{m.name}" for m in wait.members))
    waited = max(0, now_ms - wait.since_ms) / 1000
    return (
        f"gang: waits with pod group {wait.group} for {waited:.1f} s, holding no room; "
        f"{len(wait.members)} members seen pending: {names}"
    )
