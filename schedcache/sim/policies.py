"""Placement policies for a what-if: a callable of a snapshot and a pod returning a node name
or None (unschedulable).

The two built-ins are kube-scheduler's ``NodeResourcesFit`` scoring strategies with their
default weights (CPU 1, memory 1), on the non-zero requests as upstream scores them:
``least-allocated`` (spread: the most free share) and ``most-allocated`` (bin-packing: the
least). Each picks the best-scoring node among those where every filter passes; ties go to the
first in node-tree order (kube-scheduler picks among ties at random) and every feasible node is
scored (kube-scheduler may score only a share of a large cluster). Other score plugins
(balanced allocation, image locality, preferred affinity, spread) are not modelled: a policy of
your own can.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedcache.errors import PolicyError
from schedcache.model.plugins.nodelocal import node_refuses
from schedcache.model.plugins.registry import cycle_for, filter_pod
from schedcache.model.values import Pod
from schedcache.sim.scratch import ResourceIndex, ScratchSnapshot
from schedcache.views.snapshot import Snapshot

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ints = npt.NDArray[np.int64]
    Scorer = Callable[[ResourceIndex, Pod], Ints]

Policy = Callable[[Snapshot, Pod], "str | None"]
MAX_NODE_SCORE = 100
INFEASIBLE = -1


def least_allocated(snapshot: Snapshot, pod: Pod) -> str | None:
    """The feasible node with the largest free share of CPU and memory after the pod."""
    return best_node(snapshot, pod, _least_allocated_scores)


def most_allocated(snapshot: Snapshot, pod: Pod) -> str | None:
    """The feasible node with the largest used share after the pod (bin-packing)."""
    return best_node(snapshot, pod, _most_allocated_scores)


BUILT_IN: dict[str, Policy] = {
    "least-allocated": least_allocated,
    "most-allocated": most_allocated,
}


def best_node(snapshot: Snapshot, pod: Pod, scorer: Scorer) -> str | None:
    """The first node in node-tree order with the highest score among those where every
    filter passes: the resource filters and the node-only ones on whole arrays, then the full
    filter (ports, extended resources) on the best candidates until one passes."""
    import numpy as np

    index = _index_of(snapshot)
    scores = np.where(_feasible(index, snapshot, pod), scorer(index, pod), INFEASIBLE)
    cycle = cycle_for(pod, snapshot.node_infos, snapshot.have_pods_with_required_anti_affinity_list)
    while True:
        best = int(np.argmax(scores)) if len(scores) else 0
        if not len(scores) or scores[best] == INFEASIBLE:
            return None
        name = index.names[best]
        if filter_pod(pod, snapshot.node_infos[name], cycle).fits:
            return name
        scores[best] = INFEASIBLE


def _index_of(snapshot: Snapshot) -> ResourceIndex:
    if isinstance(snapshot, ScratchSnapshot) and snapshot.index is not None:
        return snapshot.index
    return ResourceIndex(snapshot.node_info_list)  # a plain snapshot: built for this call


def _feasible(index: ResourceIndex, snapshot: Snapshot, pod: Pod) -> npt.NDArray[np.bool_]:
    want = pod.requests
    fits = (
        (index.cpu + want.milli_cpu <= index.alloc_cpu)
        & (index.mem + want.memory <= index.alloc_mem)
        & (index.eph + want.ephemeral_storage <= index.alloc_eph)
        & (index.pods + 1 <= index.alloc_pods)
    )
    return fits & _admitting(index, snapshot, pod)


def _admitting(index: ResourceIndex, snapshot: Snapshot, pod: Pod) -> npt.NDArray[np.bool_]:
    """The nodes whose node-only filters (unschedulable, taints, affinity) let the pod
    through: computed once per kind of pod, as they do not change while pods are placed."""
    import numpy as np

    kind = (pod.tolerations, tuple(sorted(pod.node_selector.items())), pod.required_node_affinity)
    mask = index.admitting.get(kind)
    if mask is None:
        infos = snapshot.node_infos
        mask = np.array(
            [
                (node := infos[name].node) is not None and node_refuses(pod, node) is None
                for name in index.names
            ],
            dtype=bool,
        )
        index.admitting[kind] = mask
    return mask


def _shares(index: ResourceIndex, pod: Pod) -> tuple[Ints, Ints, Ints, Ints]:
    """CPU and memory requested (the node's non-zero requests plus the pod's) and allocatable."""
    non_zero = pod.non_zero_requests
    return (
        index.nz_cpu + non_zero.milli_cpu,
        index.alloc_cpu,
        index.nz_mem + non_zero.memory,
        index.alloc_mem,
    )


def _least_allocated_scores(index: ResourceIndex, pod: Pod) -> Ints:
    """``leastRequestedScore``: (capacity - requested) * 100 / capacity, 0 when requested
    exceeds capacity or capacity is 0; the mean over CPU and memory (integer division)."""
    import numpy as np

    def score(requested: Ints, capacity: Ints) -> Ints:
        safe = np.maximum(capacity, 1)
        value = (capacity - requested) * MAX_NODE_SCORE // safe
        return np.where((capacity == 0) | (requested > capacity), 0, value)

    cpu, cpu_cap, mem, mem_cap = _shares(index, pod)
    return (score(cpu, cpu_cap) + score(mem, mem_cap)) // 2


def _most_allocated_scores(index: ResourceIndex, pod: Pod) -> Ints:
    """``mostRequestedScore``: requested * 100 / capacity, requested capped at capacity, 0
    when capacity is 0; the mean over CPU and memory (integer division)."""
    import numpy as np

    def score(requested: Ints, capacity: Ints) -> Ints:
        safe = np.maximum(capacity, 1)
        value = np.minimum(requested, capacity) * MAX_NODE_SCORE // safe
        return np.where(capacity == 0, 0, value)

    cpu, cpu_cap, mem, mem_cap = _shares(index, pod)
    return (score(cpu, cpu_cap) + score(mem, mem_cap)) // 2


def load_policy(spec: str) -> Policy:
    """A built-in by name (``least-allocated``, ``most-allocated``), or ``module:function`` /
    ``path/to/file.py:function`` (a module is looked up from the working directory too)."""
    if spec in BUILT_IN:
        return BUILT_IN[spec]
    module_name, colon, attribute = spec.rpartition(":")
    if not colon or not module_name or not attribute:
        known = ", ".join(BUILT_IN)
        raise PolicyError(f"policy {spec!r}: not a built-in ({known}) nor module:function")
    module = _import(spec, module_name)
    policy = getattr(module, attribute, None)
    if policy is None:
        raise PolicyError(f"policy {spec!r}: module {module_name} has no {attribute!r}")
    if not callable(policy):
        raise PolicyError(f"policy {spec!r}: {attribute!r} is not callable")
    return policy  # type: ignore[no-any-return]


def _import(spec: str, module_name: str) -> Any:
    if Path(module_name).is_dir():
        raise PolicyError(
            f"policy {spec!r}: {module_name} is a directory; name a module or a .py file"
        )
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            loader = importlib.util.spec_from_file_location(path.stem, path)
            if loader is None or loader.loader is None or not path.is_file():
                raise PolicyError(f"policy {spec!r}: no Python file {module_name}")
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
            return module
        if "" not in sys.path:
            sys.path.insert(0, "")  # as `python -m`: modules of the working directory
        return importlib.import_module(module_name)
    except PolicyError:
        raise
    except Exception as error:  # the user's module failed to import: say where
        raise PolicyError(
            f"policy {spec!r}: importing {module_name} failed: {type(error).__name__}: {error}"
        ) from error


def checked(name: str, policy: Callable[..., Any]) -> Policy:
    """``policy`` whose failures and wrong answers become :class:`PolicyError` naming the
    policy and the pod."""

    def call(snapshot: Snapshot, pod: Pod) -> str | None:
        try:
            answer = policy(snapshot, pod)
        except (Exception, SystemExit) as error:  # sys.exit() in a policy is a failure too
            raise PolicyError(
                f"policy {name!r} failed on pod {pod.full_name}: {type(error).__name__}: {error}"
            ) from error
        if answer is not None and not isinstance(answer, str):
            raise PolicyError(
                f"policy {name!r} answered {answer!r} for pod {pod.full_name}: "
                "a node name or None was expected"
            )
        return answer

    return call
