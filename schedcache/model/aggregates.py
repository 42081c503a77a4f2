"""How a pod's requests become integer fields of its node's hash, and back.

Lua never decodes a pod: Python flattens its contribution into ``(field, amount)`` pairs that
the functions add to the node with HINCRBY and store on the pod record, so removal subtracts
exactly what was added (never the caller's copy). Fields:

=================  =======================================================
``r:cpu``          requested millicores
``r:mem``          requested memory, bytes
``r:eph``          requested ephemeral storage, bytes
``r:s:<name>``     requested scalar resource (extended, hugepages, ...)
``z:cpu/z:mem``    non-zero requested (100m / 200 MiB defaults per container) minus
                   requested: zero, so not written, for pods that state their requests
``aff``/``anti``   pods with affinity / with required anti-affinity
``xt``/``x:<key>`` required anti-affinity terms, in all / by topology key (what a claim's
                   existing-anti-affinity check reads of a node changed since the snapshot:
                   docs/constraints.md)
``p:<ip>|<proto>|<port>``  pods using that host port (a refcount; the port set is its keys)
``v:<ns>/<claim>`` pods using that PVC
=================  =======================================================

The contribution Lua takes also carries the pod's labels as ``l:<key>=<value> 1``
(``arrivals.label_pairs``): the queue's wake compares them (docs/queue.md); Lua keeps them
out of the node's hash, so they are no total.

A node's allocatable is sent the same way, as ``cpu``, ``mem``, ``eph``, ``pods`` and
``s:<name>``, and stored under ``a:``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping

from schedcache.errors import ValidationError
from schedcache.model.arrivals import label_pairs
from schedcache.model.resources import HostPort
from schedcache.model.values import Node, Pod, Resource

Pairs = list[tuple[str, int]]


def pod_contribution(pod: Pod) -> Pairs:
    """The amounts ``pod`` adds to its node; zero amounts are left out."""
    requests, non_zero = pod.requests, pod.non_zero_requests
    pairs: Pairs = [
        ("r:cpu", requests.milli_cpu),
        ("r:mem", requests.memory),
        ("r:eph", requests.ephemeral_storage),
        ("z:cpu", non_zero.milli_cpu - requests.milli_cpu),
        ("z:mem", non_zero.memory - requests.memory),
        ("aff", int(pod.has_affinity)),
        ("anti", int(pod.has_required_anti_affinity)),
    ]
    if requests.scalar_resources:
        pairs += [(f"r:s:{name}", amount) for name, amount in requests.scalar_resources.items()]
    if pod.host_ports:
        # Host ports are a set per pod: a pod that lists one port twice holds it once.
        pairs += [(port_field(port), 1) for port in dict.fromkeys(pod.host_ports)]
    if pod.pvc_claims:
        pairs += [(f"v:{claim}", count) for claim, count in Counter(pod.pvc_claims).items()]
    if pod.pod_anti_affinity:
        # A term without a key applies nowhere (no node has the label "").
        keys = Counter(t.topology_key for t in pod.pod_anti_affinity if t.topology_key)
        pairs += [("xt", sum(keys.values()))]
        pairs += [(f"x:{key}", count) for key, count in keys.items()]
    return [(field, amount) for field, amount in pairs if amount != 0]


def contribution_string(pod: Pod) -> str:
    """The contribution as Lua takes and stores it: ``"<field> <amount> <field> <amount> ..."``,
    the labels' ``l:`` fields last."""
    pairs = pod_contribution(pod) + label_pairs(pod)
    text = " ".join(f"{field} {amount}" for field, amount in pairs)
    if len(text.split()) != 2 * len(pairs):  # a name with whitespace would shift the pairs
        bad = next(field for field, _ in pairs if len(field.split()) != 1)
        raise ValidationError(
            f"pod {pod.namespace}/{pod.name} (uid {pod.uid})",
            bad.split(":", 1)[0],
            f"{bad!r} contains whitespace",
        )
    return text


# The most a node's total may hold, either sign (lua/_helpers.lua, BOUNDS.TOTAL_LIMIT: the
# same figure). Lua's numbers are doubles, exact to 2^53 and near int64's edge only to ~1,000,
# so the claim checks a sum against this margin below int64 (2^63 - 1 = 9.22e18), not int64.
NODE_TOTAL_LIMIT = 9 * 10**18

_RESOURCE_NAMES = {
    "cpu": "cpu (millicores)",
    "mem": "memory (bytes)",
    "eph": "ephemeral-storage (bytes)",
}


def describe_field(field: str) -> str:
    """A node total's field as the user knows it (``r:mem`` -> "requested memory (bytes)"):
    errors name what the manifest said, not the hash's field."""
    kind, _, rest = field.partition(":")
    if kind in ("r", "z") and rest:
        name = _RESOURCE_NAMES.get(rest) or rest.removeprefix("s:")
        return ("requested " if kind == "r" else "non-zero requested ") + name
    if kind == "p" and rest:
        ip, protocol, number = [*rest.split("|"), "", ""][:3]
        return f"pods on host port {protocol}/{number}" + (f" ({ip})" if ip else "")
    if kind == "v" and rest:
        return f"pods using volume claim {rest}"
    if kind == "x" and rest:
        return f"required anti-affinity terms by topology key {rest}"
    return {
        "aff": "pods with affinity",
        "anti": "pods with required anti-affinity",
        "xt": "required anti-affinity terms",
    }.get(field, field)


def port_field(port: HostPort) -> str:
    ip, protocol, number = port
    return f"p:{ip}|{protocol}|{number}"


def resource_pairs(resource: Resource) -> Pairs:
    """A node's allocatable as the arguments of ``sc_add_node``."""
    pairs: Pairs = [
        ("cpu", resource.milli_cpu),
        ("mem", resource.memory),
        ("eph", resource.ephemeral_storage),
        ("pods", resource.allowed_pod_number),
    ]
    pairs += [(f"s:{name}", amount) for name, amount in sorted(resource.scalar_resources.items())]
    return [(field, amount) for field, amount in pairs if amount != 0]


def image_pairs(node: Node) -> Pairs:
    """Every image name of the node with its size (an image may have several names)."""
    return [(name, size) for names, size in node.images for name in names]


def spec_digest(node: Node) -> int:
    """What decides the node's topology domains and whether spread counts it (labels, taints,
    unschedulable), as one integer (< 2**56): a node write whose digest differs is a spec change
    that claims judged on an older snapshot must not trust (lua/_changes.lua)."""
    text = json.dumps(
        [sorted(node.labels.items()), sorted(node.taints), node.unschedulable],
        separators=(",", ":"),
    )
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "big")


def flatten(pairs: Pairs) -> list[str | int]:
    """``[n, field1, amount1, ...]``: the shape the Lua functions read."""
    flat: list[str | int] = [len(pairs)]
    for field, amount in pairs:
        flat += [field, amount]
    return flat


# A resource's fields in the node hash, by prefix: cpu, memory, ephemeral storage, pods.
_RESOURCE_FIELDS = {
    prefix: tuple(f"{prefix}{name}" for name in ("cpu", "mem", "eph", "pods"))
    for prefix in ("a:", "r:")
}


class NodeFields:
    """A node hash (``HGETALL``), decoded in one pass and read as resources. (Hot: a snapshot
    decodes one per changed node; a pass per resource kind cost twice as much.)"""

    def __init__(self, raw: Mapping[bytes, bytes]) -> None:
        strings: dict[str, bytes] = {}
        scalars: dict[str, dict[str, int]] = {"a": {}, "r": {}}
        ports: set[HostPort] = set()
        claims: dict[str, int] = {}
        for key, value in raw.items():
            field = key.decode()
            strings[field] = value
            if field[1:2] != ":":
                continue
            kind = field[0]
            if kind == "p":
                ip, protocol, number = field[2:].rsplit("|", 2)
                ports.add((ip, protocol, int(number)))
            elif kind == "v":
                claims[field[2:]] = int(value)
            elif kind in scalars and field.startswith("s:", 2):
                scalars[kind][field[4:]] = int(value)
        self.strings = strings
        self._scalars = scalars
        self.used_ports = ports
        self.pvc_ref_counts = claims

    def integer(self, field: str) -> int:
        value = self.strings.get(field)
        return int(value) if value is not None else 0

    def resource(self, prefix: str, *, with_pods: bool = False) -> Resource:
        """``prefix``: "a:" (allocatable) or "r:" (requested)."""
        get = self.strings.get
        cpu_field, memory_field, storage_field, pods_field = _RESOURCE_FIELDS[prefix]
        cpu, memory, storage = get(cpu_field), get(memory_field), get(storage_field)
        pods = get(pods_field) if with_pods else None
        return Resource(
            milli_cpu=0 if cpu is None else int(cpu),
            memory=0 if memory is None else int(memory),
            ephemeral_storage=0 if storage is None else int(storage),
            allowed_pod_number=0 if pods is None else int(pods),
            scalar_resources=dict(self._scalars[prefix[0]]),
        )

    @property
    def allocatable(self) -> Resource:
        return self.resource("a:", with_pods=True)

    @property
    def requested(self) -> Resource:
        return self.resource("r:")

    @property
    def non_zero_requested(self) -> Resource:
        return Resource(
            milli_cpu=self.integer("r:cpu") + self.integer("z:cpu"),
            memory=self.integer("r:mem") + self.integer("z:mem"),
        )

    @property
    def exists(self) -> bool:
        return self.strings.get("exists") == b"1"

    @property
    def generation(self) -> int:
        return self.integer("gen")
