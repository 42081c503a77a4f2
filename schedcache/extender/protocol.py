"""The JSON of ``k8s.io/kube-scheduler/extender/v1``, as kube-scheduler speaks it.

The extender structs carry no JSON tags, so kube-scheduler sends Go's field names (``Pod``,
``Nodes``, ``NodeNames``, ``PodName`` ...) and reads answers with Go's decoder, which matches
keys case-insensitively; older extenders and tools send lower-case keys. So requests are read
with keys in any case, and answers use Go's field names. The ``Pod`` and ``Nodes`` inside are
``v1.Pod`` / ``v1.NodeList``, which do have JSON tags (``metadata``, ``spec``, ``items``).

Everything malformed raises :class:`ProtocolError` (HTTP 400) naming the field.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

from schedcache.errors import ValidationError
from schedcache.model.selectors import is_dns_subdomain
from schedcache.model.values import Pod
from schedcache.views.kept import Kept

MAX_SCORE = 10  # extenderv1.MaxExtenderPriority


class ProtocolError(ValueError):
    """A request that is not the extender protocol; the message names the field."""


@dataclass(frozen=True)
class FilterArgs:
    """ExtenderArgs: the pod, and the candidate nodes by name (``nodeCacheCapable: true``) or
    as full objects (``nodes``; their names are used, the cache's copies decide)."""

    pod: Pod
    node_names: list[str]
    full_nodes: bool  # the request carried Nodes rather than NodeNames: answer in kind
    nodes: list[Mapping[str, Any]]
    raw_pod: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # for --no-api binds
    # The pod's JSON in bytes, as LastPod wrote it to key it; 0 when it did not (a pod of over
    # 256 labels and annotations): what --bind-pod-from-filter keeps is bounded by it.
    pod_bytes: int = 0


@dataclass(frozen=True)
class BindArgs:
    """ExtenderBindingArgs."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def decode_json(body: bytes) -> Mapping[str, Any]:
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:
        raise ProtocolError(f"the body is not JSON: {error}") from None
    except RecursionError:  # json's C decoder recurses per nesting level
        raise ProtocolError("the body is nested too deeply") from None
    if not isinstance(value, Mapping):
        raise ProtocolError(f"the body must be a JSON object, not {type(value).__name__}")
    return value


def field(document: Mapping[str, Any], name: str) -> Any:
    """``document[name]`` with the key in any case, as Go's decoder matches it (an exact match
    wins); None when absent."""
    if name in document:
        return document[name]
    lowered = name.lower()
    for key, value in document.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


# The API server's own decoded copy of a pod by uid and resourceVersion, and the size of its
# JSON, or None (the extender's pending pods' watch: PendingPods.decoded).
Known = Callable[[str, str], "tuple[Pod, int] | None"]


def pod_arg(document: Mapping[str, Any]) -> tuple[Pod, Mapping[str, Any]]:
    """The request's ``Pod`` (a v1.Pod), read, and as it came."""
    pod, raw_pod, _ = sized_pod_arg(document)
    return pod, raw_pod


def sized_pod_arg(
    document: Mapping[str, Any], known: Known | None = None
) -> tuple[Pod, Mapping[str, Any], int]:
    """:func:`pod_arg`, and its JSON's length (0: not written, see ``LastPod.read_sized``).

    With ``known``: a pod whose ``metadata.uid`` and ``metadata.resourceVersion`` are those
    of a pod ``known`` holds is that pod, not decoded again (an object's content at one
    resourceVersion never changes: kube-scheduler sends its informer's copy); the length is
    then the known copy's JSON's."""
    raw_pod = field(document, "Pod")
    if not isinstance(raw_pod, Mapping):
        raise ProtocolError("Pod: required, a v1.Pod object")
    if known is not None and _shaped_as_known(raw_pod):
        metadata = raw_pod["metadata"]
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if uid and version and type(uid) is str and type(version) is str:
            found = known(uid, version)
            if found is not None:
                return found[0], raw_pod, found[1]
    pod, size = LAST_POD.read_sized(raw_pod)
    return pod, raw_pod, size


def _shaped_as_known(raw_pod: Mapping[str, Any]) -> bool:
    """Whether a body may stand for the watch's copy: shaped as a v1.Pod (metadata, spec and
    status objects, containers a list of objects: a body that is not is refused as before,
    400, found in review) and nominated nowhere (``status.nominatedNodeName`` is read from the
    body, extender/nominate.py: such a body is decoded, so what is held is what was judged)."""
    metadata, spec, status = (raw_pod.get(name) for name in ("metadata", "spec", "status"))
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return False
    if status is not None and not isinstance(status, Mapping):
        return False
    containers = spec.get("containers")
    if not isinstance(containers, list) or not all(isinstance(c, Mapping) for c in containers):
        return False
    return not (status and status.get("nominatedNodeName"))


def filter_args(document: Mapping[str, Any], known: Known | None = None) -> FilterArgs:
    """ExtenderArgs ``{Pod, Nodes, NodeNames}``; ``known``: see :func:`sized_pod_arg`."""
    pod, raw_pod, size = sized_pod_arg(document, known)
    names = field(document, "NodeNames")
    if names is not None:
        # One pass in C over 5,000 names (a generator of isinstance calls took 80 us at 500).
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise ProtocolError("NodeNames: must be a list of node names")
        return FilterArgs(pod, list(names), False, [], raw_pod, size)
    node_list = field(document, "Nodes")
    if not isinstance(node_list, Mapping):
        raise ProtocolError("NodeNames or Nodes: one is required")
    items = field(node_list, "items") or []
    if not isinstance(items, list) or not all(isinstance(item, Mapping) for item in items):
        raise ProtocolError("Nodes.items: must be a list of v1.Node objects")
    node_names = []
    for index, item in enumerate(items):
        metadata = field(item, "metadata")
        name = field(metadata, "name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ProtocolError(f"Nodes.items[{index}].metadata.name: required")
        node_names.append(name)
    return FilterArgs(pod, node_names, True, list(items), raw_pod, size)


class LastPod:
    """The last pod read, by its JSON: kube-scheduler sends one pod to filter, then the same
    to prioritize, and reading a pod (``Pod.from_k8s``) costs ~15x writing its JSON again
    (230 against 15 us for a plain pod): prioritize reuses filter's. One entry, swapped whole
    (thread-safe); the key is the pod's whole JSON, so only an identical pod is reused."""

    def __init__(self) -> None:
        self.last: tuple[str, Pod] | None = None

    def read(self, raw_pod: Mapping[str, Any]) -> Pod:
        return self.read_sized(raw_pod)[0]

    def read_sized(self, raw_pod: Mapping[str, Any]) -> tuple[Pod, int]:
        """The pod, and the length of the JSON it was keyed by (0 when it was not)."""
        key = ""
        if _few_labels(raw_pod):  # a pod of 50,000 labels is not written again for a key
            try:
                key = json.dumps(raw_pod, separators=(",", ":"))
            except (TypeError, ValueError, RecursionError):  # not from JSON: keep nothing
                key = ""
        last = self.last
        if key and last is not None and last[0] == key:
            return last[1], len(key)
        try:
            pod = Pod.from_k8s(raw_pod)
        except ValidationError as error:
            raise ProtocolError(f"Pod: {error}") from None
        if key:
            self.last = (key, pod)
        return pod, len(key)


def _few_labels(raw_pod: Mapping[str, Any], most: int = 256) -> bool:
    """Whether the pod's labels and annotations are few enough to key it by its JSON cheaply
    (the JSON of a pod of 50,000 labels costs the GIL what a /healthz answer waits for)."""
    metadata = raw_pod.get("metadata")
    if not isinstance(metadata, Mapping):
        return True
    count = 0
    for name in ("labels", "annotations"):
        value = metadata.get(name)
        if isinstance(value, Mapping):
            count += len(value)
    return count <= most


LAST_POD = LastPod()


def bind_args(document: Mapping[str, Any]) -> BindArgs:
    """ExtenderBindingArgs ``{PodName, PodNamespace, PodUID, Node}``."""
    values = {}
    for name in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = field(document, name)
        if not isinstance(value, str) or not value:
            raise ProtocolError(f"{name}: required, a non-empty string")
        values[name] = value
    return BindArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


def filter_result(
    args: FilterArgs,
    passed: list[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    error: str = "",
) -> dict[str, Any]:
    """ExtenderFilterResult: the nodes that passed, in the form they came in."""
    result: dict[str, Any] = {
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }
    if args.full_nodes:
        kept = set(passed)
        items = [item for item in args.nodes if _name(item) in kept]
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": items}
        result["NodeNames"] = None
    else:
        result["Nodes"] = None
        result["NodeNames"] = passed
    return result


class AllPassed:
    """The JSON of an ExtenderFilterResult that passed every one of its ``NodeNames`` (the
    bytes :func:`encode` writes for it), kept for the names sent again: kube-scheduler's
    samples recur (at 5,000 nodes and 500 names a call, ten windows in turn), and writing 500
    names took ~40-190 us. Keyed by the names joined by NUL (a list with a NUL in a name is
    written, not kept); the newest ``KEPT`` lists whose keys and answers come to
    ``KEPT_CHARS`` at most all together (5,000 names as clouds write them, ~40 characters,
    take ~400 KiB). Not thread-safe: the extender calls it under its snapshot lock."""

    KEPT = 32
    KEPT_CHARS = 4 * 1024 * 1024

    def __init__(self) -> None:
        # (their size: the key's length and the answer's, KEPT_CHARS at most all together)
        self.kept: Kept[bytes] = Kept(lambda key, answer: len(key) + len(answer))

    def encode(self, names: list[str]) -> bytes:
        key = "\0".join(names)
        if key.count("\0") != len(names) - 1:
            return self._written(names)
        kept = self.kept.take(key)
        if kept is None:
            kept = self._written(names)
            self.kept.keep(key, kept, self.KEPT, self.KEPT_CHARS)
        return kept

    @staticmethod
    def _written(names: list[str]) -> bytes:
        listed = json.dumps(names, separators=(",", ":"))
        return f"{_ALL_PASSED}{listed}}}".encode()


# An ExtenderFilterResult that passed every name, up to its NodeNames (filter_result's keys in
# its order, as encode writes them).
_ALL_PASSED = (
    '{"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":"","Nodes":null,"NodeNames":'
)


def host_priorities(scores: Mapping[str, int]) -> list[dict[str, Any]]:
    """HostPriorityList ``[{Host, Score}]``."""
    return [{"Host": host, "Score": score} for host, score in scores.items()]


def encode(answer: Any) -> bytes:
    """An answer's JSON, as ``json.dumps`` with compact separators writes it. A
    HostPriorityList (prioritize's list, from :func:`host_priorities`) is written item by item
    (:func:`encode_scores`): the generic encoder took 5.5 ms for 5,000 hosts, this 1.3 ms."""
    if isinstance(answer, list):
        return _encode_pairs([(item["Host"], item["Score"]) for item in answer])
    return json.dumps(answer, separators=(",", ":")).encode()


def encode_scores(scores: Mapping[str, int]) -> bytes:
    """The HostPriorityList ``[{Host, Score}]`` of ``scores`` (host -> score, in its order),
    written straight from the mapping: the bytes ``encode(host_priorities(scores))`` writes,
    without building a dict per host first (500 hosts, the scaling included: ~140 -> ~86 us)."""
    return _encode_pairs(scores.items())


def host_start(host: str) -> str:
    """A HostPriorityList item's JSON up to its score: ``{"Host":"<host>","Score":``."""
    return f'{{"Host":{encode_basestring_ascii(host)},"Score":'


def host_items(starts: Sequence[str]) -> list[str]:
    """The pieces of a HostPriorityList of the hosts whose items start ``starts``, their scores
    left out (:func:`encode_items` fills them): kept by a caller whose hosts recur."""
    items: list[str] = [""] * (2 * len(starts))
    items[::2] = starts
    return items


def encode_items(items: list[str], scores: Sequence[int]) -> bytes:
    """The HostPriorityList of the hosts whose pieces are ``items`` (:func:`host_items`, not
    changed) with ``scores``, each an int of 0 to ``MAX_SCORE``: the bytes :func:`encode_scores`
    writes for the same pairs, in two passes in C and one join (no Python step per host)."""
    if not items:
        return b"[]"
    written = items.copy()
    written[1::2] = map(_ITEMS_ENDED.__getitem__, scores)
    return f"[{''.join(written)[:-1]}]".encode()


def _encode_pairs(pairs: Iterable[tuple[str, Any]]) -> bytes:
    # Each host's '{"Host":"...","Score":' written once (node names recur from call to call),
    # each score's ending too: per item, two lookups and a concatenation.
    hosts, endings = _HOSTS, _SCORES
    if len(hosts) >= MAX_HOSTS and time.monotonic() - _HOSTS_FULL[0] >= HOSTS_KEPT_FOR:
        # Full for a period: the names of today's calls take its room again (a cluster of
        # more nodes than it holds would otherwise refill it on every call).
        hosts.clear()
    items = []
    for host, score in pairs:
        start = hosts.get(host)
        if start is None:
            start = host_start(host)
            # A name a node can have, while there is room: bounded, kept.
            if len(hosts) < MAX_HOSTS and is_dns_subdomain(host):
                hosts[host] = start
                if len(hosts) == MAX_HOSTS:
                    _HOSTS_FULL[0] = time.monotonic()
        ending = endings[score] if type(score) is int and 0 <= score <= MAX_SCORE else None
        items.append(start + (ending or f"{score:d}}}"))
    return f"[{','.join(items)}]".encode()


# encode's pieces: each host's start (at most MAX_HOSTS kept, of the names callers sent those
# a node can have: a DNS subdomain of at most 253 characters, so ~10 MiB at most; any other
# name, up to a body's megabytes, is written but not kept), and each score's ending.
MAX_HOSTS = 16_384
HOSTS_KEPT_FOR = 60.0  # seconds a full set of host starts is kept before it may be cleared
_HOSTS_FULL = [0.0]  # when it was last filled (time.monotonic)
_HOSTS: dict[str, str] = {}
_SCORES = [f"{score:d}}}" for score in range(MAX_SCORE + 1)]
_ITEMS_ENDED = [f"{ending}," for ending in _SCORES]  # (encode_items: the last comma cut)


def bind_result(error: str = "") -> dict[str, str]:
    """ExtenderBindingResult ``{Error}``: empty when bound."""
    return {"Error": error}


def _name(item: Mapping[str, Any]) -> str:
    metadata = field(item, "metadata")
    name = field(metadata, "name") if isinstance(metadata, Mapping) else ""
    return name if isinstance(name, str) else ""


__all__ = [
    "MAX_SCORE",
    "BindArgs",
    "FilterArgs",
    "ProtocolError",
    "bind_args",
    "bind_result",
    "decode_json",
    "encode",
    "encode_items",
    "encode_scores",
    "field",
    "filter_args",
    "filter_result",
    "host_items",
    "host_priorities",
    "host_start",
]
