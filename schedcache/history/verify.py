"""Verify: the live keys against the replayed stream, and the invariants that always hold.

Every difference names the node or pod and the field. Run it on a quiet cache: a command
applied between the fold and the reads shows up as a difference.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedcache.store.fetch import fetch_pods, read_dump
from schedcache.store.store import Store

if TYPE_CHECKING:
    from schedcache.history.replay import ReplayState

NODE_FIELDS = (
    "node",
    "pods",
    "requested",
    "non_zero_requested",
    "allocatable",
    "used_ports",
    "image_states",
    "pvc_ref_counts",
    "generation",
)
NODE_META = ("exists", "gen", "zone", "blob")


@dataclass(frozen=True)
class Difference:
    subject: str  # "node n1", "pod <uid>", "cache"
    field: str
    expected: Any  # what the replay (or the invariant) says
    actual: Any  # what the live keys hold

    def __str__(self) -> str:
        return f"{self.subject}: {self.field}: expected {self.expected!r}, found {self.actual!r}"


def compare(state: ReplayState, store: Store) -> list[Difference]:
    """The replayed state against the live keys (``Cache.dump()``) and the pod records."""
    out: list[Difference] = []
    live = read_dump(store)
    replayed = state.node_infos()
    for name in sorted(set(replayed) | set(live.nodes)):
        want, have = replayed.get(name), live.nodes.get(name)
        if want is None or have is None:
            out.append(Difference(f"node {name}", "entry", want is not None, have is not None))
            continue
        for attribute in NODE_FIELDS:
            expected, actual = getattr(want, attribute), getattr(have, attribute)
            if attribute == "pods":
                expected, actual = [p.uid for p in expected], [p.uid for p in actual]
            if expected != actual:
                out.append(Difference(f"node {name}", attribute, expected, actual))
    if state.assumed_pods != live.assumed_pods:
        out.append(Difference("cache", "assumed pods", state.assumed_pods, live.assumed_pods))
    if state.generation != live.generation:
        out.append(Difference("cache", "generation", state.generation, live.generation))
    records = fetch_pods(store, sorted(set(state.pods) | _members(store, store.keys.pods)))
    for uid in sorted(set(state.pods) | set(records)):
        expected_pod, stored = state.pods.get(uid), records.get(uid)
        if expected_pod is None or stored is None:
            out.append(
                Difference(f"pod {uid}", "record", expected_pod is not None, stored is not None)
            )
            continue
        for label, expected, actual in (
            ("state", expected_pod.state, stored.state),
            ("node", expected_pod.node, stored.node),
            ("binding finished", expected_pod.binding_finished, stored.binding_finished),
            ("deadline", expected_pod.deadline_ms, stored.deadline_ms),
            ("pod", expected_pod.pod, stored.pod),
        ):
            if expected != actual:
                out.append(Difference(f"pod {uid}", label, expected, actual))
    return out


def invariants(store: Store) -> list[Difference]:
    """What must hold in the live keys whatever the history."""
    keys, client = store.keys, store.client
    out: list[Difference] = []
    nodes = sorted(_members(store, keys.nodes))
    pods = _members(store, keys.pods)
    assumed = _members(store, keys.assumed)
    pipe = client.pipeline(transaction=False)
    for name in nodes:
        pipe.hgetall(keys.node(name))
        pipe.zrange(keys.node_pods(name), 0, -1, withscores=True)
        pipe.zscore(keys.node_generations, name)
    replies = pipe.execute()
    anti_affine_pods = client.get(keys.anti_affine_pods)
    records = fetch_pods(store, sorted(pods | assumed))
    placements: dict[str, list[str]] = defaultdict(list)
    anti_total = 0
    for index, name in enumerate(nodes):
        raw, members, indexed = replies[3 * index : 3 * index + 3]
        subject = f"node {name}"
        fields = {k.decode(): int(v) for k, v in raw.items() if k.decode() not in ("zone", "blob")}
        anti_total += fields.get("anti", 0)
        if not raw:
            out.append(Difference(subject, "entry", "a hash for every member of nodes", None))
            continue
        uids = set()
        for member, score in members:
            uid = member.decode()
            uids.add(uid)
            placements[uid].append(name)
            record = records.get(uid)
            if record is not None and record.generation != int(score):
                out.append(
                    Difference(f"pod {uid}", "placement generation", record.generation, int(score))
                )
        if indexed is None:
            out.append(Difference(subject, "generation index", "an entry", None))
        if fields.get("exists") == 0 and not uids:
            out.append(Difference(subject, "entry", "no empty ghost or placeholder", "empty"))
        totals: Counter[str] = Counter()
        for uid in uids:
            record = records.get(uid)
            if record is not None:
                tokens = record.contribution.split()
                totals.update({tokens[i]: int(tokens[i + 1]) for i in range(0, len(tokens), 2)})
        aggregates = {
            k: v for k, v in fields.items() if k not in NODE_META and not k.startswith("a:")
        }
        for field_name in sorted(set(aggregates) | {k for k, v in totals.items() if v}):
            expected, actual = totals.get(field_name, 0), aggregates.get(field_name, 0)
            if actual < 0:
                out.append(Difference(subject, field_name, ">= 0", actual))
            elif expected != actual:
                out.append(Difference(subject, field_name, expected, actual))
    # The cache-wide count bare claims read (absent on a cache older than it: read as unknown).
    if anti_affine_pods is not None and int(anti_affine_pods) != anti_total:
        out.append(Difference("cache", "antipods", anti_total, int(anti_affine_pods)))
    for uid in sorted(assumed - pods):
        out.append(Difference(f"pod {uid}", "assumed", "in the pods set", "missing"))
    for uid in sorted(pods | set(placements)):
        where = placements.get(uid, [])
        record = records.get(uid)
        if len(where) != 1:
            out.append(Difference(f"pod {uid}", "nodes", "exactly one", where))
        elif record is None:
            out.append(Difference(f"pod {uid}", "record", "present", None))
        elif record.node != where[0]:
            out.append(Difference(f"pod {uid}", "node", record.node, where[0]))
    return out


def _members(store: Store, key: str) -> set[str]:
    return {m.decode() for m in store.client.sscan_iter(key, count=1000)}
