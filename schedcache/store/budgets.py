"""PodDisruptionBudgets kept in the cache (lua/sync_budget.lua, docs/preemption.md): what
``schedcache sync`` lists and watches (policy/v1), read by preemption (the reference
scheduler's PostFilter and the extender's preempt verb) to count PDB violations as upstream.

A budget is stored as the part preemption reads (selector, ``status.disruptionsAllowed``,
``status.disruptedPods``), versioned by its resourceVersion as nodes and pods are, and is no
part of the event-sourced state (no event, no replay): a reservation-free read of the whole
hash, like upstream's PDB lister."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from schedcache.errors import ValidationError
from schedcache.model.plugins.preemption import Budget
from schedcache.store.commands import Command, resource_version
from schedcache.store.responses import as_bytes, as_text

if TYPE_CHECKING:
    from schedcache.store.store import Store

log = logging.getLogger(__name__)


def budget_key(obj: Mapping[str, Any]) -> str:
    """``<namespace>/<name>`` of a PodDisruptionBudget manifest (ValidationError when it has
    no name)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name, namespace = meta.get("name"), meta.get("namespace") or "default"
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        raise ValidationError("poddisruptionbudget", "metadata.name", "is required")
    return f"{namespace}/{name}"


def stored_budget(obj: Mapping[str, Any]) -> str:
    """The JSON kept for a PodDisruptionBudget: what :meth:`Budget.from_k8s` reads, checked by
    it first (a malformed budget raises ValidationError naming it)."""
    key = budget_key(obj)
    try:
        Budget.from_k8s(obj)
    except (AttributeError, KeyError, TypeError) as error:
        raise ValidationError(f"poddisruptionbudget {key}", "spec.selector", str(error)) from None
    namespace, name = key.split("/", 1)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    kept = {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"selector": spec.get("selector")},
        "status": {
            "disruptionsAllowed": status.get("disruptionsAllowed", 0),
            "disruptedPods": dict(status.get("disruptedPods") or {}),
        },
    }
    return json.dumps(kept, separators=(",", ":"), sort_keys=True)


def sync_budget(obj: Mapping[str, Any], version: str, present: bool = True) -> Command:
    """``sc_sync_budget``: the budget as a list or watch showed it at ``version``."""
    key = budget_key(obj)
    subject = f"poddisruptionbudget {key}"
    version = resource_version(version, subject)
    body = stored_budget(obj) if present else ""
    return Command("sync_budget", subject, (version, key, body))


def sync_budget_gone(key: str, version: str) -> Command:
    """Budget ``key`` (``<namespace>/<name>``) no longer in the API server's list at
    ``version``."""
    subject = f"poddisruptionbudget {key}"
    return Command("sync_budget", subject, (resource_version(version, subject), key, ""))


def budget_keys(store: Store) -> set[str]:
    """Every budget the cache holds (what a relist speaks for)."""
    name = store.keys.budgets
    return {as_text(k) for k in store.retrying(lambda: store.client.hkeys(name), "budgets")}


def read_budgets(store: Store) -> list[Budget]:
    """The PodDisruptionBudgets the cache holds, in key order; one that no longer reads (a
    corrupt field) is logged and left out."""
    name = store.keys.budgets
    stored = store.retrying(lambda: store.client.hgetall(name), "reading budgets")
    budgets = []
    for raw_key, body in sorted(stored.items()):
        key = as_bytes(raw_key).decode(errors="replace")
        try:  # UnicodeDecodeError is a ValueError; KeyError: an expression without its key
            budgets.append(Budget.from_k8s(json.loads(as_text(body))))
        except (ValueError, TypeError, KeyError, ValidationError, AttributeError) as error:
            log.warning("poddisruptionbudget %s in the cache does not read: %s", key, error)
    return budgets
