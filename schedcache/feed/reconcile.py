"""What a full list speaks for, shared by a relist (``schedcache sync``) and ``load --prune``.

A list of Nodes speaks for every node of the cache; a list of Pods for the pods the informers
put there (state ``added``) and for the pending pods in the scheduling queue, never for
assumed ones: the scheduler placed those and no list holds them until their binding lands. A
list of PodGroups (``sync`` only) speaks for every PodGroup the cache holds.
"""

from __future__ import annotations

from schedcache.cache import Cache
from schedcache.errors import ValidationError
from schedcache.store import commands
from schedcache.store.commands import Command
from schedcache.store.podgroups import sync_pod_group_gone
from schedcache.store.responses import as_text

RESOURCES = ("nodes", "pods", "podgroups")


def held(cache: Cache, resource: str) -> set[str]:
    """What the cache holds that a list of ``resource`` speaks for: node names, or the uids of
    added (not assumed) pods and of queued ones."""
    client, keys = cache.client, cache.keys
    if resource == "nodes":
        return {as_text(name) for name in client.smembers(keys.nodes)}
    if resource == "podgroups":
        return {as_text(name) for name in client.smembers(keys.pod_groups)}
    pods = {as_text(uid) for uid in client.smembers(keys.pods)}
    queued = {as_text(uid) for uid in client.smembers(keys.queued_pods)}
    return (pods - {as_text(uid) for uid in client.smembers(keys.assumed)}) | queued


def removal(resource: str, key: str, version: str | None) -> Command:
    """The command removing node ``key`` or the pod with uid ``key``: at a list's
    ``version`` (so a newer change another feeder applied wins), or unconditionally; the
    PodGroup ``key`` ("<namespace>/<name>") at a list's version only."""
    if resource == "podgroups":
        if version is None:
            raise ValidationError(f"pod group {key}", "version", "removed at a list's version")
        return sync_pod_group_gone(key, version)
    if version is not None:
        if resource == "nodes":
            return commands.sync_node_gone(key, version)
        return commands.sync_pod_gone(key, version)
    if resource == "nodes":
        return commands.remove_node(key)
    return commands.remove_pod_by_uid(key)
