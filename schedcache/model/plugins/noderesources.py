"""NodeResourcesFit's scoring strategies and NodeResourcesBalancedAllocation
(pkg/scheduler/framework/plugins/noderesources): CPU and memory, weight 1 each, on the requests
(both plugins score with ``useRequested``: a pod without requests adds nothing); 0-100 per node,
integer arithmetic as upstream's int64."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

from schedcache.model.nodeinfo import NodeInfo
from schedcache.model.values import Pod

MAX_NODE_SCORE = 100

#: RequestedToCapacityRatio's default shape (utilisation %, score 0-10), as upstream's
#: defaulting gives it: favour the emptiest nodes.
DEFAULT_SHAPE: tuple[tuple[int, int], ...] = ((0, 10), (100, 0))


def _requested_and_allocatable(pod: Pod, info: NodeInfo) -> list[tuple[int, int]]:
    requested, wanted, allocatable = info.requested, pod.requests, info.allocatable
    return [
        (requested.milli_cpu + wanted.milli_cpu, allocatable.milli_cpu),
        (requested.memory + wanted.memory, allocatable.memory),
    ]


def _weighted(pod: Pod, info: NodeInfo, per_resource: Callable[[int, int], int]) -> int:
    pairs = _requested_and_allocatable(pod, info)
    return sum(per_resource(requested, allocatable) for requested, allocatable in pairs) // len(
        pairs
    )


def least_allocated(pod: Pod, info: NodeInfo) -> int:
    def one(requested: int, allocatable: int) -> int:
        if allocatable == 0 or requested > allocatable:
            return 0
        return (allocatable - requested) * MAX_NODE_SCORE // allocatable

    return _weighted(pod, info, one)


def most_allocated(pod: Pod, info: NodeInfo) -> int:
    def one(requested: int, allocatable: int) -> int:
        if allocatable == 0:
            return 0
        return min(requested, allocatable) * MAX_NODE_SCORE // allocatable

    return _weighted(pod, info, one)


def requested_to_capacity_ratio(
    shape: Sequence[tuple[int, int]] = DEFAULT_SHAPE,
) -> Callable[[Pod, NodeInfo], int]:
    """The strategy for a shape of (utilisation %, score 0-10) points, linear in between."""
    points = [(u, s * MAX_NODE_SCORE // 10) for u, s in shape]

    def curve(utilisation: int) -> int:
        if utilisation <= points[0][0]:
            return points[0][1]
        for (u0, s0), (u1, s1) in pairwise(points):
            if utilisation <= u1:
                return s0 + (s1 - s0) * (utilisation - u0) // (u1 - u0)
        return points[-1][1]

    def score(pod: Pod, info: NodeInfo) -> int:
        def one(requested: int, allocatable: int) -> int:
            if allocatable == 0 or requested > allocatable:
                return curve(100)
            return curve(requested * 100 // allocatable)

        return _weighted(pod, info, one)

    return score


STRATEGIES: dict[str, Callable[[Pod, NodeInfo], int]] = {
    "LeastAllocated": least_allocated,
    "MostAllocated": most_allocated,
    "RequestedToCapacityRatio": requested_to_capacity_ratio(),
}


def balanced_allocation(pod: Pod, info: NodeInfo) -> int:
    """``(1 - std) * 100`` of the CPU and memory fractions (each capped at 1)."""
    fractions = [
        min(requested / allocatable, 1.0) if allocatable else 1.0
        for requested, allocatable in _requested_and_allocatable(pod, info)
    ]
    std = abs(fractions[0] - fractions[1]) / 2
    return int((1 - std) * MAX_NODE_SCORE)
