"""Namespaces' labels kept in the cache (lua/sync_namespace.lua, docs/constraints.md): what
``schedcache sync`` lists and watches (v1 Namespaces) and ``load`` reads from manifests, so an
inter-pod term's non-empty ``namespaceSelector`` selects namespaces by their labels as
upstream's does. Kept as one hash (name -> labels JSON) and a generation, ``nsgen``, bumped by
every change of labels: a replica re-reads the hash only when the generation moved, and a
claim that read namespace labels carries the generation it saw (lua/_claims.lua refuses it as
``namespace-changed`` when it moved). No part of the event-sourced state (no event, no
replay)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from schedcache.errors import ValidationError
from schedcache.store.commands import Command, resource_version
from schedcache.store.responses import as_text

if TYPE_CHECKING:
    from schedcache.store.store import Store

log = logging.getLogger(__name__)

#: Each namespace's labels, by name.
NamespaceLabels = Mapping[str, Mapping[str, str]]


def namespace_name(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` of a Namespace manifest (ValidationError when it has none)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValidationError("namespace", "metadata.name", "is required")
    return name


def stored_labels(obj: Mapping[str, Any]) -> str:
    """The JSON kept for a Namespace: its labels, keys sorted (equal labels, equal text: the
    cache bumps ``nsgen`` only on a real change). Labels that are not strings raise
    ValidationError naming the namespace."""
    name = namespace_name(obj)
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ValidationError(f"namespace {name}", "metadata.labels", "must map strings to strings")
    return json.dumps(dict(labels), separators=(",", ":"), sort_keys=True)


def sync_namespace(obj: Mapping[str, Any], version: str, present: bool = True) -> Command:
    """``sc_sync_namespace``: the namespace as a list or watch showed it at ``version``."""
    name = namespace_name(obj)
    subject = f"namespace {name}"
    version = resource_version(version, subject)
    return Command(
        "sync_namespace", subject, (version, name, stored_labels(obj) if present else "")
    )


def sync_namespace_gone(name: str, version: str) -> Command:
    """Namespace ``name`` no longer in the API server's list at ``version``."""
    subject = f"namespace {name}"
    return Command("sync_namespace", subject, (resource_version(version, subject), name, ""))


def namespace_names(store: Store) -> set[str]:
    """Every namespace the cache holds (what a relist speaks for)."""
    name = store.keys.namespaces
    return {as_text(k) for k in store.retrying(lambda: store.client.hkeys(name), "namespaces")}


def parse_namespaces(reply: Any) -> tuple[int, dict[str, dict[str, str]] | None]:
    """``sc_read_namespaces``'s reply: the generation, and every namespace's labels when the
    caller's generation was not the live one (None when it was). A field that does not read
    (a corrupt value) is logged and read as no labels."""
    generation = int(as_text(reply[0]))
    if len(reply) < 2:
        return generation, None
    flat = reply[1]
    labels: dict[str, dict[str, str]] = {}
    for j in range(0, len(flat) - 1, 2):
        name, body = as_text(flat[j]), as_text(flat[j + 1])
        try:
            found = json.loads(body)
            if not isinstance(found, dict):
                raise ValueError("not an object")
            labels[name] = {str(k): str(v) for k, v in found.items()}
        except ValueError as error:
            log.warning("namespace %s in the cache does not read: %s", name, error)
            labels[name] = {}
    return generation, labels


def read_namespaces(store: Store) -> tuple[int, dict[str, dict[str, str]]]:
    """The namespace generation and every namespace's labels, from the primary."""
    generation, labels = parse_namespaces(store.read_function("read_namespaces", ""))
    return generation, labels or {}
