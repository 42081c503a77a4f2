"""``schedcache sync`` at cluster scale: the first list, then a steady watch, with 1 and 3 feeders.

For each feeder count, on a fresh redis-server of its own (free loopback port) and a fresh fake
API server (tests/apiserver.py) in a process of its own holding ``--nodes`` nodes and ``--pods``
bound pods:

1. **first list**: the feeders (one process each, as replicas run them) start against an empty
   cache; the time until the cache holds every node and pod, and objects/s;
2. **steady watch**: the API server modifies ``--rate`` pods a second (a label each, in 10 ms
   ticks) for ``--seconds``; the lag of each change is the stream id (Redis's clock, ms) of its
   PodUpdated event minus the moment the API server made the change (one machine, one clock);
3. **a feeder joining**: one more feeder starts against the synced cache (a replica
   restarting): its list time, and Redis's time for it (its objects are all there already);
4. **server time**: the CPU time of the redis-server process (INFO cpu, user + system) in
   each phase, and the ratio of 3 feeders to 1.

Prints a table and writes ``bench/results/sync.json``.

    python bench/sync.py [--nodes 5000 --pods 150000 --rate 1000 --seconds 10]

Targets (issue 16): first list of 150,000 pods <= 15 s; watch lag p99 <= 100 ms at 1,000
changes/s; 3 feeders cost Redis <= 1.5x one feeder's server time.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import print_table, start_server, write_results
from schedcache import Cache
from schedcache.feed.sync import Syncer, SyncSettings, api_client
from schedcache.store.keys import Keys

CACHE = "bench-sync"


def pod(i: int, nodes: int) -> dict[str, Any]:
    requests = {"cpu": "100m", "memory": "128Mi"}
    return {
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i}",
            "namespace": f"ns-{i % 50}",
            "uid": f"uid-{i}",
            "labels": {"app": f"app-{i % 300}", "rev": "0"},
        },
        "spec": {
            "nodeName": f"node-{i % nodes}",
            "containers": [{"name": "main", "image": "app:1", "resources": {"requests": requests}}],
        },
        "status": {"phase": "Running"},
    }


def node(i: int) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {
            "name": f"node-{i}",
            "labels": {"topology.kubernetes.io/zone": f"zone-{i % 3}", "kubernetes.io/os": "linux"},
        },
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }


# -- the API server's process ---------------------------------------------------------------


def api_server(conn: Connection, nodes: int, pods: int, directory: str) -> None:
    """Serve the objects; on ("churn", rate, seconds, offset) modify pods at that rate and
    answer {uid: unix time of the change}."""
    from tests.apiserver import FakeApiServer

    with FakeApiServer() as server:
        for i in range(nodes):
            server.create(node(i))
        for i in range(pods):
            server.create(pod(i, nodes))
        conn.send(str(server.kubeconfig(Path(directory) / "kubeconfig")))
        while True:
            message = conn.recv()
            if message == "stop":
                return
            _, rate, seconds, offset = message
            changed: dict[str, float] = {}
            tick, per_tick = 0.01, max(1, round(rate * 0.01))
            start = time.monotonic()
            total = int(rate * seconds)
            for n in range(total):
                if n % per_tick == 0:
                    due = start + (n // per_tick) * tick
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                i = (offset + n) % pods
                obj = pod(i, nodes)
                obj["metadata"]["labels"]["rev"] = str(offset + n + 1)
                server.update(obj)
                changed[f"uid-{i}"] = time.time()
            conn.send(changed)


# -- a feeder's process --------------------------------------------------------------------


def feeder(
    url: str,
    kubeconfig: str,
    name: str,
    ready: EventType,
    go: EventType,
    synced: EventType,
    stop: EventType,
) -> None:
    """One replica's feed: connected and imported before ``go``, so the clock measures sync;
    ``synced`` once its own first lists are applied (or dropped)."""
    cache = Cache(redis.Redis.from_url(url), CACHE, replica=name)
    syncer = Syncer(cache, api_client(kubeconfig), SyncSettings(page_size=500), name)
    ready.set()
    go.wait()
    with syncer:
        syncer.wait_synced()
        synced.set()
        stop.wait()


# -- one configuration ---------------------------------------------------------------------


def server_usec(client: redis.Redis) -> float:
    """CPU microseconds the redis-server process used (user + system): commandstats' usec
    would count commands inside a function twice, and count wall time, which grows when the
    feeders preempt Redis on a small machine."""
    cpu = client.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def wait_for(check: Any, timeout: float, what: str) -> float:
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return time.perf_counter() - start


def run(feeders: int, args: argparse.Namespace, directory: str, port: int) -> dict[str, Any]:
    redis_server = start_server(directory, port)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    keys = Keys(CACHE)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    api = context.Process(target=api_server, args=(theirs, args.nodes, args.pods, directory))
    api.start()
    kubeconfig = ours.recv()
    stop, go = context.Event(), context.Event()
    ready = [context.Event() for _ in range(feeders)]
    synced = [context.Event() for _ in range(feeders)]
    processes = [
        context.Process(
            target=feeder,
            args=(url, kubeconfig, f"feeder-{i}", ready[i], go, synced[i], stop),
        )
        for i in range(feeders)
    ]
    try:
        for process in processes:
            process.start()
        for event in ready:
            event.wait(60)
        start_usec = server_usec(client)
        go.set()
        list_seconds = wait_for(
            lambda: client.scard(keys.pods) == args.pods and client.scard(keys.nodes) == args.nodes,
            600,
            "the first list",
        )
        every_list = wait_for(
            lambda: all(event.is_set() for event in synced), 600, "every feeder's list"
        )
        list_usec = server_usec(client) - start_usec
        start_usec = server_usec(client)
        before = client.xinfo_stream(keys.events)["last-generated-id"]
        ours.send(("churn", args.rate, args.seconds, 0))
        changed: dict[str, float] = ours.recv()
        wait_for(
            lambda: _updated(client, keys, before) >= len(changed),
            60,
            "every change in the stream",
        )
        time.sleep(1)  # late copies of the other feeders
        watch_usec = server_usec(client) - start_usec
        lags = _lags(client, keys, before, changed)
        # A feeder joining the synced cache (a replica restarting): its list is all dropped.
        join_ready, join_go, join_synced = context.Event(), context.Event(), context.Event()
        joiner = context.Process(
            target=feeder,
            args=(url, kubeconfig, "joiner", join_ready, join_go, join_synced, stop),
        )
        processes.append(joiner)
        joiner.start()
        join_ready.wait(60)
        start_usec = server_usec(client)
        join_go.set()
        join_seconds = wait_for(join_synced.is_set, 600, "the joiner's list")
        join_usec = server_usec(client) - start_usec
    finally:
        stop.set()
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
        ours.send("stop")
        api.join(30)
        redis_server.terminate()
        redis_server.wait()
    objects = args.nodes + args.pods
    return {
        "feeders": feeders,
        "first list s": round(list_seconds, 2),
        "every feeder's list s": round(list_seconds + every_list, 2),
        "objects/s": round(objects / list_seconds),
        "lag p50 ms": round(_percentile(lags, 50), 1),
        "lag p99 ms": round(_percentile(lags, 99), 1),
        "lag max ms": round(max(lags), 1),
        "changes": len(lags),
        "list server ms": round(list_usec / 1000, 1),
        "watch server ms": round(watch_usec / 1000, 1),
        "join list s": round(join_seconds, 2),
        "join server ms": round(join_usec / 1000, 1),
    }


def _updated(client: redis.Redis, keys: Keys, after: bytes) -> int:
    return sum(
        1
        for _, fields in client.xrange(keys.events, f"({after.decode()}", "+")
        if fields.get(b"type") == b"PodUpdated"
    )


def _lags(client: redis.Redis, keys: Keys, after: bytes, changed: dict[str, float]) -> list[float]:
    lags = []
    for entry_id, fields in client.xrange(keys.events, f"({after.decode()}", "+"):
        if fields.get(b"type") != b"PodUpdated":
            continue
        applied_ms = int(entry_id.split(b"-")[0])
        uid = fields[b"uid"].decode()
        lags.append(max(0.0, applied_ms - changed[uid] * 1000))
    return lags


def _percentile(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--rate", type=int, default=1000, help="pod changes per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--feeders", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--port", type=int, default=6490)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for offset, feeders in enumerate(args.feeders):
            result = run(feeders, args, directory, args.port + offset)
            rows.append(result)
            print(result, flush=True)
    columns = list(rows[0])
    print_table(
        f"sync: {args.nodes:,} nodes, {args.pods:,} pods; watch {args.rate}/s for "
        f"{args.seconds:g} s",
        columns,
        [[row[c] for c in columns] for row in rows],
    )
    ratios = {}
    if len(rows) > 1:
        one = rows[0]
        for row in rows[1:]:
            for phase in ("list server ms", "watch server ms"):
                ratios[f"{row['feeders']} vs {one['feeders']} feeders, {phase}"] = round(
                    row[phase] / one[phase], 2
                )
        for name, ratio in ratios.items():
            print(f"{name}: {ratio}x")
    median_lag = statistics.median(row["lag p99 ms"] for row in rows)
    path = write_results(
        "sync",
        {"args": vars(args), "rows": rows, "ratios": ratios, "median lag p99 ms": median_lag},
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
