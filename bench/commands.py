"""Commands per second for add_pod and assume_pod, one per round trip and batched.

Compared with the ceiling of the same server: raw pipelined XADD of the same event payload.
Runs on a real Redis (``--redis``, default 127.0.0.1:6379) and on the embedded fakeredis, prints
a table and writes ``bench/results/commands.json``. Figures are medians of ``--repeats`` runs
measured in one go, since these machines are noisy.

    python bench/commands.py [--redis URL] [--pods 5000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
import redis.asyncio
from fakeredis import FakeAsyncRedis

from bench.common import pod_manifest, print_table, timed, write_results
from schedcache import Cache, Pod
from schedcache.aio import AsyncCache
from schedcache.store.commands import add_pod
from schedcache.store.connection import embedded_client
from schedcache.store.library import function_name


def make_pods(count: int, nodes: int) -> list[Pod]:
    return [
        Pod.from_k8s(
            pod_manifest(f"p-{i}", f"uid-{i}", f"node-{i % nodes}", host_port=8000 + i % 50)
        )
        for i in range(count)
    ]


def measure(client: redis.Redis, pods: list[Pod], repeats: int, chunk: int) -> dict[str, Any]:
    cache = Cache(client, "bench-commands", ttl=30.0, replica="bench")

    def one_by_one(method: str):
        def run() -> int:
            call = getattr(cache, method)
            for pod in pods:
                call(pod)
            return len(pods)

        return run

    def batched(method: str):
        def run() -> int:
            batch = cache.batch(chunk_size=chunk)
            for pod in pods:
                getattr(batch, method)(pod)
            results = batch.execute()
            assert all(r.ok for r in results)
            return len(pods)

        return run

    def pipelined_calls() -> int:
        pipe = client.pipeline(transaction=False)
        for i, pod in enumerate(pods):
            command = add_pod(pod)
            pipe.fcall(
                function_name("add_pod"), 1, cache.keys.prefix, "bench", command.id, *command.args
            )
            if i % chunk == chunk - 1:
                pipe.execute()
        pipe.execute()
        return len(pods)

    blobs = [add_pod(pod).args[2] for pod in pods]
    stream = "{bench-xadd}:events"

    def raw_xadd() -> int:
        pipe = client.pipeline(transaction=False)
        for i, (pod, blob) in enumerate(zip(pods, blobs, strict=True)):
            pipe.xadd(
                stream,
                {
                    "type": "PodAdded",
                    "v": 1,
                    "replica": "bench",
                    "uid": pod.uid,
                    "node": pod.node_name,
                    "gen": i,
                    "data": blob,
                },
            )
            if i % chunk == chunk - 1:
                pipe.execute()
        pipe.execute()
        return len(pods)

    def ping_loop() -> int:
        for _ in pods:
            client.ping()
        return len(pods)

    def trivial_fcall() -> int:
        for _ in pods:
            client.fcall_ro(function_name("version"), 0)
        return len(pods)

    def reset() -> None:
        cache.clear()
        client.delete(stream)

    server = ServerTime(client)
    figures = {
        "add_pod, one call per round trip": server.timed(one_by_one("add_pod"), repeats, reset),
        **async_figures(cache, pods, repeats, reset, server),
        "assume_pod, one call per round trip": server.timed(
            one_by_one("assume_pod"), repeats, reset
        ),
        "add_pod, pipelined single calls": server.timed(pipelined_calls, repeats, reset),
        "add_pod, batched (sc_batch)": server.timed(batched("add_pod"), repeats, reset),
        "assume_pod, batched (sc_batch)": server.timed(batched("assume_pod"), repeats, reset),
        "ceiling: raw pipelined XADD": server.timed(raw_xadd, repeats, reset, "xadd"),
        "ceiling: PING, one per round trip": server.timed(ping_loop, repeats, reset, "ping"),
        "ceiling: trivial FCALL_RO, one per round trip": server.timed(
            trivial_fcall, repeats, reset, "fcall_ro"
        ),
    }
    reset()
    return figures


class ServerTime:
    """Redis' own time per operation during each run: ``INFO commandstats`` reset before and
    read after (the microseconds of every call of ``command``, over the operations done).
    Real Redis only: fakeredis has no command statistics."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        try:
            client.config_resetstat()
            client.info("commandstats")
            self.enabled = True
        except (redis.RedisError, NotImplementedError):
            self.enabled = False

    def timed(
        self,
        run: Callable[[], int],
        repeats: int,
        reset: Callable[[], None],
        command: str = "fcall",
    ) -> dict[str, Any]:
        samples: list[float] = []
        client_cpu: list[float] = []

        def setup() -> None:
            reset()
            if self.enabled:
                self.client.config_resetstat()

        def measured() -> int:
            cpu = time.process_time()
            done = run()
            client_cpu.append((time.process_time() - cpu) / done * 1e6)
            if self.enabled:
                stats = self.client.info("commandstats").get(f"cmdstat_{command}", {})
                samples.append(float(stats.get("usec", 0)) / done)
            return done

        figure = timed(measured, repeats, setup)
        # This process's CPU per operation (with fakeredis, the server's too): the client
        # path's cost, which the machine's noise moves far less than a rate.
        figure["client_cpu_us"] = statistics.median(client_cpu)
        if samples:
            figure["server_us"] = statistics.median(samples)
            figure["server_us_runs"] = samples
        return figure


def async_figures(
    cache: Cache, pods: list[Pod], repeats: int, reset: Callable[[], None], server: ServerTime
) -> dict[str, Any]:
    """add_pod through AsyncCache: one coroutine, and 64 sharing one client (one pool)."""
    loop = asyncio.new_event_loop()

    async def open_cache() -> AsyncCache:
        pool = getattr(cache.client, "connection_pool", None)
        server = pool.connection_kwargs.get("server") if pool is not None else None
        if server is not None:  # the embedded fakeredis: the same in-process server
            client: Any = FakeAsyncRedis(server=server)
        else:
            client = redis.asyncio.Redis(
                connection_pool=redis.asyncio.ConnectionPool(
                    **{k: v for k, v in pool.connection_kwargs.items() if k in POOL_OPTIONS}
                )
            )
        return await AsyncCache.open(client, cache.name, ttl=30.0, replica="bench")

    async_cache = loop.run_until_complete(open_cache())

    def concurrently(coroutines: int) -> Callable[[], int]:
        def run() -> int:
            async def main() -> None:
                queue = iter(pods)

                async def worker() -> None:
                    for pod in queue:
                        await async_cache.add_pod(pod)

                await asyncio.gather(*(worker() for _ in range(coroutines)))

            loop.run_until_complete(main())
            return len(pods)

        return run

    figures = {
        "add_pod, asyncio, 1 coroutine": server.timed(concurrently(1), repeats, reset),
        "add_pod, asyncio, 64 coroutines on one pool": server.timed(
            concurrently(64), repeats, reset
        ),
    }
    loop.run_until_complete(async_cache.aclose())
    loop.close()
    return figures


# What an asyncio pool needs of the sync client's connection settings.
POOL_OPTIONS = ("host", "port", "db", "username", "password", "socket_timeout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--fake-pods", type=int, default=1000, help="pods on fakeredis (slower)")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=200, help="commands per sc_batch call")
    args = parser.parse_args()

    backends = {
        "redis": (redis.Redis.from_url(args.redis), args.pods),
        "fakeredis": (embedded_client(), args.fake_pods),
    }
    results: dict[str, Any] = {"settings": vars(args), "backends": {}}
    rows = []
    for backend, (client, count) in backends.items():
        figures = measure(client, make_pods(count, args.nodes), args.repeats, args.chunk)
        ceiling = figures["ceiling: raw pipelined XADD"]["median"]
        results["backends"][backend] = figures
        for name, figure in figures.items():
            server_us = figure.get("server_us")
            rows.append(
                [
                    backend,
                    name,
                    f"{figure['median']:,.0f}",
                    f"{figure['median'] / ceiling:.2f}",
                    "-" if server_us is None else f"{server_us:.1f}",
                    f"{figure['client_cpu_us']:.1f}",
                ]
            )
    print_table(
        f"commands/s, median of {args.repeats} runs ({args.pods} pods on Redis, "
        f"{args.fake_pods} on fakeredis, {args.chunk} per batch); server us: Redis' own time "
        "per operation (INFO commandstats); client cpu us: this process's CPU per operation",
        ["backend", "operation", "per second", "of ceiling", "server us", "client cpu us"],
        rows,
    )
    print(f"\nwritten to {write_results('commands', results)}")


if __name__ == "__main__":
    main()
