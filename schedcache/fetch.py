"""Reading nodes and pods back from Redis in a constant number of round trips.

Used by ``dump()`` and ``get_node_info()`` (and by snapshots): one pipeline for the node hashes,
their pod lists and image names, one for the pod objects and image summaries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import redis

from schedcache.aggregates import NodeFields
from schedcache.events import unpack
from schedcache.keys import Keys
from schedcache.models import Node
from schedcache.nodeinfo import ImageStateSummary, NodeInfo
from schedcache.records import PodRecord, parse_pod_record

CHUNK = 2000


def fetch_pods(client: redis.Redis, keys: Keys, uids: Sequence[str]) -> dict[str, PodRecord]:
    """The stored records of ``uids``; uids not in the cache are left out."""
    records: dict[str, PodRecord] = {}
    for start in range(0, len(uids), CHUNK):
        chunk = uids[start : start + CHUNK]
        pipe = client.pipeline(transaction=False)
        for uid in chunk:
            pipe.get(keys.pod(uid))
        for uid, raw in zip(chunk, pipe.execute(), strict=True):
            if raw is not None:
                records[uid] = parse_pod_record(raw)
    return records


def fetch_node_infos(client: redis.Redis, keys: Keys, names: Iterable[str]) -> dict[str, NodeInfo]:
    """``NodeInfo`` for each of ``names`` that has an entry (live, ghost or placeholder)."""
    names = list(names)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(keys.node(name))
        pipe.smembers(keys.node_pods(name))
        pipe.smembers(keys.node_images(name))
    replies = pipe.execute()

    raw_nodes: dict[str, tuple[NodeFields, list[str], list[str]]] = {}
    for index, name in enumerate(names):
        raw, uids, images = replies[3 * index : 3 * index + 3]
        if raw:
            raw_nodes[name] = (
                NodeFields(raw),
                [uid.decode() for uid in uids],
                sorted(image.decode() for image in images),
            )

    all_uids = [uid for _, uids, _ in raw_nodes.values() for uid in uids]
    pods = fetch_pods(client, keys, all_uids)
    all_images = sorted({image for _, _, images in raw_nodes.values() for image in images})
    summaries = fetch_image_summaries(client, keys, all_images)

    infos: dict[str, NodeInfo] = {}
    for name, (fields, uids, images) in raw_nodes.items():
        blob = fields.strings.get("blob")
        mine = [pods[uid] for uid in uids if uid in pods]
        infos[name] = NodeInfo(
            name=name,
            node=Node.from_dict(unpack(blob)) if fields.exists and blob else None,
            pods=[record.pod for record in sorted(mine, key=lambda r: r.generation)],
            requested=fields.requested,
            non_zero_requested=fields.non_zero_requested,
            allocatable=fields.allocatable,
            used_ports=fields.used_ports,
            image_states={image: summaries[image] for image in images if image in summaries},
            pvc_ref_counts=fields.pvc_ref_counts,
            generation=fields.generation,
        )
    return infos


def fetch_image_summaries(
    client: redis.Redis, keys: Keys, images: Sequence[str]
) -> dict[str, ImageStateSummary]:
    """Size and live-node count of each image, read together so they agree."""
    if not images:
        return {}
    pipe = client.pipeline(transaction=False)
    pipe.hmget(keys.images, list(images))
    for image in images:
        pipe.scard(keys.image_nodes(image))
    sizes, *counts = pipe.execute()
    return {
        image: ImageStateSummary(size=int(size), num_nodes=int(count))
        for image, size, count in zip(images, sizes, counts, strict=True)
        if size is not None
    }
