"""Redis restarts under a feeder, and the cost of a claim's lost-writes check, measured.

``feed``: one ``Syncer`` feeds a fake API server (``tests/apiserver.py``: 3 nodes, 60 pods)
into a redis-server this benchmark starts with AOF ``always``; then, ``--restarts`` times, 20
changes are applied, Redis is killed, 5 changes arrive while it is down, and it is started
again. Reported: lists (1 is the first one), changes delivered again after being applied
(``dropped``: each one a replay), logged tracebacks, and the seconds from Redis answering
again to the cache holding every change (median). ``--compare TREE`` runs the same in a
subprocess against another source tree (e.g. a worktree of the commit before), alternating
with this one, ``--rounds`` times each.

``claims``: fit-checked claims with inter-pod rules judged on a snapshot, one round trip each,
with and without the snapshot's newest event id (``seen``: ``lua/_history.lua`` reads one
stream entry), alternating blocks; Redis's own time per ``FCALL`` (``INFO commandstats``),
median over the blocks.

``python -m bench.resilience [--restarts 3] [--rounds 3] [--compare /path/to/before-tree]``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import positive, print_table, write_results

ROOT = Path(__file__).resolve().parents[1]
NODES = 100  # of the claims benchmark, in 5 zones


def feed_round(restarts: int) -> dict[str, Any]:
    """One feeder through ``restarts`` Redis restarts (in this process's source tree)."""
    from schedcache import Cache, connect
    from schedcache.feed.sync import Syncer, SyncSettings, api_client
    from schedcache.store.retry import RetryPolicy
    from tests.apiserver import FakeApiServer
    from tests.servers import Server, free_port
    from tests.test_sync import cached_state, expected_state, node_obj, pod_obj

    tracebacks: list[str] = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info:
                tracebacks.append(record.getMessage())

    logging.getLogger().addHandler(Count(logging.WARNING))
    logging.getLogger().setLevel(logging.WARNING)
    settings = SyncSettings(page_size=50, watch_timeout=60, backoff=0.05, max_backoff=0.5)
    retry = RetryPolicy(attempts=3, within=0.3, first_delay=0.05, max_delay=0.1)
    directory = Path(tempfile.mkdtemp(prefix="bench-resilience-"))
    server = Server(free_port(), directory, ["--appendonly", "yes", "--appendfsync", "always"])
    server.start()
    url = f"redis://127.0.0.1:{server.port}/0"
    catch_up: list[float] = []
    with FakeApiServer() as api:
        for i in range(3):
            api.create(node_obj(f"n{i}"))
        for i in range(60):
            api.create(pod_obj(f"p{i}", f"n{i % 3}"))
        cache = Cache(connect(url), f"b-{uuid.uuid4().hex[:8]}", retry=retry)
        syncer = Syncer(cache, api_client(str(api.kubeconfig(directory / "kc"))), settings, "f")
        syncer.start()
        assert syncer.wait_synced(30)

        def in_step(timeout: float = 60.0) -> None:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    if cached_state(cache) == expected_state(api):
                        return
                except Exception:  # Redis still coming back
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("the cache did not catch up")
                time.sleep(0.02)

        for round_ in range(restarts):
            for i in range(20):
                api.create(pod_obj(f"r{round_}-{i}", f"n{i % 3}"))
            in_step()
            server.kill()
            for i in range(5):
                api.create(pod_obj(f"down{round_}-{i}", f"n{i % 3}"))
                time.sleep(0.05)
            time.sleep(0.5)
            server.start()
            back = time.monotonic()
            api.create(pod_obj(f"after{round_}", "n0"))  # a change after the restart
            in_step()
            catch_up.append(time.monotonic() - back)
        syncer.stop()
    server.kill()
    counters = [feed.counters for feed in syncer.feeds]
    return {
        "lists": sum(c.relists for c in counters),
        "replayed": sum(c.dropped for c in counters),
        "applied": sum(c.applied for c in counters),
        "tracebacks": len(tracebacks),
        "catch_up_s": statistics.median(catch_up),
    }


def feed_in(tree: Path, restarts: int) -> dict[str, Any]:
    """:func:`feed_round` in a subprocess whose ``schedcache`` and ``tests`` are ``tree``'s."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, __file__, "--feed-round", str(restarts)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def claims(blocks: int, per_block: int) -> dict[str, float]:
    """Redis's µs per fit-checked claim with rules, without and with ``seen``."""
    from schedcache import Cache, Snapshot, connect
    from schedcache.store import commands
    from schedcache.views.claims import claim_context
    from tests.factories import make_node, make_pod
    from tests.servers import Server, free_port

    server = Server(free_port(), Path(tempfile.mkdtemp()), ["--appendonly", "no"]).start()
    cache = Cache(connect(f"redis://127.0.0.1:{server.port}/0"), "bench")
    zone = "topology.kubernetes.io/zone"
    for i in range(NODES):
        cache.add_node(make_node(f"n{i}", "1000", "1000Gi", labels={zone: f"z{i % 5}"}))
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": zone}
            ]
        }
    }
    timings: dict[str, list[float]] = {"without": [], "with": []}
    made = 0
    snap = Snapshot()
    for _ in range(blocks):
        for variant in ("without", "with"):
            client = server.client()
            client.config_resetstat()
            for _ in range(per_block):
                cache.update_snapshot(snap)  # (FCALL_RO and XRANGE: not counted below)
                made += 1
                pod = make_pod(f"p{made}", f"n{made % NODES}", "1m", "1Mi", affinity=anti)
                since, reads, domains, incarnation, seen = claim_context(snap, pod)
                command = commands.assume_pod(
                    pod, True, None, 0.0, since, reads, domains, incarnation,
                    seen if variant == "with" else "",
                )  # fmt: skip
                cache.run(command)
            stats = client.info("commandstats")["cmdstat_fcall"]
            timings[variant].append(float(stats["usec_per_call"]))
    server.kill()
    return {variant: statistics.median(values) for variant, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=positive, default=3)
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument("--compare", type=Path, default=None, help="another source tree")
    parser.add_argument("--blocks", type=positive, default=5)
    parser.add_argument("--per-block", type=positive, default=300)
    parser.add_argument("--feed-round", type=positive, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.feed_round:  # one run, in the tree of PYTHONPATH (feed_in)
        print(json.dumps(feed_round(args.feed_round)))
        return
    trees = {"this": ROOT, **({"compare": args.compare.resolve()} if args.compare else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(feed_in(tree, args.restarts))
    rows = []
    for name, results in runs.items():
        med = {key: statistics.median(r[key] for r in results) for key in results[0]}
        rows.append(
            [
                f"{name} ({trees[name].name})",
                med["lists"],
                med["replayed"],
                med["applied"],
                med["tracebacks"],
                f"{med['catch_up_s']:.2f}",
            ]
        )
    print_table(
        f"A feeder through {args.restarts} Redis restarts (medians of {args.rounds} runs)",
        ["tree", "lists", "replayed", "applied", "tracebacks", "catch-up s"],
        rows,
    )
    cost = claims(args.blocks, args.per_block)
    print_table(
        f"Redis µs per fit-checked claim with rules ({args.blocks} blocks of {args.per_block})",
        ["seen", "µs/FCALL", "ratio"],
        [
            ["without", f"{cost['without']:.1f}", "1.00"],
            ["with", f"{cost['with']:.1f}", f"{cost['with'] / cost['without']:.2f}"],
        ],
    )
    settings = {**vars(args), "compare": str(args.compare) if args.compare else None}
    path = write_results("resilience", {"feed": runs, "claims": cost, "args": settings})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
