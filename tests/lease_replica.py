"""A replica process for test_leases: assumes pods, finishes one binding, then waits to be
killed.

    python tests/lease_replica.py REDIS_URL CACHE
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from schedcache import Cache
from tests.factories import make_pod


def main() -> None:
    url, name = sys.argv[1:3]
    cache = Cache(redis.Redis.from_url(url), name, ttl=600, replica="doomed", lease_ttl=1.0)
    pods = [make_pod(f"p{i}", "n1", "100m", "1Mi") for i in range(4)]
    for pod in pods:
        cache.assume_pod(pod)
    cache.finish_binding(pods[0])
    print("ready", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
