"""A filter's verdict: empty ``reasons`` pass; ``unresolvable`` when preemption cannot help
(upstream's ``UnschedulableAndUnresolvable``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

NO_NODES = "no nodes available to schedule pods"  # upstream's ErrNoNodesAvailable


@dataclass(frozen=True)
class FilterResult:
    """Empty ``reasons``: the pod fits. ``unresolvable``: preemption would not help."""

    reasons: tuple[str, ...] = ()
    unresolvable: bool = False

    @property
    def fits(self) -> bool:
        return not self.reasons


FITS = FilterResult()


def fit_error(nodes: int, reasons: Iterable[str], available: int = 0) -> str:
    """Upstream's ``FitError.Error()``: ``0/<nodes> nodes are available: <count> <reason>, ...``
    with the ``"<count> <reason>"`` strings sorted as Go's ``sort.Strings`` does (byte order),
    and a final period. (No PostFilter message: nothing here preempts.) ``available``: nodes
    that passed every filter (what-if's policies may still decline them; upstream: 0)."""
    if not nodes:
        return NO_NODES
    histogram = sorted(f"{count} {reason}" for reason, count in Counter(reasons).items())
    message = f"{available}/{nodes} nodes are available"
    if histogram:
        return f"{message}: {', '.join(histogram)}."
    return message if available else f"{message}:"
