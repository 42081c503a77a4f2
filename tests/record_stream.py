"""Records tests/fixtures/stream-v1.jsonl: a sample event stream of schema version 1, with the
state it must replay to. Re-run only to add a new schema version's sample, never to update an
old one (the point is that old streams keep replaying).

    python tests/record_stream.py
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from schedcache import Cache, connect
from tests.factories import make_node, make_pod, port

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "stream-v1.jsonl"


def history(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "8Gi", images=[(["nginx:1"], 100)]))
    cache.add_node(make_node("n2", "2", "4Gi", labels={"topology.kubernetes.io/zone": "b"}))
    web = make_pod("web", "n1", "500m", "1Gi", ports=[port(80)], pvcs=["data"])
    cache.assume_pod(web)
    cache.finish_binding(web, now=1_700_000_000)
    cache.add_pod(web.with_node("n2"))  # confirmed elsewhere
    api = make_pod("api", "n1", "250m", "256Mi")
    cache.add_pod(api)
    cache.update_pod(api, make_pod("api", "n1", "300m", "256Mi", labels={"v": "2"}))
    job = make_pod("job", "n1", "100m", "1Mi")
    cache.assume_pod(job)
    cache.finish_binding(job, now=1_700_000_000)
    cache.cleanup_assumed_pods(now=1_700_000_100)
    cache.assume_pod(make_pod("pending", "n2", "100m", "1Mi"))
    cache.remove_node("n1")  # api keeps it as a ghost
    cache.update_node(None, make_node("n2", "3", "4Gi"))


def summarize(nodes: dict, assumed: set[str], generation: int) -> dict:
    """What a state must look like, in plain JSON: per node, pods and requests."""
    return {
        "nodes": {
            name: {
                "ghost": info.node is None,
                "pods": sorted(p.name for p in info.pods),
                "cpu": info.requested.milli_cpu,
                "memory": info.requested.memory,
                "generation": info.generation,
            }
            for name, info in sorted(nodes.items())
        },
        "assumed": sorted(assumed),
        "generation": generation,
    }


def summary(cache: Cache) -> dict:
    dump = cache.dump()
    return summarize(dump.nodes, dump.assumed_pods, dump.generation)


def main() -> None:
    cache = Cache(connect(), "record", ttl=10, replica="recorder")
    history(cache)
    lines = []
    for _, raw in cache.client.xrange(cache.keys.events):
        fields = {k.decode(): v for k, v in raw.items()}
        data = fields.pop("data", None)
        lines.append(
            json.dumps(
                {
                    "fields": {k: v.decode() for k, v in fields.items()},
                    "data": base64.b64encode(data).decode() if data else None,
                }
            )
        )
    lines.append(json.dumps({"expected": summary(cache)}))
    FIXTURE.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
