"""End to end, scheduler_perf's SchedulingBasic shape: pods/s of N reference scheduler replicas.

For each replica count, on an empty Redis database and a fresh fake API server
(tests/apiserver.py, a process of its own, on loopback):

1. the API server holds ``--nodes`` nodes (upstream's node template: 4 cpu, 32Gi, 110 pods) and
   ``--initial`` bound pods, plus ``--measured`` pods pending for scheduler ``bench``
   (upstream's pod template: 100m cpu, 500Mi), all there before anything starts; with
   ``--arrival-rate R`` the measured pods are created from the replicas' start on instead,
   ``R`` a second, so that ``sync``'s queueing of them falls in the steady window below (with
   all of them pending before the start, ``sync`` queues every one during start-up, and the
   window's Redis figures hold no queueing);
2. one ``schedcache sync`` feeder (a process) lists and watches them into the cache;
3. ``--replicas`` reference schedulers (one process each, as ``schedcache scheduler`` runs
   them) start at once; the clock runs from their start until the API server holds every
   measured pod bound: **pods/s**; besides, from the API server's own clock of each measured
   Binding: **start s** (the start to the first Binding: processes' warm-up, first snapshot),
   **steady pods/s** (first to last Binding once the first 5 % are bound: the rate without
   the start-up) and **redis µs/pod** over that same steady window (see ``redis_usec``; a
   row placed whole before the bench's first look, 50 ms in, counts from the start);
4. checks on the API server's own objects: nodes whose bound pods' requests exceed their
   allocatable (must be 0), Bindings refused because the pod was already bound (must be 0:
   two replicas placed the same pod), measured pods left unbound;
5. the API server's own binding capacity in the same run: ``--capacity`` pending pods of
   another scheduler bound straight through ``pods/binding`` (no cache, no scheduling) by
   ``--capacity-clients`` client processes x threads (bench/device/api_capacity.py's minimal
   HTTP client), binds/s: the harness's ceiling, never to be mistaken for the scheduler's.

Prints a table and writes ``bench/results/e2e.json`` (``--json PATH``: there instead), rewritten
after each row, so a run cut short keeps the rows it finished.

    python bench/e2e.py [--nodes 5000 --initial 1000 --measured 10000 --replicas 1 2 4]

``--tree DIR`` runs the same bench against another copy of the project: the ``schedcache``
package (and so its ``lua/``) is imported from ``DIR`` in every process, the fake API server
and this harness stay this tree's (bench/device/run.sh's "before" rows).

Defaults are scaled down (1,000 nodes, 500 initial, 1,000 measured) so one run fits in a couple
of minutes on a small machine. Target (issue 34): one replica >= 300 pods/s on 5,000 nodes here.

Redis: by default the bench starts its own ``redis-server`` (Redis >= 7 on PATH) on a free
loopback port, without persistence, and stops it at the end; each row flushes that server's
database. ``--url URL`` uses a Redis of yours instead, and only with an empty database, or with
``--flush``, which lets the bench flush that database before each row: it never flushes data it
did not write unless told to. Anything missing (redis-server, the ``kube``/``extender`` extras,
a reachable ``--url``) stops the bench with one line saying what.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import math
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _tree() -> str:
    """``--tree DIR`` from the command line, else E2E_TREE (how spawned processes learn it)."""
    argv = sys.argv
    for i, arg in enumerate(argv):
        if arg == "--tree" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--tree="):
            return arg.split("=", 1)[1]
    return os.environ.get("E2E_TREE", "")


TREE = _tree()
if TREE:
    os.environ["E2E_TREE"] = TREE  # inherited by the spawned feeder, replicas and API server
    from bench.common import import_schedcache_from

    import_schedcache_from(TREE)

# After the tree's package is in sys.modules (E402: the order is the point).
import redis  # noqa: E402

from bench.common import (  # noqa: E402
    arrival_rate,
    arrivals_fit,
    print_table,
    start_server,
    write_results,
)
from bench.device.api_capacity import measure  # noqa: E402
from bench.e2e_shapes import SHAPES, ratios, shaped  # noqa: E402
from schedcache import Cache  # noqa: E402
from schedcache.model.quantity import int_value, milli_value  # noqa: E402

try:
    import aiohttp  # noqa: F401  (the scheduler's binder)
    import kubernetes  # noqa: F401  (the feeder and the scheduler's API client)

    from schedcache.feed.sync import Syncer, SyncSettings, api_client
except ImportError as missing:  # one line, not a traceback
    raise SystemExit(
        f"bench/e2e.py: {missing}: it needs the kube and extender extras "
        "(pip install -e '.[kube,extender]'; '.[test]' has both)"
    ) from None

CACHE = "bench-e2e"
SCHEDULER = "bench"
CPU, MEMORY, PODS = "4", "32Gi", "110"
POD_CPU, POD_MEMORY = "100m", "500Mi"


#: How nodes are named: ``short`` (node-17), or ``cloud``, as EKS names them
#: (ip-10-0-0-17.eu-west-1.compute.internal, ~40 characters), what a cloud's kube-scheduler sends.
NODE_NAMES = ("short", "cloud")


def node_name(i: int, style: str = "short") -> str:
    if style == "cloud":
        return f"ip-10-{(i >> 16) & 255}-{(i >> 8) & 255}-{i & 255}.eu-west-1.compute.internal"
    return f"node-{i}"


def node(
    i: int, zones: tuple[str, ...] = SHAPES["basic"].zones, style: str = "short"
) -> dict[str, Any]:
    name = node_name(i, style)
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": zones[i % len(zones)],
            },
        },
        "status": {"allocatable": {"cpu": CPU, "memory": MEMORY, "pods": PODS}},
    }


def pod(name: str, node_name: str = "", scheduler: str = SCHEDULER) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}},
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


# -- the API server's process ---------------------------------------------------------------


def api_server(conn: Connection, args: argparse.Namespace, directory: str, profile: str) -> None:
    """Serve the objects; answer "bound" (measured pods bound), "check" (the checks) and
    ("capacity pods", n) (the names of n new pods for the capacity clients), "pods" (the
    pending pods, by name, as the API server holds them); "go" starts the
    profile (``--api-profile``, 3.12+), "check" ends it, "stop" writes it."""
    from bench.device.api_capacity import _profile_handlers, write_profile
    from tests.apiserver import ApiError, FakeApiServer

    profiles = _profile_handlers() if profile else []
    refused: Counter[str] = Counter()
    bind_times: list[float] = []  # time.monotonic() of each measured Binding (system-wide)
    with FakeApiServer() as server:
        bind = server.bind

        def counting(namespace: str, name: str, body: Any) -> Any:
            try:
                answer = bind(namespace, name, body)
                if name.startswith("measured-"):  # no scan of every pod a poll
                    refused["bound"] += 1
                    bind_times.append(time.monotonic())
                return answer
            except ApiError as error:
                refused[f"{error.code}"] += 1
                raise

        server.bind = counting  # type: ignore[method-assign]
        shape = SHAPES[args.shape]  # bench/e2e_shapes.py: labels, namespaces, rules
        for i in range(args.nodes):
            server.create(node(i, shape.zones, args.node_names))
        for i in range(args.initial):
            on = node_name(i % args.nodes, args.node_names)
            server.create(shaped(pod(f"initial-{i}", on), shape, False))
        measured = [shaped(pod(f"measured-{i}"), shape, True) for i in range(args.measured)]
        # (bench/extender.py's argument set has no arrival rate: its pods are all there)
        arrival = getattr(args, "arrival_rate", 0.0)
        if not arrival:
            for manifest in measured:
                server.create(manifest)
        # The harness's own kubeconfig path per run: the capacity clients read it.
        conn.send(str(server.kubeconfig(Path(directory) / "kubeconfig")))
        while True:
            message = conn.recv()
            if message == "stop":
                write_profile(profiles, profile)
                return
            if message == "go":
                if profiles and sys.version_info >= (3, 12):
                    profiles[0].enable()  # one profiler sees every thread (3.12+)
                if arrival:
                    threading.Thread(
                        target=_arrive, args=(server, measured, arrival), daemon=True
                    ).start()
            elif message == "bound":
                conn.send(refused["bound"])
            elif message == "pods":  # the pending pods as the API server holds them
                conn.send(
                    {
                        p["metadata"]["name"]: p
                        for p in server.objects("Pod")
                        if not p["spec"].get("nodeName")
                    }
                )
            elif message == "times":
                conn.send(sorted(bind_times))
            elif message == "check":
                for profiler in profiles:
                    profiler.disable()  # the placing only, not the checks and capacity
                pods = server.objects("Pod")
                checks = _check(server.objects("Node"), pods, refused)
                conn.send({**checks, "rules broken": shape.violations(pods)})
            else:  # ("capacity pods", n): pods no scheduler here places
                names = [f"capacity-{i}" for i in range(message[1])]
                for name in names:
                    server.create(pod(name, scheduler="nobody"))
                conn.send(names)


def _arrive(server: Any, pods: list[dict[str, Any]], rate: float) -> None:
    """``--arrival-rate``: the measured pods created from the go on, ``rate`` a second, each
    at its own moment of one clock (a late one does not push the rest back). Their queueing
    (``sync``'s push of each pod) then falls in the steady window, as in a cluster whose pods
    keep coming; with all of them pending before the go, ``sync`` queued them at start-up."""
    start = time.monotonic()
    for i, manifest in enumerate(pods):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        server.create(manifest)


def _check(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], refused: Counter[str]
) -> dict[str, int]:
    used: dict[str, list[int]] = {}
    for p in pods:
        name = p["spec"].get("nodeName")
        if not name:
            continue
        requests = p["spec"]["containers"][0]["resources"]["requests"]
        row = used.setdefault(name, [0, 0, 0])
        row[0] += milli_value(requests["cpu"], obj="pod", field="cpu")
        row[1] += int_value(requests["memory"], obj="pod", field="memory")
        row[2] += 1
    over = 0
    for n in nodes:
        alloc = n["status"]["allocatable"]
        limit = [
            milli_value(alloc["cpu"], obj="node", field="cpu"),
            int_value(alloc["memory"], obj="node", field="memory"),
            int(alloc["pods"]),
        ]
        row = used.get(n["metadata"]["name"], [0, 0, 0])
        over += any(u > a for u, a in zip(row, limit, strict=True))
    return {
        "over allocatable": over,
        "bound twice": refused["409"],
        "unbound": sum(
            1 for p in pods if p["metadata"]["name"].startswith("measured-") and not _bound(p)
        ),
    }


def _bound(p: dict[str, Any]) -> bool:
    return bool(p["spec"].get("nodeName"))


def clients(text: str) -> tuple[int, int]:
    """An argparse type: PxT, client processes x threads."""
    processes, threads = (int(part) for part in text.lower().split("x"))
    if processes < 1 or threads < 1:
        raise ValueError(text)
    return processes, threads


# -- the feeder's and the replicas' processes -------------------------------------------------


def feeder(url: str, kubeconfig: str, synced: EventType, stop: EventType) -> None:
    cache = Cache(redis.Redis.from_url(url), CACHE, replica="feeder")
    # --batch-linger, through the environment (inherited; a tree before it has no such setting)
    linger = os.environ.get("E2E_BATCH_LINGER", "")
    options: dict[str, Any] = {"batch_linger": float(linger)} if linger else {}
    settings = SyncSettings(page_size=500, **options)
    with Syncer(cache, api_client(kubeconfig), settings, "feeder") as syncer:
        syncer.wait_synced()
        synced.set()
        stop.wait()


def replica(
    url: str,
    kubeconfig: str,
    name: str,
    ready: EventType,
    go: EventType,
    profile: str,
    workers: int | None,
    binding_process: bool = False,
    pop_batch: int | None = None,
    conflicts: Any = None,
) -> None:
    """``conflicts``: a shared counter the replica adds its fit conflicts to when it ends."""
    from schedcache.scheduler.loop import ReferenceScheduler

    cache = Cache(redis.Redis.from_url(url), CACHE, replica=name)
    # Only when asked: the tree before issue 34 bound in the loop (no such option), the tree
    # before issue 40 had no binding process.
    options: dict[str, Any] = {} if workers is None else {"binding_workers": workers}
    if pop_batch is not None:  # (the tree before batched pops has no such option)
        options["pop_batch"] = pop_batch
    if binding_process:
        from schedcache.scheduler.bindings import BindingProcess

        # (a tree before `schedcache scheduler --binding-process` took these in its constructor)
        started: Any = getattr(BindingProcess, "from_url", BindingProcess)
        options["bindings"] = started(kubeconfig, url, CACHE, name, workers or 16, cache.ttl)
    loop = ReferenceScheduler(cache, api_client(kubeconfig), SCHEDULER, **options)
    signal.signal(signal.SIGTERM, lambda *_: loop.stop.set())
    ready.set()
    go.wait()
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    try:
        loop.run()
    finally:
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)
        if conflicts is not None:
            with conflicts.get_lock():
                conflicts.value += loop.conflicts


# -- one configuration ---------------------------------------------------------------------


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int | None) -> float:
    """``cpu_seconds`` of ``pid`` and its live descendants (a replica's binding process)."""
    total = cpu_seconds(pid)
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            with contextlib.suppress(OSError, IndexError):
                total += tree_cpu_seconds(int(child))
    return total


def redis_cpu(url: str, moment: str = "") -> float:
    """Redis' CPU seconds so far. ``moment``: which of a row's readings this is ("go", "warm":
    once the first 5 % are bound, "end"), for a bench that replaces this function to act at
    each (bench/redis_per_pod.py: a pop of 32 can claim every pod of a small row before the
    warm reading, so the cache's count cannot tell it from the end)."""
    del moment
    cpu = redis.Redis.from_url(url).info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def redis_usec(url: str) -> dict[str, int]:
    """Microseconds Redis spent in each command so far (``INFO commandstats``' ``usec``).

    Redis's own time in the commands (a Function's Lua included; not the reading and writing
    of sockets, which ``redis cpu µs/pod`` adds), by command: always counted, at no cost,
    whoever sends them (replicas, the feeder). The slow log at 0 would time the same calls,
    but keeps only its last entries (128 by default: it would need polling) and costs Redis a
    record per command. Both are wall time: on a loaded machine, a Redis descheduled in the
    middle of a command counts the wait too (the CPU column beside it does not)."""
    stats = redis.Redis.from_url(url).info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["usec"]) for name, row in stats.items()}


def steady(times: list[float], start: float, skip: float = 0.05) -> tuple[float, float]:
    """(seconds from ``start`` to the first Binding, Bindings/s from the one that completes
    the first ``skip`` of them to the last); sorted monotonic times, one a Binding."""
    if not times:
        return 0.0, 0.0
    first = max(1, math.ceil(skip * len(times)))  # times[first - 1]: the first 5 % bound
    span = times[-1] - times[first - 1]
    rate = (len(times) - first) / span if span > 0 else 0.0
    return times[0] - start, rate


def usec_per_pod(before: dict[str, int], after: dict[str, int], pods: int) -> dict[str, float]:
    """Redis µs a pod by command (the busiest first), between two ``redis_usec`` readings."""
    delta = {name: after[name] - before.get(name, 0) for name in after}
    busy = sorted(((d, n) for n, d in delta.items() if d > 0), reverse=True)
    return {name: round(d / max(pods, 1), 1) for d, name in busy}


def wait_for(check: Any, timeout: float, what: str) -> float:
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return time.perf_counter() - start


def own_redis(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server of the bench's own (loopback, free port, no persistence) and its URL."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        raise SystemExit(
            "bench/e2e.py: no redis-server (>= 7.0) on PATH to start: install it "
            "(apt-get install redis-server, brew install redis), or give --url of a Redis "
            "whose database may be flushed (with --flush)"
        )
    port = free_port()
    return start_server(directory, port), f"redis://127.0.0.1:{port}/0"


def check_url(url: str, flush: bool) -> None:
    """``--url``: reachable, and empty unless ``--flush`` allows flushing it."""
    try:
        keys = int(redis.Redis.from_url(url, socket_connect_timeout=5).dbsize())
    except (redis.RedisError, ValueError) as error:
        raise SystemExit(f"bench/e2e.py: --url {url}: {error}") from None
    if keys and not flush:
        raise SystemExit(
            f"bench/e2e.py: --url {url}: the database holds {keys:,} keys, and each row "
            "starts from an empty one: give --flush to let the bench flush it, or leave "
            "--url out (the bench then starts a redis-server of its own)"
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


API = "the API server's process"


def received(conn: Connection, sender: BaseProcess, what: str) -> Any:
    """``conn``'s next message, or the bench's end as soon as ``sender`` (the process that
    would send it) died: a row must not wait for ever on a process that failed."""
    while not conn.poll(0.5):
        if not sender.is_alive():
            raise SystemExit(f"{what} exited ({sender.exitcode}) before answering: see above")
    return conn.recv()


def run(replicas: int, args: argparse.Namespace, directory: str) -> dict[str, Any]:
    started = time.perf_counter()
    redis.Redis.from_url(args.url).flushdb()  # the bench's own server, or --flush said so
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    # --api-profile P: P.rN.prof for N replicas.
    api_profile = f"{args.api_profile}.r{replicas}.prof" if args.api_profile else ""
    api = context.Process(
        target=api_server, args=(theirs, args, directory, api_profile), daemon=True
    )
    api.start()
    kubeconfig = received(ours, api, API)
    setup_seconds = time.perf_counter() - started
    stop, synced, go = context.Event(), context.Event(), context.Event()
    processes = [context.Process(target=feeder, args=(args.url, kubeconfig, synced, stop))]
    ready = [context.Event() for _ in range(replicas)]
    conflicts = context.Value("q", 0)  # the replicas' fit conflicts, added as they end
    profile = args.profile if replicas == 1 else ""
    if profile and len(args.shapes) > 1:
        profile = f"{profile}.{args.shape}"  # one file per shape
    processes += [
        context.Process(
            target=replica,
            args=(
                args.url,
                kubeconfig,
                f"replica-{i}",
                ready[i],
                go,
                profile,
                args.workers,
                args.binding_process,
                getattr(args, "pop_batch", None),
                conflicts,
            ),
            daemon=not args.binding_process,  # a daemon may not start its binding process
        )
        for i in range(replicas)
    ]

    def bound() -> int:
        ours.send("bound")
        return int(received(ours, api, API))

    try:
        processes[0].start()
        sync_seconds = wait_for(synced.is_set, 120, "the feeder's first list")
        for process in processes[1:]:
            process.start()
        for event in ready:
            event.wait(60)
        before = [cpu_seconds(p.pid) for p in [api, *processes]] + [redis_cpu(args.url, "go")]
        # The replicas' processes with their binding processes (--binding-process).
        trees = [tree_cpu_seconds(p.pid) for p in processes[1:]]
        # A row placed whole before its first poll (a few pods, batched pops) has no steady
        # window: its Redis figures then count from the go.
        usec_go = (0, redis_usec(args.url), before[-1])
        # Past --timeout the row keeps the rate of what was bound (a budgeted run's last row).
        # (Read before the go: a Binding can come within milliseconds of it on a fast machine.)
        start, clock = time.perf_counter(), time.monotonic()
        ours.send("go")
        go.set()
        # Redis's time in the steady window: read once the first 5 % are bound, then at the end.
        warm = math.ceil(0.05 * args.measured)
        usec_warm: tuple[int, dict[str, int], float] | None = None
        while (done := bound()) < args.measured and time.perf_counter() - start < args.timeout:
            if usec_warm is None and done >= warm:
                usec_warm = (done, redis_usec(args.url), redis_cpu(args.url, "warm"))
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        usec_end = redis_usec(args.url)
        after = [cpu_seconds(p.pid) for p in [api, *processes]] + [redis_cpu(args.url, "end")]
        used = [b - a for a, b in zip(before, after, strict=True)]
        trees = [tree_cpu_seconds(p.pid) - t for p, t in zip(processes[1:], trees, strict=True)]
        ours.send("times")
        start_s, steady_rate = steady(received(ours, api, API), clock)
        warm_done, usec_before, cpu_warm = usec_warm or usec_go
        steady_pods = max(done - warm_done, 1)
        by_command = usec_per_pod(usec_before, usec_end, steady_pods)
        ours.send("check")
        checks: dict[str, int] = received(ours, api, API)
        ours.send(("capacity pods", args.capacity))
        client_processes, client_threads = args.capacity_clients
        capacity = measure(
            kubeconfig, received(ours, api, API), client_processes, client_threads, "raw"
        )
    finally:
        stop.set()
        for process in processes[1:]:
            if process.is_alive():
                process.terminate()  # SIGTERM: run()'s finally writes the profile
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
        ours.send("stop")
        api.join(30)
    return {
        "shape": args.shape,
        "replicas": replicas,
        "nodes": args.nodes,
        "measured": args.measured,
        # Measured pods created a second from the go on (0: all pending before it).
        "arrival /s": args.arrival_rate,
        "setup s": round(setup_seconds, 1),  # the API server's process and its objects
        "sync s": round(sync_seconds, 1),
        "bound": done,  # = measured unless --timeout cut the row
        "seconds": round(seconds, 2),
        "pods/s": round(done / seconds, 1),
        "start s": round(start_s, 3),
        "steady pods/s": round(steady_rate, 1),
        "redis µs/pod": round(sum(by_command.values())),
        # Redis's CPU (its main thread's sockets too) in the same window: the figure that a
        # loaded machine does not inflate (commandstats' usec is wall time, see redis_usec).
        "redis cpu µs/pod": round(1e6 * (after[-1] - cpu_warm) / steady_pods),
        **checks,
        # Claims Redis refused as another replica's node filled first (decisions redone).
        "conflicts": conflicts.value,
        "API binds/s": round(capacity),
        # CPU seconds each part used while the pods were placed (this machine's cores are
        # shared by all of them: the sum over the wall seconds is the cores kept busy).
        "cpu replicas": round(sum(trees), 1),  # binding processes included
        # The scheduling loops' own processes (without their binding processes), a pod.
        "loop ms/pod": round(1000 * sum(used[2:-1]) / max(done, 1), 2),
        "cpu API": round(used[0], 1),
        "cpu sync": round(used[1], 1),
        "cpu redis": round(used[-1], 1),
        "row s": round(time.perf_counter() - started, 1),
        # Not in the table: the steady window's Redis µs a pod, by command.
        "redis µs/pod by command": by_command,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--initial", type=int, default=500, help="bound pods before the start")
    parser.add_argument("--measured", type=int, default=1000, help="pending pods to place")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--arrival-rate",
        type=arrival_rate,
        default=0.0,
        help="measured pods created a second from the go on, so their queueing is in the "
        "steady window (default 0: every one pending before anything starts)",
    )
    parser.add_argument("--capacity", type=int, default=1000, help="pods bound straight")
    parser.add_argument(
        "--capacity-clients", type=clients, default=(4, 4), help="PxT: processes x threads"
    )
    parser.add_argument(
        "--url", default="", help="a Redis of yours (default: a redis-server the bench starts)"
    )
    parser.add_argument(
        "--flush", action="store_true", help="--url's database may be flushed before each row"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="per run, s")
    parser.add_argument(
        "--node-names", choices=NODE_NAMES, default="short", help="node-17, or as EKS names them"
    )
    parser.add_argument("--workers", type=int, help="binding threads a replica (default 16)")
    parser.add_argument(
        "--pop-batch", type=int, help="pods a replica pops a call at most (its default: 32)"
    )
    parser.add_argument(
        "--batch-linger",
        type=float,
        help="sync's batch_linger, s (its default: 0.01; the tree before it has none)",
    )
    parser.add_argument(
        "--binding-process",
        action="store_true",
        help="each replica posts its Bindings from a process of its own",
    )
    parser.add_argument("--profile", default="", help="cProfile file of the 1-replica run")
    parser.add_argument("--api-profile", default="", help="the API server's cProfile: P.rN.prof")
    parser.add_argument("--name", default="e2e", help="results file: bench/results/NAME.json")
    parser.add_argument("--json", default="", help="results file (instead of --name's)")
    parser.add_argument("--tree", default="", help="import schedcache from this checkout")
    parser.add_argument(
        "--shapes",
        nargs="+",
        choices=sorted(SHAPES),
        default=["basic"],
        help="scheduler_perf shapes, each with every --replicas count (bench/e2e_shapes.py)",
    )
    args = parser.parse_args()
    if args.batch_linger is not None:
        os.environ["E2E_BATCH_LINGER"] = str(args.batch_linger)  # (the feeder's process reads it)
    if args.api_profile and sys.version_info < (3, 12):
        # One profiler per request thread up to 3.11 hung the watches here; from 3.12 one
        # profiler sees every thread.
        parser.error("--api-profile needs Python 3.12+")
    late = arrivals_fit(args.arrival_rate, args.measured, args.timeout)
    if late is not None:
        parser.error(late)
    if "anti" in args.shapes and args.initial + args.measured > args.nodes:
        parser.error(
            "--shapes anti: every pod repels every other by hostname, so it needs "
            "--initial + --measured <= --nodes"
        )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as directory:
        server = None
        if args.url:
            check_url(args.url, args.flush)
        else:
            server, args.url = own_redis(directory)
            print(f"redis-server of the bench's own: {args.url}", flush=True)
        try:
            for shape in args.shapes:
                args.shape = shape  # what run() and the API server's process build
                for count in args.replicas:
                    row = run(count, args, directory)
                    rows.append(row)
                    print(row, flush=True)
                    path = _save(args, rows)
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)
    columns = [c for c in rows[0] if not isinstance(rows[0][c], dict)]
    print_table(
        f"e2e ({', '.join(SHAPES[s].upstream for s in args.shapes)}): {args.nodes:,} nodes, "
        f"{args.initial:,} initial pods, {args.measured:,} measured",
        columns,
        [[row[c] for c in columns] for row in rows],
    )
    print("\n".join(["", *ratios(rows)]))
    print(f"\nwritten to {path}")


def _save(args: argparse.Namespace, rows: list[dict[str, Any]]) -> Path:
    """Write every row so far (after each row: a run cut short keeps what it finished)."""
    import schedcache

    payload = {
        "args": vars(args),
        "schedcache": str(Path(schedcache.__file__).parent),
        "rows": rows,
    }
    if not args.json:
        return write_results(args.name, payload)
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"python": sys.version.split()[0], **payload}, indent=2))
    return path


if __name__ == "__main__":
    main()
