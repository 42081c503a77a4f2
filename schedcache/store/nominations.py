"""Nominations held in the cache (lua/_nominations.lua, docs/preemption.md): a preemptor's
room reserved on its nominated node, atomically for every replica's claims, until its claim
lands, it is denominated, or its ttl lapses.

kube-scheduler keeps ``nominatedNodeName`` in one process's memory (the nominator) and counts
nominated pods of equal or higher priority in every filter of that node (addNominatedPods);
with N replicas that memory is not shared, and the victims' room went to another replica's
pod. Here the claim itself (``sc_assume_pod``) counts them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from schedcache.errors import ValidationError
from schedcache.model.aggregates import contribution_string
from schedcache.model.resources import HostPort, Resource
from schedcache.model.values import Pod
from schedcache.store.commands import MAX_NOW, Command, milliseconds, pod_subject
from schedcache.store.responses import as_text

if TYPE_CHECKING:
    from schedcache.store.store import Store

#: A nomination's default life (s): long enough for victims' graceful termination (30 s by
#: default) and the preemptor's next attempt; a preemptor that never comes back frees it then.
NOMINATION_TTL = 60.0
#: Nominations one node holds at most (NOM.MAX_PER_NODE in lua/_nominations.lua).
MAX_PER_NODE = 16


#: Bytes of victims' names a nomination keeps (NOM.VICTIM_BYTES): the first ones that fit.
VICTIM_BYTES = 65536


def nominate_pod(
    pod: Pod,
    node: str,
    ttl: float = NOMINATION_TTL,
    now: float | None = None,
    victims: Sequence[str] = (),
) -> Command:
    """``sc_nominate_pod``: hold ``pod``'s requests on ``node`` for ``ttl`` seconds;
    ``victims`` (``namespace/name``) are kept with it for ``explain`` (as many as fit in
    VICTIM_BYTES)."""
    subject = pod_subject(pod)
    if not isinstance(node, str) or not node or len(node.split()) != 1:
        raise ValidationError(subject, "status.nominatedNodeName", f"{node!r} is not a node name")
    if not ttl or ttl <= 0:
        raise ValidationError(subject, "ttl", f"{ttl!r}: a nomination needs a positive ttl")
    return Command(
        "nominate_pod",
        subject,
        (
            pod.uid,
            node,
            pod.priority,
            milliseconds(ttl, subject=subject, field="ttl"),
            contribution_string(pod),
            milliseconds(now, subject=subject, field="now", maximum=MAX_NOW),
            _victims(victims),
        ),
    )


def _victims(names: Sequence[str]) -> str:
    kept: list[str] = []
    size = 0
    for name in names:
        if not name or len(name.split()) != 1:
            continue
        size += len(name.encode()) + 1
        if size > VICTIM_BYTES:
            break
        kept.append(name)
    return " ".join(kept)


def denominate_pod(pod: Pod, now: float | None = None) -> Command:
    """``sc_denominate_pod``: drop ``pod``'s nomination (and lapsed ones)."""
    subject = pod_subject(pod)
    return Command(
        "denominate_pod",
        subject,
        (pod.uid, milliseconds(now, subject=subject, field="now", maximum=MAX_NOW)),
    )


def read_nomination(store: Store, uid: str) -> tuple[str, float] | None:
    """The node ``uid`` is nominated to and the nomination's deadline (s since the epoch, the
    server's clock), or None when it has none that is live."""
    keys = store.keys

    def read() -> list[Any]:
        # The server holding the cache (in a cluster, its slot's primary: TIME has no key).
        pipe = store.server().pipeline(transaction=False)
        pipe.hget(keys.nominated_nodes, uid)
        pipe.zscore(keys.nominated, uid)
        pipe.time()
        return list(pipe.execute())

    node, deadline, (seconds, micros) = store.retrying(read, "reading a nomination")
    if node is None or deadline is None:
        return None
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    if deadline <= now_ms:
        return None
    name = node.decode() if isinstance(node, bytes) else str(node)
    return name, deadline / 1000.0


def read_victims(store: Store, uid: str) -> list[str]:
    """The victims (``namespace/name``) kept with ``uid``'s nomination, [] when none."""
    name = store.keys.nomination_victims
    text = store.retrying(lambda: store.client.hget(name, uid), "reading a nomination")
    if text is None:
        return []
    return (text.decode() if isinstance(text, bytes) else str(text)).split()


def read_nominated(store: Store) -> dict[str, list[Pod]]:
    """Every live nomination by node, each as a Pod holding what the nomination holds (uid,
    priority, requests, host ports): what upstream's dry run adds to a node
    (addNominatedPods). One ZCARD while nothing is nominated."""
    keys = store.keys
    client = store.client

    def read() -> dict[str, list[Pod]]:
        if not client.zcard(keys.nominated):
            return {}
        (seconds, micros) = store.server().time()
        now = int(seconds) * 1000 + int(micros) // 1000
        uids = [as_text(u) for u in client.zrangebyscore(keys.nominated, now + 1, "+inf")]
        if not uids:
            return {}
        nodes = [
            as_text(n) if n is not None else "" for n in client.hmget(keys.nominated_nodes, uids)
        ]
        pipe = client.pipeline(transaction=False)
        for uid, node in zip(uids, nodes, strict=True):
            pipe.hget(keys.nominations(node or "-"), uid)
        found: dict[str, list[Pod]] = {}
        for uid, node, value in zip(uids, nodes, pipe.execute(), strict=True):
            if node and value is not None:
                pod = nominee(uid, as_text(value))
                if pod is not None:
                    found.setdefault(node, []).append(pod)
        return found

    return store.retrying(read, "reading nominations")


def nominee(uid: str, value: str) -> Pod | None:
    """A stored nomination ``"<priority> <deadline ms> <contribution>"`` as a Pod (None when
    it does not read)."""
    words = value.split()
    if len(words) < 2 or len(words) % 2:
        return None
    ports: list[HostPort] = []
    try:
        priority = int(words[0])
        pairs = {words[i]: int(words[i + 1]) for i in range(2, len(words), 2)}
        for name in pairs:
            if name.startswith("p:"):
                ip, protocol, number = name[2:].split("|")
                ports.append((ip, protocol, int(number)))
    except ValueError:
        return None
    scalars = {f[4:]: n for f, n in pairs.items() if f.startswith("r:s:")}
    requests = Resource(
        milli_cpu=pairs.get("r:cpu", 0),
        memory=pairs.get("r:mem", 0),
        ephemeral_storage=pairs.get("r:eph", 0),
        scalar_resources=scalars,
    )
    non_zero = Resource(
        milli_cpu=requests.milli_cpu + pairs.get("z:cpu", 0),
        memory=requests.memory + pairs.get("z:mem", 0),
    )
    return Pod(
        uid=uid,
        name=f"nominee-{uid}",
        requests=requests,
        non_zero_requests=non_zero,
        host_ports=tuple(ports),
        priority=priority,
    )
