"""PodGroups in the cache (scheduler-plugins' Coscheduling, ``scheduling.x-k8s.io/v1alpha1``):
what ``sync`` feeds (``sc_sync_podgroup``, lua/sync_podgroup.lua) and what the reference
scheduler reads of a group when a member is popped: one HMGET (docs/gangs.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schedcache.errors import ValidationError
from schedcache.store.commands import Command, resource_version
from schedcache.store.gang import MAX_GANG_MEMBERS
from schedcache.store.keys import Keys
from schedcache.store.responses import as_text

API = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
# The Lua side's bound on minMember and scheduleTimeoutSeconds (int32, as the CRD's).
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class PodGroup:
    """What the scheduler reads of a PodGroup: ``minMember`` and ``scheduleTimeoutSeconds``
    (None: no timeout)."""

    name: str  # "<namespace>/<name>"
    min_member: int
    timeout: float | None = None

    @classmethod
    def from_k8s(cls, obj: Mapping[str, Any]) -> PodGroup:
        """The PodGroup of a manifest; :class:`ValidationError` without a name."""
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name or "/" in name:
            raise ValidationError("pod group", "metadata.name", f"{name!r} is not a name")
        namespace = meta.get("namespace") or "default"
        spec = spec if isinstance(spec, Mapping) else {}
        minimum = spec.get("minMember", 1)
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
            minimum = 1  # the CRD's default and minimum
        timeout = spec.get("scheduleTimeoutSeconds")
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
            timeout = None
        return cls(f"{namespace}/{name}", min(minimum, INT_MAX), timeout and min(timeout, INT_MAX))

    def too_large(self) -> str:
        """Why one gang claim cannot place this group all or nothing ("" when it can): a
        ``minMember`` above the claim's cap would have to be claimed in parts."""
        if self.min_member <= MAX_GANG_MEMBERS:
            return ""
        return (
            f'pod group "{self.name}": minMember {self.min_member} is more than the '
            f"{MAX_GANG_MEMBERS} members one gang claim places all or nothing"
        )


def sync_pod_group(group: PodGroup, version: str) -> Command:
    """The PodGroup as a list or watch showed it at ``version`` (add or update)."""
    subject = f"pod group {group.name}"
    version = resource_version(version, subject)
    timeout = "" if group.timeout is None else int(group.timeout)
    return Command(
        "sync_podgroup", subject, (version, "set", group.name, group.min_member, timeout)
    )


def sync_pod_group_gone(name: str, version: str) -> Command:
    """PodGroup ``name`` ("<namespace>/<name>") deleted, or not in a list, at ``version``."""
    subject = f"pod group {name}"
    return Command("sync_podgroup", subject, (resource_version(version, subject), "delete", name))


def read_pod_group(client: Any, keys: Keys, name: str) -> PodGroup | None:
    """The PodGroup ``name`` as the cache holds it (one HMGET); None when sync fed none."""
    minimum, timeout = client.hmget(keys.pod_group(name), "min", "timeout")
    if minimum is None:
        return None
    seconds = as_text(timeout) if timeout is not None else ""
    return PodGroup(name, int(minimum), float(seconds) if seconds else None)
