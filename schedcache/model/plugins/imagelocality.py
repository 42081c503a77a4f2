"""ImageLocality (pkg/scheduler/framework/plugins/imagelocality): favour nodes that already hold
the pod's images, each image's size scaled by the share of nodes holding it (spread), the sum
clamped to [23 MB, 1000 MB x containers] and mapped onto 0-100."""

from __future__ import annotations

from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Pod

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def normalized_image_name(name: str) -> str:
    """Upstream's ``normalizedImageName``: ``:latest`` when no tag nor digest is given."""
    if name.rfind(":") <= name.rfind("/") and "@" not in name:
        return name + ":latest"
    return name


def score(pod: Pod, info: NodeInfo, total_nodes: int) -> int:
    if not pod.images or total_nodes <= 0:
        return 0
    total = 0
    for image in pod.images:
        state = info.image_states.get(normalized_image_name(image)) or info.image_states.get(image)
        if state is not None:
            total += int(state.size * (state.num_nodes / total_nodes))
    high = MAX_CONTAINER_THRESHOLD * len(pod.images)
    total = min(max(total, MIN_THRESHOLD), high)
    return 100 * (total - MIN_THRESHOLD) // (high - MIN_THRESHOLD)
