"""Redis server time per command (INFO commandstats), before and after a library change.

For each source tree given (``--tree``; default this one), loads that tree's Lua library into a
redis-server of its own (started here on a free loopback port). Then, from this one process and
with this tree's argument encoding (the FCALL convention is the same in every tree measured),
it runs each kind of command on each server in turn, ``--rounds`` times, so both libraries see
the same machine noise: add_pod, assume_pod (plain, with ``check_fit``, with a lease), one
FCALL per command, the rest of a pod's life (finish_binding, add_pod confirming it in place,
remove_pod; the commands before them run untimed), add_pod/assume_pod inside ``sc_batch``, and a
replica's snapshot head read (``sc_snapshot_delta`` with limit -1, once per pod, after the claims).
Reports the median and the minimum of the rounds' microseconds per command (the minimum is the
figure least disturbed by other work on a shared machine) and their ratio to the first tree;
writes
``bench/results/server_time.json``.

``--instructions`` counts instead of timing: each tree's server runs under valgrind's callgrind
(counters zeroed after the setup, dumped after the run) and the table gives the CPU
instructions Redis executed per command. Counts repeat exactly from run to run, whatever else
the machine is doing, so a change of a few per cent shows where timings on a shared machine
cannot (one round is enough; use fewer pods, callgrind runs ~50x slower). Writes
``bench/results/server_instructions.json``.

    python bench/server_time.py --tree /path/to/old/checkout --tree . [--pods 2000]
    python bench/server_time.py --tree /path/to/old/checkout --tree . --instructions --pods 300
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import (
    function_name,
    load_library,
    positive,
    print_table,
    start_server,
    tree_servers,
    write_results,
)
from schedcache import Pod
from schedcache.store import commands
from schedcache.store.batch import derive_group_id, group_args
from schedcache.store.commands import Command

PREFIX = "{bench}:"
# Nodes of the cache measured (--nodes). At 100 the node generation index is a listpack
# (Redis keeps a sorted set of at most 128 members that way), whose ZADD scans it: the costliest
# single call of a command there; from 129 nodes on it is a skiplist.
NODES = 100
BIND_TIMEOUT = 60.0  # the extender's --bind-timeout default


def library_of(tree: str) -> str:
    """The library text that ``tree``'s own code loads."""
    code = "from schedcache.store.library import library_source; print(library_source())"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": tree},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def make_pod(i: int, host_port: bool) -> Pod:
    container: dict[str, Any] = {
        "name": "c",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    if host_port:
        container["ports"] = [{"containerPort": 80, "hostPort": 8000 + i // NODES}]
    return Pod.from_k8s(
        {
            "metadata": {"name": f"p-{i}", "namespace": "bench", "uid": f"uid-{i}"},
            "spec": {"nodeName": f"node-{i % NODES}", "containers": [container]},
        }
    )


def constrained_pod(pod: Pod) -> Pod:
    """``pod`` with required anti-affinity on the hostname (its contribution counts it)."""
    term = {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": HOSTNAME}
    manifest = {
        "metadata": {
            "name": pod.name,
            "namespace": "bench",
            "uid": pod.uid,
            "labels": {"app": "anti"},
        },
        "spec": {
            "nodeName": pod.node_name,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
            ],
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            },
        },
    }
    return Pod.from_k8s(manifest)


HOSTNAME = "kubernetes.io/hostname"


def claims_with_rules(
    pods: list[Pod], reads: Callable[[int, Pod], tuple[str, str]]
) -> Callable[[redis.Redis], None]:
    """check_fit claims that carry inter-pod rules (lua/_claims.lua) as a replica sends them
    from an up-to-date snapshot: claim i was decided at the generation claim i-1 left."""

    def run(client: redis.Redis) -> None:
        start = int(client.get(PREFIX + "gen") or 0)
        incarnation = (client.get(PREFIX + "incarnation") or b"").decode()
        pipe = client.pipeline(transaction=False)
        for i, pod in enumerate(pods):
            read, domains = reads(i, pod)
            command = commands.assume_pod(
                pod,
                check_fit=True,
                since=start + i,
                reads=read,
                domains=domains,
                incarnation=incarnation,
            )
            name = function_name(pipe, command.name)
            pipe.fcall(name, 1, PREFIX, "bench", command.id, *command.args)
        replies = pipe.execute(raise_on_error=False)
        refused = [r for r in replies if isinstance(r, Exception)]
        assert not refused, refused[:3]

    return run


def fcall(client: redis.Redis, command: Command) -> Any:
    name = function_name(client, command.name)
    return client.fcall(name, 1, PREFIX, "bench", command.id, *command.args)


def batched(client: redis.Redis, made: list[Command], chunk: int = 200) -> None:
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(made), chunk):
        group = made[start : start + chunk]
        pipe.fcall(
            function_name(pipe, "batch"),
            1,
            PREFIX,
            "bench",
            derive_group_id(group),
            *group_args(group),
        )
    for reply in pipe.execute():
        assert all(reply[k] == 1 for k in range(0, len(reply), 2)), reply


@dataclass
class Scenario:
    """A kind of command: ``run`` is measured; ``setup`` (untimed, uncounted) brings the cache
    the pods it needs (assumed ones to confirm, finished ones to remove)."""

    run: Callable[[redis.Redis], None]
    setup: Callable[[redis.Redis], None] | None = None


def scenarios(pods: list[Pod]) -> dict[str, Scenario]:
    """Each kind of command, run over ``pods`` on a cache with the nodes already added: a
    claim, and the rest of a pod's life (its binding finished, the informer's confirmation in
    place, its removal)."""

    def single(make: Callable[[Pod], Command]) -> Callable[[redis.Redis], None]:
        def run(client: redis.Redis) -> None:
            pipe = client.pipeline(transaction=False)
            for pod in pods:
                command = make(pod)
                pipe.fcall(
                    function_name(pipe, command.name), 1, PREFIX, "bench", command.id, *command.args
                )
            pipe.execute()

        return run

    assume = single(commands.assume_pod)
    finish = single(lambda p: commands.finish_binding(p, None, 30.0))
    confirm = single(commands.add_pod)

    def assumed_and_finished(client: redis.Redis) -> None:
        assume(client)
        finish(client)

    def confirmed(client: redis.Redis) -> None:
        assumed_and_finished(client)
        confirm(client)

    # `sync` confirming the Binding it watched (sc_sync_pod op "set"), the pod at the version
    # the Binding gave it: its msgpack as the claim's (same), or with the new resourceVersion.
    def synced(pod: Pod, same: bool) -> Command:
        seen = pod if same else dataclasses.replace(pod, resource_version="2")
        return commands.sync_pod(seen, "2", True)

    # As in a replica's loop: queued by `sync` (pending), popped, claimed with its deadline.
    def queued_popped_claimed(client: redis.Redis) -> None:
        single(
            lambda p: commands.sync_pod_pending(
                dataclasses.replace(p, node_name=""), "default-scheduler", "1"
            )
        )(client)
        for _ in range(0, len(pods), commands.QUEUE_BATCH_LIMIT):
            fcall(client, commands.queue_pop("default-scheduler", "bench", 600.0, 100, 60.0, None))
        single(lambda p: commands.timed_claim(commands.assume_pod(p), BIND_TIMEOUT))(client)

    sync_same = single(lambda p: synced(p, True))
    sync_moved = single(lambda p: synced(p, False))

    # The extender's bind (issue 43), per pod: 0ae1dd3's three calls (the claim, its
    # bind-timeout deadline, the cache's ttl once bound) against the timed claim and the ttl
    # (a bind timeout that leaves less than the ttl), and the timed claim alone (the defaults).
    claim = single(lambda p: commands.assume_pod(p, check_fit=True))
    deadline = single(lambda p: commands.finish_binding(p, None, BIND_TIMEOUT))
    timed = single(
        lambda p: commands.timed_claim(commands.assume_pod(p, check_fit=True), BIND_TIMEOUT)
    )

    def bind_in_three(client: redis.Redis) -> None:
        claim(client)
        deadline(client)
        finish(client)

    def bind_in_two(client: redis.Redis) -> None:
        timed(client)
        finish(client)

    plain = [make_pod(i, host_port=False) for i in range(len(pods))]

    def plain_claims(client: redis.Redis) -> None:
        pipe = client.pipeline(transaction=False)
        for pod in plain:
            claim = commands.assume_pod(pod, check_fit=True, lease_ttl=15.0)
            command = commands.timed_claim(claim, BIND_TIMEOUT)
            pipe.fcall(
                function_name(pipe, command.name), 1, PREFIX, "bench", command.id, *command.args
            )
        pipe.execute()

    # bench/e2e.py's claim (the reference scheduler once its heartbeat holds the lease): the
    # timed claim, check_fit, no lease argument, and the next 7 best nodes as candidates
    # (schedcache/scheduler/loop.py), the claim's own node taken.
    def ranked_claims(client: redis.Redis) -> None:
        pipe = client.pipeline(transaction=False)
        for i, pod in enumerate(plain):
            others = [(f"node-{(i + 1 + c) % NODES}", "", "") for c in range(7)]
            claim = commands.assume_pod(pod, check_fit=True, candidates=others)
            command = commands.timed_claim(claim, BIND_TIMEOUT)
            pipe.fcall(
                function_name(pipe, command.name), 1, PREFIX, "bench", command.id, *command.args
            )
        pipe.execute()

    anti = [constrained_pod(p) for p in pods]
    nodes = [f"node-{i}" for i in range(NODES)]

    def anti_reads(i: int, pod: Pod) -> tuple[str, str]:
        # The node's hostname domain is the node: what claims.claim_reads sends.
        return f"@pod-anti-affinity {pod.node_name}", f"{HOSTNAME} {pod.node_name}"

    every_node = "@topology-spread " + " ".join(nodes)

    def head_reads(client: redis.Redis) -> None:
        # A replica's head read (sc_snapshot_delta, limit -1) once per pod, the cache at rest:
        # the stream's last event a claim (its pod's msgpack), as in a replica's loop.
        generation, tree = client.mget(PREFIX + "gen", PREFIX + "treegen")
        pipe = client.pipeline(transaction=False)
        for _ in pods:
            name = function_name(pipe, "snapshot_delta")
            pipe.fcall_ro(name, 1, PREFIX, "bench", "", int(generation), int(tree or 0), -1)
        pipe.execute()

    return {
        "add_pod": Scenario(single(commands.add_pod)),
        "assume_pod": Scenario(assume),
        "assume_pod, check_fit": Scenario(single(lambda p: commands.assume_pod(p, check_fit=True))),
        "assume_pod, check_fit, rules (none apply)": Scenario(
            claims_with_rules(pods, lambda i, p: ("", ""))
        ),
        "assume_pod, check_fit, hostname anti-affinity": Scenario(
            claims_with_rules(anti, anti_reads)
        ),
        "assume_pod, check_fit, zone spread (reads every node)": Scenario(
            claims_with_rules(pods, lambda i, p: (every_node, ""))
        ),
        "assume_pod, lease": Scenario(single(lambda p: commands.assume_pod(p, lease_ttl=15.0))),
        "finish_binding": Scenario(finish, setup=assume),
        "add_pod confirming an assumed pod": Scenario(confirm, setup=assumed_and_finished),
        "sync_pod confirming an assumed pod (same msgpack)": Scenario(
            sync_same, setup=assumed_and_finished
        ),
        "sync_pod confirming an assumed pod (new resourceVersion)": Scenario(
            sync_moved, setup=assumed_and_finished
        ),
        "sync_pod confirming a queued, popped, timed claim (new resourceVersion)": Scenario(
            sync_moved, setup=queued_popped_claimed
        ),
        "sync_pod confirming, in sc_batch (new resourceVersion)": Scenario(
            lambda c: batched(c, [synced(p, False) for p in pods]), setup=assumed_and_finished
        ),
        "remove_pod": Scenario(single(commands.remove_pod), setup=confirmed),
        "add_pod in sc_batch": Scenario(lambda c: batched(c, [commands.add_pod(p) for p in pods])),
        "assume_pod in sc_batch": Scenario(
            lambda c: batched(c, [commands.assume_pod(p) for p in pods])
        ),
        "extender bind: claim, deadline, ttl (3 calls)": Scenario(bind_in_three),
        "extender bind: timed claim, ttl (2 calls)": Scenario(bind_in_two),
        "extender bind: timed claim (1 call: the deadline leaves the ttl)": Scenario(timed),
        # The reference scheduler's plain claim (a pod without inter-pod rules nor host ports,
        # as bench/e2e.py's): check_fit, its lease renewed, its deadline, one call
        # (schedcache/scheduler/bindings.py).
        "timed claim, check_fit, lease (the reference scheduler's plain claim)": Scenario(
            plain_claims
        ),
        "timed claim, check_fit, 7 candidates (bench/e2e.py's claim)": Scenario(ranked_claims),
        # The reference scheduler's claims of one pop sent together (scheduler/loop.py's
        # claim_together: up to 8 timed claims, check_fit, the lease held by the heartbeat).
        "timed claim, check_fit, in sc_batch of 8 (the reference scheduler's batched claims)": (
            Scenario(
                lambda c: batched(
                    c,
                    [
                        commands.timed_claim(commands.assume_pod(p, check_fit=True), BIND_TIMEOUT)
                        for p in plain
                    ],
                    chunk=8,
                )
            )
        ),
        # sync's confirmations as bench/e2e.py's linger groups them (~5 a call).
        "sync_pod confirming a queued, popped, timed claim, in sc_batch of 5": Scenario(
            lambda c: batched(c, [synced(p, False) for p in pods], chunk=5),
            setup=queued_popped_claimed,
        ),
        "snapshot_delta head read (limit -1)": Scenario(head_reads, setup=assume),
    }


def prepare(client: redis.Redis) -> None:
    """An empty cache with its nodes (big enough for every pod)."""
    client.flushall()
    from schedcache.sim.demo import demo_node

    for i in range(NODES):
        fcall(client, commands.add_node(demo_node(i, "640", "4096Gi")))


def measure(client: redis.Redis, scenario: Scenario, count: int) -> float:
    prepare(client)
    if scenario.setup is not None:
        scenario.setup(client)
    client.config_resetstat()
    scenario.run(client)
    stats = client.info("commandstats")
    calls = [stats[k]["usec"] for k in ("cmdstat_fcall", "cmdstat_fcall_ro") if k in stats]
    return float(sum(calls)) / count


def count_instructions(
    tree: str, scenario: Scenario, count: int, port: int, directory: str
) -> float:
    """CPU instructions per command of ``tree``'s library, counted by callgrind in a server of
    its own (started and stopped here)."""
    out = Path(directory) / f"callgrind-{port}.out"
    wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    server = start_server(directory, port, wrapper)
    try:
        client = redis.Redis(port=port)
        load_library(client, library_of(tree))
        prepare(client)
        if scenario.setup is not None:
            scenario.setup(client)
        subprocess.run(
            ["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True
        )
        scenario.run(client)
        subprocess.run(
            ["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True
        )
        dump = Path(f"{out}.1")
        for _ in range(600):
            if dump.exists() and "totals:" in dump.read_text():
                break
            time.sleep(0.05)
        totals = next(line for line in dump.read_text().splitlines() if line.startswith("totals:"))
        client.shutdown(nosave=True)
    finally:
        server.terminate()
        server.wait()
        for leftover in Path(directory).glob(f"callgrind-{port}.out*"):
            leftover.unlink()
    return int(totals.split()[1]) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", help="a source tree (repeatable)")
    parser.add_argument("--pods", type=positive, default=2000)
    parser.add_argument("--rounds", type=positive, default=7)
    parser.add_argument("--port", type=int, default=6470)
    parser.add_argument("--nodes", type=positive, default=100)
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind"
    )
    parser.add_argument(
        "--only", default="", help="the kinds of command whose name contains this, only"
    )
    args = parser.parse_args()
    global NODES
    NODES = args.nodes
    if args.instructions:
        args.rounds = 1
    trees = [str(Path(t).resolve()) for t in (args.tree or ["."])]
    pods = [make_pod(i, host_port=True) for i in range(args.pods)]
    kinds = {name: kind for name, kind in scenarios(pods).items() if args.only in name}
    samples: dict[str, dict[str, list[float]]] = {t: {k: [] for k in kinds} for t in trees}
    unit = "instructions" if args.instructions else "us"
    with tempfile.TemporaryDirectory() as directory:
        if args.instructions:
            for offset, tree in enumerate(trees):
                for name, scenario in kinds.items():
                    port = args.port + offset
                    per = count_instructions(tree, scenario, len(pods), port, directory)
                    samples[tree][name].append(per)
                    print(f"{Path(tree).name}: {name}: {per:,.0f} instructions", flush=True)
        timed_trees = [] if args.instructions else trees
        with tree_servers(timed_trees, args.port, directory, library_of) as clients:
            for round_ in range(0 if args.instructions else args.rounds):
                order = trees if round_ % 2 == 0 else trees[::-1]
                for name, scenario in kinds.items():
                    for tree in order:
                        samples[tree][name].append(measure(clients[tree], scenario, len(pods)))
    first = trees[0]
    rows = []
    for name in kinds:
        row: list[Any] = [name]
        for tree in trees:
            median = statistics.median(samples[tree][name])
            low = min(samples[tree][name])
            row.append(f"{median:,.0f}" if args.instructions else f"{median:.1f} / {low:.1f}")
            if tree != first:
                base = statistics.median(samples[first][name])
                row.append(f"{median / base:.2f}")
        rows.append(row)
    columns = ["command"]
    for tree in trees:
        columns.append(f"{Path(tree).name}: " + (unit if args.instructions else "median / min us"))
        if tree != first:
            columns.append("median ratio")
    print_table(
        f"Redis server {unit} per command, {args.rounds} rounds of {args.pods} pods"
        + ("" if args.instructions else ", interleaved"),
        columns,
        rows,
    )
    path = write_results(
        "server_instructions" if args.instructions else "server_time",
        {
            "trees": trees,
            "settings": vars(args),
            "unit": unit,
            "medians": {
                t: {k: statistics.median(v) for k, v in s.items()} for t, s in samples.items()
            },
            "minimums": {t: {k: min(v) for k, v in s.items()} for t, s in samples.items()},
            "runs": samples,
        },
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
