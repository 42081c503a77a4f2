"""Quantities and ages as kubectl prints them, so a person reads ``250m`` and ``256Mi`` here
exactly where ``kubectl get``/``describe`` would show them (never raw bytes or millicores).

* CPU: whole cores as an integer (``4``), otherwise millicores (``250m``).
* Bytes: the largest binary suffix that divides the amount exactly (``8Gi``, ``61255520Ki``),
  as ``resource.Quantity`` canonicalises a BinarySI amount; plain bytes otherwise.
* Ages: ``k8s.io/apimachinery/pkg/util/duration.HumanDuration``, case for case.
"""

from __future__ import annotations

from schedcache.model.values import Resource

_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def cpu_text(milli_cpu: int) -> str:
    """``4`` for 4000 millicores, ``250m`` for 250 (``0`` for none)."""
    if milli_cpu % 1000 == 0:
        return str(milli_cpu // 1000)
    return f"{milli_cpu}m"


def bytes_text(amount: int) -> str:
    """``8Gi``, ``256Mi``, ``1500`` (bytes that no binary suffix divides)."""
    if amount:
        for suffix, shift in _BINARY:
            if amount % (1 << shift) == 0:
                return f"{amount >> shift}{suffix}"
    return str(amount)


def resource_list(resource: Resource, *, pods: bool = True) -> dict[str, str]:
    """``resource`` as a v1 ResourceList (``cpu``, ``memory``, ``ephemeral-storage``,
    ``pods``, extended resources) in kubectl's units; zero amounts are left out, except cpu
    and memory."""
    listed = {"cpu": cpu_text(resource.milli_cpu), "memory": bytes_text(resource.memory)}
    if resource.ephemeral_storage:
        listed["ephemeral-storage"] = bytes_text(resource.ephemeral_storage)
    if pods and resource.allowed_pod_number:
        listed["pods"] = str(resource.allowed_pod_number)
    for name, amount in sorted(resource.scalar_resources.items()):
        listed[name] = bytes_text(amount) if name.startswith("hugepages-") else str(amount)
    return listed


def percent(part: int, whole: int) -> str:
    """kubectl describe's ``(12%)``: truncated, ``0`` of nothing allocatable."""
    return f"{int(part / whole * 100) if whole else 0}%"


def human_duration(seconds: float) -> str:
    """An age as kubectl prints it: ``45s``, ``3m20s``, ``17m``, ``5h3m``, ``3d4h``, ``2y3d``."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return _pair(minutes, "m", whole % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return _pair(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return _pair(hours // 24, "d", hours % 24, "h")
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        return _pair(hours // (24 * 365), "y", (hours // 24) % 365, "d")
    return f"{hours // (24 * 365)}y"


def _pair(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big}{big_unit}" if small == 0 else f"{big}{big_unit}{small}{small_unit}"


def age(first_ms: int | None, now_ms: int) -> str:
    """AGE of something first seen at ``first_ms`` (``<unknown>`` when never seen)."""
    return "<unknown>" if first_ms is None else human_duration((now_ms - first_ms) / 1000)
