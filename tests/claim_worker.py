"""A replica process for test_claims: claims pods with check_fit until none fits.

    python tests/claim_worker.py REDIS_URL CACHE REPLICA PODS NODES
Prints "<claimed> <conflicts>".
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from schedcache import Cache, Snapshot
from schedcache.errors import FitConflict
from tests.factories import make_pod


def main() -> None:
    url, name, replica, pods, _nodes = sys.argv[1:6]
    cache = Cache(redis.Redis.from_url(url), name, replica=replica)
    snap = Snapshot()
    claimed = conflicts = 0
    for i in range(int(pods)):
        pod = make_pod(f"{replica}-{i}", "", "100m", "64Mi")
        cache.update_snapshot(snap)
        candidates = [info for info in snap.node_info_list if not info.shortages(pod)]
        while candidates:
            best = min(candidates, key=lambda info: info.requested.milli_cpu)
            try:
                cache.assume_pod(pod.with_node(best.name), check_fit=True)
                claimed += 1
                break
            except FitConflict:
                conflicts += 1
                candidates.remove(best)  # retry on the next best node
    print(claimed, conflicts)


if __name__ == "__main__":
    main()
