"""The names this module used to define now live in :mod:`schedcache.model.plugins` (one
module per plugin); kept importable for existing callers."""

from schedcache.model.plugins.nodelocal import (
    AFFINITY_MISMATCH,
    FILTERING_EFFECTS,
    NODE_NOT_FOUND,
    PORTS_IN_USE,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    UNSCHEDULABLE_TAINT,
    Taint,
    intolerable_prefer_no_schedule,
    matches_node_affinity,
    node_refuses,
    tolerates,
    tolerates_any,
    untolerated_taint,
)
from schedcache.model.plugins.registry import filter_pod
from schedcache.model.plugins.result import FITS, FilterResult

__all__ = [
    "AFFINITY_MISMATCH",
    "FILTERING_EFFECTS",
    "FITS",
    "NODE_NOT_FOUND",
    "PORTS_IN_USE",
    "TOO_MANY_PODS",
    "UNSCHEDULABLE",
    "UNSCHEDULABLE_TAINT",
    "FilterResult",
    "Taint",
    "filter_pod",
    "intolerable_prefer_no_schedule",
    "matches_node_affinity",
    "node_refuses",
    "tolerates",
    "tolerates_any",
    "untolerated_taint",
]
