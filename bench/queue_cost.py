"""What the scheduling queue costs per pod (issue 34, item 4), on a redis-server of its own.

A cache of ``--nodes`` nodes (upstream's node template) gets ``--pods`` pending pods, and each
step of a pod's way through the queue is timed, Redis' own time per pod (INFO commandstats of
FCALL, reset before each step) and the client's wall time per pod:

* **push**: ``sc_sync_pod`` queueing the pending pods, batched as ``sync`` sends them;
* **pop**: one ``sc_queue_pop`` (count 1) per pod, one client;
* **claim**: ``assume_pod(check_fit=True)`` of each popped pod (what a replica does anyway,
  for scale);
* **bind, queued** / **bind, not queued**: ``sc_sync_pod`` seeing the claimed pod bound, which
  also drops it from the queue, against the same for pods that were never queued: the
  difference is the drop;
* **park + wake**: ``sc_queue_retry`` parking every pod, then one NodeAdded and the pops that
  bring them back (per pod).

A **pop (count 8)** step (the reference scheduler's batch, docs/performance.md "Batched pops")
pops the same number of pods queued again, 8 a call, and leases them (the claims and binds
above do not use them).

    python bench/queue_cost.py [--nodes 1000 --pods 5000 --rounds 3] [--tree DIR]
    python bench/queue_cost.py --instructions --nodes 100 --pods 300 --rounds 1 [--tree DIR]

``--tree DIR`` adds rows of another checkout (its ``schedcache`` and ``lua/``; this harness
stays this tree's), its rounds alternating with this tree's, each on a ``redis-server`` of its
own. ``--instructions`` runs each server under valgrind's callgrind (instrumentation on only
while a step runs, counting inside FCALL only, as the µs are FCALL's own time) and gives Redis'
CPU instructions per pod of each step instead of µs: nearly the same whatever the machine's
load (the allocator's time-driven work moves batched steps by a few per cent; callgrind runs
~50x slower: use a few hundred pods).

Prints a table (medians of ``--rounds``) and writes ``bench/results/queue_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# A row of another checkout (--row TREE): its ``schedcache`` is imported before anything
# imports ours (its ``lua/`` follows from the package's path), as bench/e2e.py does.
_ROW_TREE = sys.argv[sys.argv.index("--row") + 1] if "--row" in sys.argv[:-1] else "-"
if _ROW_TREE != "-":
    from bench.common import import_schedcache_from

    import_schedcache_from(_ROW_TREE)

# After the tree's package is in sys.modules (E402: the order is the point).
import redis  # noqa: E402

from bench.common import positive, print_table, start_server, write_results  # noqa: E402
from schedcache import Cache, Node, Pod  # noqa: E402
from schedcache.ops.queue import SchedulingQueue  # noqa: E402
from schedcache.store import commands  # noqa: E402

PORT = 17431


def node(i: int) -> Node:
    status = {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
    return Node.from_k8s({"metadata": {"name": f"node-{i}"}, "status": status})


def pod(i: int, prefix: str) -> Pod:
    container = {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}
    metadata = {"name": f"{prefix}-{i}", "namespace": "bench", "uid": f"{prefix}-{i}"}
    return Pod.from_k8s({"metadata": metadata, "spec": {"containers": [container]}})


class Step:
    """Redis' time and the client's for one step, per pod; or, when ``grind`` (the pid of a
    redis-server under callgrind), Redis' instructions per pod and the client's time."""

    def __init__(self, client: redis.Redis, grind: int = 0) -> None:
        self.client = client
        self.grind = grind

    def __call__(self, run: Callable[[], int]) -> tuple[float, float]:
        if self.grind:
            _callgrind("-i", self.grind)  # on (the server starts with it off)
            _callgrind("-z", self.grind)
        self.client.config_resetstat()
        started = time.perf_counter()
        count = run()
        wall = time.perf_counter() - started
        if self.grind:
            instructions = _callgrind("-d", self.grind)
            _callgrind("-i", self.grind, "off")
            return instructions / count, wall * 1e6 / count
        stats = self.client.info("commandstats")
        usec = sum(
            stats[name]["usec"] for name in ("cmdstat_fcall", "cmdstat_fcall_ro") if name in stats
        )
        return usec / count, wall * 1e6 / count


def _callgrind(option: str, pid: int, state: str = "on") -> int:
    """``callgrind_control -i on|off``, ``-z`` (zero) or ``-d`` (dump: the instructions since
    the zero, read from the dump it writes)."""
    before = set(_dumps(pid))
    command = ["callgrind_control", option, *([state] if option == "-i" else []), str(pid)]
    subprocess.run(command, check=True, capture_output=True)
    if option != "-d":
        return 0
    for _ in range(1200):
        for dump in set(_dumps(pid)) - before:
            text = dump.read_text()
            if "totals:" in text:
                dump.unlink()
                line = next(line for line in text.splitlines() if line.startswith("totals:"))
                return int(line.split()[1])
        time.sleep(0.05)
    raise RuntimeError("callgrind wrote no dump")


def _dumps(pid: int) -> list[Path]:
    """The dumps callgrind wrote so far for the server ``pid`` (``<out>.<n>``)."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    out = next(a for a in args if a.startswith(b"--callgrind-out-file="))
    path = Path(out.split(b"=", 1)[1].decode())
    return list(path.parent.glob(path.name + ".*"))


def one_round(
    client: redis.Redis, nodes: int, pods: int, version: list[int], grind: int = 0
) -> dict[str, tuple]:
    client.flushall()
    cache = Cache(client, "bench-queue", ttl=30.0, replica="bench")
    batch = cache.batch()
    for i in range(nodes):
        batch.add(commands.add_node(node(i)))
    batch.execute()
    step = Step(client, grind)
    queue = SchedulingQueue(cache, "bench", holder="replica-1", lease=600.0)
    queued = [pod(i, "q") for i in range(pods)]
    plain = [pod(i, "p") for i in range(pods)]

    def next_version() -> str:
        version[0] += 1
        return str(version[0])

    def queue_all(pending: list[Pod]) -> int:
        """``pending`` queued by one sync batch, as sync queues them."""
        batch = cache.batch()
        for p in pending:
            batch.add(commands.sync_pod_pending(p, "bench", next_version()))
        batch.execute()
        return len(pending)

    def push() -> int:
        return queue_all(queued)

    popped: list[Pod] = []

    def pop() -> int:
        while got := queue.pop():
            popped.extend(q.pod for q in got)
        return len(popped)

    def claim(these: list[Pod]) -> Callable[[], int]:
        def run() -> int:
            for i, p in enumerate(these):
                cache.assume_pod(p.with_node(f"node-{i % nodes}"), check_fit=True)
            return len(these)

        return run

    def bind(these: list[Pod]) -> Callable[[], int]:
        def run() -> int:
            batch = cache.batch()
            for i, p in enumerate(these):
                placed = p.with_node(f"node-{i % nodes}")
                batch.add(commands.sync_pod(placed, next_version(), present=True))
            batch.execute()
            return len(these)

        return run

    figures = {"push (sync, batched)": step(push), "pop (count 1)": step(pop)}
    assert len(popped) == pods

    # The reference scheduler's batches: pods of their own, queued untimed.
    batched = [pod(i, "b") for i in range(pods)]
    queue_all(batched)
    leased: list[Pod] = []

    def pop8() -> int:
        while got := queue.pop(8):
            leased.extend(q.pod for q in got)
        return len(leased)

    figures["pop (count 8)"] = step(pop8)
    assert len(leased) == pods
    figures["claim (assume_pod, check_fit)"] = step(claim(popped))
    step(claim(plain))
    figures["bind, queued (sync, batched)"] = step(bind(popped))
    figures["bind, not queued (sync, batched)"] = step(bind(plain))

    # Parked pods woken by a node added.
    parked = [pod(i, "w") for i in range(pods)]
    queue_all(parked)
    woken: list[Pod] = []
    while got := queue.pop(100):
        woken.extend(q.pod for q in got)
    attempt = cache.last_events(1)[0].id

    queue.backoff = (0.0, 0.0)  # woken pods are active at once: the wake alone is timed

    def park() -> int:
        for p in woken:
            queue.retry(p, unschedulable=True, attempt=attempt)
        return len(woken)

    figures["park (retry, unschedulable)"] = step(park)
    cache.add_node(node(nodes))
    back: list[Pod] = []

    def wake() -> int:
        while len(back) < len(woken):
            back.extend(q.pod for q in queue.pop())
        return len(back)

    figures["wake + pop (per pod)"] = step(wake)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=positive, default=1000)
    parser.add_argument("--pods", type=positive, default=5000)
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument("--tree", default="", help="another checkout: rows of its own")
    parser.add_argument(
        "--instructions", action="store_true", help="count Redis' instructions (callgrind)"
    )
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--row", nargs=3, help=argparse.SUPPRESS)  # TREE PORT GRIND (internal)
    args = parser.parse_args()
    if args.row:  # one round of one tree, against a server started by the parent process
        _, port, grind = args.row
        client = redis.Redis(port=int(port))
        if int(grind):  # its timer's work (10 a second) would count with the pace, else
            client.config_set("hz", 1)
        print(json.dumps(one_round(client, args.nodes, args.pods, [0], int(grind))))
        return
    trees = ["", *([args.tree] if args.tree else [])]
    rounds: dict[str, list[dict[str, tuple]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as directory:
        servers = {}
        try:
            for offset, tree in enumerate(trees):
                port = args.port + offset
                wrapper = None
                if args.instructions:
                    out = Path(directory) / f"callgrind-{port}.out"
                    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
                    # The functions' own instructions, as the µs are FCALL's own time: the
                    # event loop's timers and expiry follow the (slowed) pace, not the code.
                    wrapper += ["--toggle-collect=fcallCommand", "--toggle-collect=fcallroCommand"]
                    wrapper += [f"--callgrind-out-file={out}"]
                servers[tree] = (port, start_server(directory, port, wrapper))
            for j in range(args.rounds):  # the trees alternating, as the load moves
                for tree in trees if j % 2 == 0 else trees[::-1]:
                    port, server = servers[tree]
                    rounds[tree].append(_run_round(tree, port, server.pid, args, j))
        finally:
            for _, server in servers.values():
                server.terminate()
                server.wait()
    unit = "instructions/pod" if args.instructions else "Redis µs/pod"
    rows, results = [], {}
    for name in rounds[""][0]:
        row = [name]
        for tree in trees:
            redis_per = statistics.median(r[name][0] for r in rounds[tree])
            client_us = statistics.median(r[name][1] for r in rounds[tree])
            row += [f"{redis_per:,.0f}" if args.instructions else f"{redis_per:.1f}"]
            row += [f"{client_us:.1f}"]
            results.setdefault(tree or "this", {})[name] = {
                ("instructions_per_pod" if args.instructions else "redis_us_per_pod"): redis_per,
                "client_us_per_pod": client_us,
            }
        if args.tree:
            this = statistics.median(r[name][0] for r in rounds[""])
            other = statistics.median(r[name][0] for r in rounds[args.tree])
            row.append(f"{this / other:.2f}" if other else "-")
        rows.append(row)
    title = (
        f"The scheduling queue per pod ({args.nodes} nodes, {args.pods} pods, "
        f"{args.rounds} rounds, medians)"
    )
    columns = ["step", unit, "client µs/pod"]
    if args.tree:
        columns = ["step", f"this: {unit}", "client µs/pod"]
        columns += [f"--tree: {unit}", "client µs/pod", "this/--tree"]
    print_table(title, columns, rows)
    payload = {"nodes": args.nodes, "pods": args.pods, "instructions": args.instructions}
    path = write_results("queue_cost", {**payload, "trees": results})
    print(f"\nwritten to {path}")


def _run_round(
    tree: str, port: int, grind: int, args: argparse.Namespace, j: int
) -> dict[str, tuple]:
    """One round of ``tree`` ("": this one) in a process of its own (its package imported)."""
    command = [sys.executable, __file__, "--nodes", str(args.nodes), "--pods", str(args.pods)]
    command += ["--row", tree or "-", str(port), str(grind if args.instructions else 0)]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"round {j} of {tree or 'this tree'} failed:\n{out.stderr[-3000:]}")
    return {name: tuple(v) for name, v in json.loads(out.stdout.splitlines()[-1]).items()}


if __name__ == "__main__":
    main()
