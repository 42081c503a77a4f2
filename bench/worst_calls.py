"""The worst single Lua call each attack of issues 39 and 44 provokes, timed by Redis itself.

For each source tree given (``--tree``; default this one), loads that tree's library into a
redis-server of its own (started here on a free loopback port, no persistence) and, per
scenario, empties the data (the library stays), sets the scenario up untimed, then makes the
one call the scenario is about with ``SLOWLOG`` logging every command: the call's duration is
what Redis measured for that FCALL, not a client's round trip. The trees take turns per round,
so both see the same machine noise; the table gives the median of the rounds (ms) and the
ratio to the first tree. Every input is one the API server accepts (pods of ~0.8 MiB, 4,000
host ports) or a client's own batch within the published caps (docs/security.md, "Bounds of
every Lua call"). Writes ``bench/results/worst_calls.json``.

    python bench/worst_calls.py --tree /path/to/old/checkout --tree . [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import function_name, positive, print_table, tree_servers, write_results
from bench.server_time import library_of
from schedcache import Node, Pod
from schedcache.store import commands, nominations
from schedcache.store.batch import group_args
from schedcache.store.commands import Command
from schedcache.store.gang import gang_claim

PREFIX = "{worst}:"
T0_MS = 1_700_000_000_000
PORTS = 4_000
BIG_LABELS = 12_000  # ~0.8 MiB of msgpack a pod
NODE_IMAGES = 1_000  # values.MAX_NODE_IMAGES


def fcall(client: redis.Redis, command: Command) -> Any:
    name = function_name(client, command.name)
    return client.fcall(name, 1, PREFIX, "bench", command.id, *command.args)


def node(name: str, zone: str = "a", images: list[str] | None = None) -> Node:
    status: dict[str, Any] = {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"}}
    if images:
        status["images"] = [{"names": [image], "sizeBytes": 1000} for image in images]
    return Node.from_k8s(
        {
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
            "status": status,
        }
    )


def pod(name: str, node_name: str = "", ports: list[dict] | None = None, big: bool = False) -> Pod:
    container: dict[str, Any] = {
        "name": "c",
        "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}},
    }
    if ports:
        container["ports"] = ports
    labels = {f"k{i}": "v" * 60 for i in range(BIG_LABELS)} if big else {}
    return Pod.from_k8s(
        {
            "metadata": {"name": name, "namespace": "bench", "uid": name, "labels": labels},
            "spec": {"nodeName": node_name, "containers": [container]},
        }
    )


# -- scenarios: (setup, the call measured) -------------------------------------------------------

Call = Callable[[redis.Redis], Any]


def host_ports() -> tuple[Call, Call]:
    """A node holding 4,000 TCP host ports on one IP; a claim of 4,000 wildcard UDP ports."""

    def setup(client: redis.Redis) -> None:
        fcall(client, commands.add_node(node("n1")))
        held = [
            {"containerPort": 1, "hostPort": 10_000 + i, "hostIP": "10.0.0.1"} for i in range(PORTS)
        ]
        fcall(client, commands.add_pod(pod("tcp", "n1", held)))

    claim = pod(
        "udp",
        "n1",
        [{"containerPort": 1, "hostPort": 10_000 + i, "protocol": "UDP"} for i in range(PORTS)],
    )
    return setup, lambda client: fcall(client, commands.assume_pod(claim, check_fit=True))


def batch_of_changes_and_claims() -> tuple[Call, Call]:
    """800 node updates then 200 claims with inter-pod rules, in one sc_batch (1,000
    commands: the cap)."""
    nodes = [node(f"n{i}") for i in range(800)]
    relabelled = [node(f"n{i}", zone="b") for i in range(800)]

    def setup(client: redis.Redis) -> None:
        for start in range(0, 800, 200):
            group = [commands.add_node(n) for n in nodes[start : start + 200]]
            client.fcall(function_name(client, "batch"), 1, PREFIX, "bench", "", *group_args(group))

    def call(client: redis.Redis) -> Any:
        since = int(client.get(PREFIX + "gen") or 0)
        group = [commands.update_node(old, new) for old, new in zip(nodes, relabelled, strict=True)]
        for i in range(200):
            claim = pod(f"c{i}", f"n{i}")
            group.append(commands.assume_pod(claim, check_fit=True, since=since, reads=""))
        return client.fcall(
            function_name(client, "batch"), 1, PREFIX, "bench", "", *group_args(group)
        )

    return setup, call


def queue_housekeeping() -> tuple[Call, Call]:
    """300 pending pods of ~0.8 MiB for one pop to move: 100 lapsed leases, 100 ended
    back-offs, 100 parked pods woken by a node added."""
    pods = [pod(f"q{i}", big=True) for i in range(300)]

    def setup(client: redis.Redis) -> None:
        for i, p in enumerate(pods):
            fcall(client, commands.sync_pod_pending(p, "ref", str(100 + i)))
        for _ in range(3):
            fcall(client, commands.queue_pop("ref", "h", 1.0, 100, 300.0, T0_MS / 1000))
        last = client.xrevrange(PREFIX + "events", count=1)
        attempt = last[0][0].decode() if last else ""
        for i, p in enumerate(pods[:200]):
            retry = commands.queue_retry(
                "ref", "h", p.uid, i < 100, attempt, (0.001, 0.001), 300.0, T0_MS / 1000
            )
            fcall(client, retry)
        fcall(client, commands.add_node(node("helpful")))

    pop = commands.queue_pop("ref", "h2", 10.0, 1, 300.0, T0_MS / 1000 + 60)
    return setup, lambda client: fcall(client, pop)


def wake_scan() -> tuple[Call, Call]:
    """150 parked pods, then 200 pods of ~0.8 MiB placed (events that help no parked pod): the
    pop that reads the events after its cursor."""

    def setup(client: redis.Redis) -> None:
        for i in range(150):
            fcall(client, commands.sync_pod_pending(pod(f"w{i}"), "ref", str(100 + i)))
            fcall(client, commands.queue_pop("ref", "h", 60.0, 1, 300.0, T0_MS / 1000))
        attempt = client.xrevrange(PREFIX + "events", count=1)
        for i in range(150):
            retry = commands.queue_retry(
                "ref",
                "h",
                f"w{i}",
                True,
                attempt[0][0].decode() if attempt else "0-1",
                (1.0, 10.0),
                300.0,
                T0_MS / 1000,
            )
            fcall(client, retry)
        fcall(client, commands.add_node(node("n1")))
        for i in range(200):
            fcall(client, commands.add_pod(pod(f"b{i}", "n1", big=True)))

    pop = commands.queue_pop("ref", "h2", 10.0, 1, 300.0, T0_MS / 1000 + 1)
    return setup, lambda client: fcall(client, pop)


def node_images() -> tuple[Call, Call]:
    """A node reporting NODE_IMAGES images updated to report as many others (each image
    lost and gained moves the image index)."""
    before = node("n1", images=[f"registry/old-{i}:v1" for i in range(NODE_IMAGES)])
    after = node("n1", images=[f"registry/new-{i}:v1" for i in range(NODE_IMAGES)])

    def setup(client: redis.Redis) -> None:
        fcall(client, commands.add_node(before))

    return setup, lambda client: fcall(client, commands.update_node(before, after))


def big_batch() -> tuple[Call, Call]:
    """Five pods of ~0.8 MiB added in one sc_batch: as many bytes as one call takes."""
    group = [commands.add_pod(pod(f"b{i}", "n1", big=True)) for i in range(5)]

    def setup(client: redis.Redis) -> None:
        fcall(client, commands.add_node(node("n1")))

    return setup, lambda client: client.fcall(
        function_name(client, "batch"), 1, PREFIX, "bench", "", *group_args(group)
    )


def repeated_reads() -> tuple[Call, Call]:
    """A claim whose reads name a changed node 3,000 times (~90 KB, what a raw FCALL may
    send: no cap on the reads' bytes), each time under a rule the change there cannot break
    (a pod placed since carries none of its labels)."""
    labelled = Pod.from_k8s(
        {
            "metadata": {"name": "db", "namespace": "default", "uid": "db"},
            "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "pause"}]},
        }
    )
    reads = " ".join(["@pod-anti-affinity:app=web n2"] * 3_000)

    def setup(client: redis.Redis) -> None:
        for name in ("n1", "n2"):
            fcall(client, commands.add_node(node(name)))

    def call(client: redis.Redis) -> Any:
        since = int(client.get(PREFIX + "gen") or 0)
        fcall(client, commands.add_pod(labelled))  # untimed: the claim is the slowest call
        claim = commands.assume_pod(pod("w", "n1"), check_fit=True, since=since, reads=reads)
        return fcall(client, claim)

    return setup, call


def long_reads(
    size: int, changed: int = 250, named: bool = False
) -> Callable[[], tuple[Call, Call]]:
    """A claim of ``size`` bytes of reads (naming nodes the cache does not hold, or with
    ``named`` every changed node under each of many rules its change cannot break: what a raw
    FCALL may send, the library's own check skipped) with ``changed`` nodes changed since its
    snapshot: each changed node was searched for in the whole reads."""

    def scenario() -> tuple[Call, Call]:
        if named:
            rule = "@pod-anti-affinity:app=web " + " ".join(f"n{i}" for i in range(1, changed + 1))
            reads = " ".join([rule] * (size // (len(rule) + 1)))
        else:
            words = " ".join(f"x{i:07d}" for i in range(size // 9 + 1))
            reads = ("@pod-anti-affinity " + words)[:size].rstrip()

        def setup(client: redis.Redis) -> None:
            for i in range(changed + 1):
                fcall(client, commands.add_node(node(f"n{i}")))

        def call(client: redis.Redis) -> Any:
            since = int(client.get(PREFIX + "gen") or 0)
            for i in range(1, changed + 1):  # untimed: the claim is the slowest call
                fcall(client, commands.add_pod(pod(f"f{i}", f"n{i}")))
            claim = commands.assume_pod(pod("w", "n0"), check_fit=True, since=since, reads="@x")
            args = tuple(reads if arg == "@x" else arg for arg in claim.args)
            return fcall(client, Command(claim.name, claim.subject, args))

        return setup, call

    return scenario


def big_expiry() -> tuple[Call, Call]:
    """20 claims of ~0.8 MiB due: one expiry call (each expired pod's event carries it)."""

    def setup(client: redis.Redis) -> None:
        fcall(client, commands.add_node(node("n1")))
        for i in range(20):
            p = pod(f"e{i}", "n1", big=True)
            fcall(client, commands.assume_pod(p))
            fcall(client, commands.finish_binding(p, T0_MS / 1000, 1.0))

    call = commands.cleanup_assumed_pods(T0_MS / 1000 + 60, 1000)
    return setup, lambda client: fcall(client, call)


def expiry() -> tuple[Call, Call]:
    """1,000 claims whose binding finished and whose deadline passed: one expiry call at the
    limit (Lua's cap)."""

    def setup(client: redis.Redis) -> None:
        fcall(client, commands.add_node(node("n1")))
        for i in range(1000):
            p = pod(f"e{i}", "n1")
            fcall(client, commands.assume_pod(p))
            fcall(client, commands.finish_binding(p, T0_MS / 1000, 1.0))

    call = commands.cleanup_assumed_pods(T0_MS / 1000 + 60, 1000)
    return setup, lambda client: fcall(client, call)


def gang_ports(members: int = 256, ports: int = 14) -> tuple[Call, Call]:
    """A gang at the member cap on one node holding 4,000 host ports, each member asking
    ``ports`` host ports of its own (with its cpu and memory, 16 fields a member: 4,096, the
    cap of contribution fields a gang carries): every member's port check counts the ports of
    the members before it."""
    held = [{"containerPort": 1, "hostPort": 1_000 + i, "hostIP": "10.0.0.1"} for i in range(PORTS)]
    gang = [
        pod(
            f"g{m}",
            "n1",
            [{"containerPort": 1, "hostPort": 10_000 + m * ports + i} for i in range(ports)],
        )
        for m in range(members)
    ]

    def setup(client: redis.Redis) -> None:
        fcall(client, commands.add_node(node("n1")))
        fcall(client, commands.add_pod(pod("held", "n1", held)))

    claim = gang_claim("bench/g", [(p, "", "") for p in gang])
    return setup, lambda client: fcall(client, claim)


def gang_nominated(members: int = 256) -> tuple[Call, Call]:
    """A gang at the member cap on one node holding 16 nominations (the cap): every member
    reads and counts them."""
    gang = [pod(f"g{m}", "n1") for m in range(members)]

    def setup(client: redis.Redis) -> None:
        fcall(client, commands.add_node(node("n1")))
        for i in range(16):
            nominee = pod(f"nom{i}", "")
            fcall(client, nominations.nominate_pod(nominee, "n1", ttl=600, now=T0_MS / 1000 * 2))

    claim = gang_claim("bench/g", [(p, "", "") for p in gang])
    return setup, lambda client: fcall(client, claim)


SCENARIOS: dict[str, Callable[[], tuple[Call, Call]]] = {
    "gang claim: 256 members x 14 ports on a node of 4,000": gang_ports,
    "gang claim: 256 members, 16 nominations on the node": gang_nominated,
    "claim: 4,000 wildcard UDP ports vs 4,000 TCP held": host_ports,
    "sc_batch: 800 node updates + 200 claims with rules": batch_of_changes_and_claims,
    "queue pop: 300 pods of 0.8 MiB to move": queue_housekeeping,
    "queue pop: wake scan over 200 events of 0.8 MiB": wake_scan,
    "expiry: 1,000 due claims in one call": expiry,
    "node update: 1,000 images replaced (the cap)": node_images,
    "sc_batch: 5 pods of 0.8 MiB (4 MiB, the cap)": big_batch,
    "expiry: 20 due claims of 0.8 MiB in one call": big_expiry,
    "claim: reads naming a changed node 3,000 times": repeated_reads,
    "claim: 1 MiB of reads (the cap), 250 nodes changed since": long_reads((1 << 20) - 2),
    "claim: 1 MiB of reads (the cap), 100 nodes changed since": long_reads((1 << 20) - 2, 100),
    "claim: 100 KB of reads, 250 nodes changed since": long_reads(100_000),
    "claim: 1 MiB of rules naming 100 changed nodes": long_reads((1 << 20) - 2, 100, named=True),
    "claim: 100 KB of rules naming 100 changed nodes": long_reads(100_000, 100, named=True),
    "claim: 16 MiB of reads, 250 nodes changed since": long_reads(16 << 20),
}


def measure(client: redis.Redis, setup: Call, call: Call) -> float:
    """Milliseconds Redis spent on ``call`` (SLOWLOG), after ``setup`` on emptied data."""
    client.flushall()
    setup(client)
    client.config_set("slowlog-log-slower-than", 0)
    client.slowlog_reset()
    try:
        call(client)
    except redis.ResponseError as error:  # a refusal is an answer too
        print(f"  (refused: {str(error)[:80]})", flush=True)
    entries = client.slowlog_get(20)
    client.config_set("slowlog-log-slower-than", 10_000)
    durations = [
        entry["duration"]
        for entry in entries
        if str(entry["command"][:5]).upper().startswith(("FCALL", "B'FCALL"))
    ]
    return max(durations) / 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", help="a source tree (repeatable)")
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument("--port", type=int, default=6480)
    parser.add_argument("--only", help="run the scenarios whose name contains this")
    args = parser.parse_args()
    trees = [str(Path(t).resolve()) for t in (args.tree or ["."])]
    scenarios = {k: v() for k, v in SCENARIOS.items() if not args.only or args.only in k}
    samples: dict[str, dict[str, list[float]]] = {t: {k: [] for k in scenarios} for t in trees}
    with (
        tempfile.TemporaryDirectory() as directory,
        tree_servers(trees, args.port, directory, library_of) as clients,
    ):
        for round_ in range(args.rounds):
            order = trees if round_ % 2 == 0 else trees[::-1]
            for name, (setup, call) in scenarios.items():
                for tree in order:
                    ms = measure(clients[tree], setup, call)
                    samples[tree][name].append(ms)
                    print(f"{Path(tree).name}: {name}: {ms:.1f} ms", flush=True)
    medians = {t: {k: statistics.median(v) for k, v in samples[t].items()} for t in trees}
    base, others = trees[0], trees[1:]
    columns = ["call (median ms, SLOWLOG)", Path(base).name]
    columns += [part for tree in others for part in (Path(tree).name, "ratio")]
    rows = [
        [name, f"{medians[base][name]:.1f}"]
        + [
            cell
            for tree in others
            for cell in (
                f"{medians[tree][name]:.1f}",
                f"{medians[tree][name] / medians[base][name]:.3f}",
            )
        ]
        for name in scenarios
    ]
    print_table("worst single calls", columns, rows)
    path = write_results(
        "worst_calls",
        {"trees": trees, "rounds": args.rounds, "unit": "ms", "samples": samples},
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
