"""The client path of single commands: redis-py's ``execute_command`` against the Store's
pinned connection (``schedcache/store/pinned.py``), and one ``add_pod`` per round trip against a
``PING`` loop, each pair run in interleaved blocks in one process.

This VM's speed moves by half within a minute, so rates measured one run after the other say
little; blocks of a few hundred calls alternating A, B, A, B... see the same machine, and the
median of the per-block ratios is what is reported. Client CPU is this process's CPU time
(``time.process_time``) per call. Prints a table and writes ``bench/results/client_path.json``.

    python bench/client_path.py [--redis URL] [--blocks 15] [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.commands import make_pods
from bench.common import print_table, write_results
from schedcache import Cache
from schedcache.store import commands, pinned

Block = Callable[[int], int]  # runs the next `n` calls; returns how many it made


def measure_block(run: Block, calls: int) -> tuple[float, float]:
    """(calls per second, client CPU µs per call) of one block."""
    cpu, wall = time.process_time(), time.perf_counter()
    done = run(calls)
    return done / (time.perf_counter() - wall), (time.process_time() - cpu) / done * 1e6


def interleaved(a: Block, b: Block, blocks: int, calls: int) -> dict[str, Any]:
    """Blocks of ``a`` and ``b`` alternated (``b`` first every other time); medians."""
    rates: dict[str, list[float]] = {"a": [], "b": []}
    cpus: dict[str, list[float]] = {"a": [], "b": []}
    for block in range(blocks):
        order = (("a", a), ("b", b)) if block % 2 == 0 else (("b", b), ("a", a))
        for name, run in order:
            rate, cpu = measure_block(run, calls)
            rates[name].append(rate)
            cpus[name].append(cpu)
    ratios = [ra / rb for ra, rb in zip(rates["a"], rates["b"], strict=True)]
    cpu_ratios = [ca / cb for ca, cb in zip(cpus["a"], cpus["b"], strict=True)]
    return {
        "a_per_second": statistics.median(rates["a"]),
        "b_per_second": statistics.median(rates["b"]),
        "a_client_cpu_us": statistics.median(cpus["a"]),
        "b_client_cpu_us": statistics.median(cpus["b"]),
        "rate_ratio_median": statistics.median(ratios),
        "cpu_ratio_median": statistics.median(cpu_ratios),
        "rate_ratios": ratios,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300, help="calls per block")
    args = parser.parse_args()

    client = redis.Redis.from_url(args.redis)
    cache = Cache(client, "bench-client-path", ttl=30.0, replica="bench")
    cache.clear()
    total = 2 * args.blocks * args.calls
    pods = iter(make_pods(3 * total, 100))
    store = cache.store

    def fcall_words() -> Iterator[tuple[Any, ...]]:
        for pod in pods:
            command = commands.add_pod(pod)
            yield store.function_args(command.name, command.id, command.args)

    words = fcall_words()

    def through_redis_py(n: int) -> int:
        server = store.server()
        for _ in range(n):
            server.fcall(*next(words))
        return n

    def through_pinned(n: int) -> int:
        server = store.server()
        for _ in range(n):
            pinned.call(server, ("FCALL", *next(words)))
        return n

    def add_pods(n: int) -> int:
        for _ in range(n):
            cache.add_pod(next(pods))
        return n

    def pings(n: int) -> int:
        for _ in range(n):
            client.ping()
        return n

    transport = interleaved(through_pinned, through_redis_py, args.blocks, args.calls)
    cache.clear()
    against_ping = interleaved(add_pods, pings, args.blocks, args.calls)
    cache.clear()

    rows = [
        [
            "FCALL sc_add_pod: pinned connection (A) vs redis-py execute_command (B)",
            f"{transport['a_per_second']:,.0f} / {transport['b_per_second']:,.0f}",
            f"{transport['rate_ratio_median']:.2f}",
            f"{transport['a_client_cpu_us']:.1f} / {transport['b_client_cpu_us']:.1f}",
            f"{transport['cpu_ratio_median']:.2f}",
        ],
        [
            "cache.add_pod, one per round trip (A) vs PING loop (B)",
            f"{against_ping['a_per_second']:,.0f} / {against_ping['b_per_second']:,.0f}",
            f"{against_ping['rate_ratio_median']:.2f}",
            f"{against_ping['a_client_cpu_us']:.1f} / {against_ping['b_client_cpu_us']:.1f}",
            f"{against_ping['cpu_ratio_median']:.2f}",
        ],
    ]
    print_table(
        f"single calls, {args.blocks} interleaved blocks of {args.calls} calls each; medians "
        "(ratios: median of the per-block A/B ratios)",
        ["comparison", "per second A / B", "rate A/B", "client cpu us A / B", "cpu A/B"],
        rows,
    )
    results = {"settings": vars(args), "transport": transport, "add_pod_vs_ping": against_ping}
    print(f"\nwritten to {write_results('client_path', results)}")


if __name__ == "__main__":
    main()
