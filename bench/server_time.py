"""Redis server time per command (INFO commandstats), before and after a library change.

For each source tree given (``--tree``; default this one), loads that tree's Lua library into a
redis-server of its own (started here on a free loopback port), then measures the server's
microseconds per FCALL for add_pod and assume_pod, one per call and inside ``sc_batch`` (per
pod), ``--rounds`` times alternating between the trees so both see the same machine noise.
Prints medians as a table and writes ``bench/results/server_time.json``.

    python bench/server_time.py --tree /path/to/old/checkout --tree . [--pods 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table, start_server, write_results

# Run inside the tree measured (its own schedcache package and lua/), against one server.
PROBE = r"""
import json, sys, redis
from schedcache import Cache, Pod
url, pods, chunk = sys.argv[1], int(sys.argv[2]), 200
client = redis.Redis.from_url(url)
def pod(i, name):
    meta = {"name": f"{name}-{i}", "namespace": "bench", "uid": f"{name}-{i}"}
    requests = {"cpu": "100m", "memory": "64Mi"}
    containers = [{"name": "c", "resources": {"requests": requests}}]
    spec = {"nodeName": f"node-{i % 100}", "containers": containers}
    return Pod.from_k8s({"metadata": meta, "spec": spec})
def fcall_usec():
    stats = client.info("commandstats")
    return stats.get("cmdstat_fcall", {"usec": 0, "calls": 0})
out = {}
for method in ("add_pod", "assume_pod"):
    for mode in ("single", "batched"):
        cache = Cache(client, f"bench-{method}-{mode}", ttl=30.0, replica="bench")
        cache.clear()
        items = [pod(i, method) for i in range(pods)]
        client.config_resetstat()
        if mode == "single":
            for p in items:
                getattr(cache, method)(p)
        else:
            batch = cache.batch(chunk_size=chunk)
            for p in items:
                getattr(batch, method)(p)
            assert all(r.ok for r in batch.execute())
        stat = fcall_usec()
        out[f"{method}, {mode}"] = stat["usec"] / pods
        cache.clear()
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", help="a source tree (repeatable)")
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=6470)
    args = parser.parse_args()
    trees = [str(Path(t).resolve()) for t in (args.tree or ["."])]
    samples: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.rounds):
            for offset, tree in enumerate(trees):
                port = args.port + offset
                server = start_server(directory, port)
                try:
                    env = {**os.environ, "PYTHONPATH": tree}
                    reply = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            PROBE,
                            f"redis://127.0.0.1:{port}/0",
                            str(args.pods),
                        ],
                        cwd=tree,
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                finally:
                    server.terminate()
                    server.wait()
                for name, usec in json.loads(reply.stdout).items():
                    samples[tree].setdefault(name, []).append(usec)
    names = list(samples[trees[0]])
    medians = {t: {n: statistics.median(v) for n, v in samples[t].items()} for t in trees}
    rows = [[n, *(f"{medians[t][n]:.1f}" for t in trees)] for n in names]
    print_table("server us per pod (median of rounds)", ["command", *trees], rows)
    path = write_results("server_time", {"trees": trees, "medians": medians, "runs": samples})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
