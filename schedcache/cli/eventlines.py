"""Events as lines of text (``events``, ``history``, describe's Events), kept apart from the
inspection commands so that ``describe`` starts without their imports."""

from __future__ import annotations

from schedcache.cache import Cache
from schedcache.cli.text import printable, zone_text
from schedcache.cli.units import age
from schedcache.errors import CacheError
from schedcache.sim.explain import pod_name
from schedcache.store.events import Event


class PodNames:
    """Names pods by namespace/name in event lines: from the payloads seen so far, else from
    the cache (a BindingFinished or expiry event carries only the uid), else the uid."""

    def __init__(self, cache: Cache | None = None) -> None:
        self.cache = cache
        self.known: dict[str, str] = {}

    def __call__(self, event: Event) -> str | None:
        uid = event.uid
        if not uid:
            return None
        name = pod_name(event)
        if name:
            self.known[uid] = name
            return name
        if uid not in self.known and self.cache is not None:
            try:
                self.known[uid] = self.cache.get_pod(uid).full_name
            except CacheError:
                self.known[uid] = uid
        return self.known.get(uid, uid)


def event_text(event: Event, names: PodNames | None = None) -> str:
    """The subject (a pod's namespace/name, or the node) and the event's fields."""
    subject = (names or PodNames())(event) if event.uid else event.node
    extra = " ".join(
        f"{key}={zone_text(value) if key == 'zone' else value}"
        for key, value in sorted(event.fields.items())
    )
    return printable(f"{subject or '-'}  {extra}".rstrip())


def event_row(event: Event, now_ms: int, names: PodNames) -> list[str]:
    """``id, type, age, replica, subject and fields`` of one event, every part printable."""
    ms = int(event.id.split("-", 1)[0])
    return [
        event.id,
        event.type,
        age(ms, now_ms),
        printable(event.replica or "-"),
        event_text(event, names),
    ]
