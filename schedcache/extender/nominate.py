"""The nomination kube-scheduler made, held in the cache (docs/preemption.md, "The extender").

kube-scheduler calls the preempt verb with every candidate node of its dry run, then picks ONE
of those the extender answered, deletes the victims and sets the preemptor's
``status.nominatedNodeName``: so the verb cannot hold the room (it would hold every candidate
node's). The preemptor's next filter call carries ``status.nominatedNodeName``: from that call
on, its requests are held on that node for every replica's claims (``sc_nominate_pod``), as the
reference scheduler holds its own nominations.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from schedcache.cache import Cache
from schedcache.errors import CacheError, ValidationError
from schedcache.extender.protocol import FilterArgs
from schedcache.store.nominations import NOMINATION_TTL, nominate_pod, read_nomination

log = logging.getLogger(__name__)


def nominated_node(raw_pod: Mapping[str, Any]) -> str:
    """``status.nominatedNodeName`` of a pod as kube-scheduler sent it ("" when none)."""
    status = raw_pod.get("status")
    name = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
    return name if isinstance(name, str) else ""


def hold_nomination(cache: Cache, args: FilterArgs, ttl: float = NOMINATION_TTL) -> bool:
    """Hold the nomination of a filter call's pod that carries ``status.nominatedNodeName``
    (unbound, not ``preemptionPolicy: Never``); whether one was written. One read for such a
    pod only, nothing for others; a nomination held on the same node is left as it is (every
    attempt does not push its deadline back); a node gone or full of nominations is logged."""
    node = nominated_node(args.raw_pod)
    pod = args.pod
    if not node or pod.node_name or pod.preempt_never:
        return False
    held = read_nomination(cache.store, pod.uid)
    if held is not None and held[0] == node:
        return False
    try:
        cache.run(nominate_pod(pod, node, ttl))
    except (CacheError, ValidationError) as error:
        log.info("pod %s: nomination to %s not held: %s", pod.full_name, node, error)
        return False
    return True
