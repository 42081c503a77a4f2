"""A filter's verdict: empty ``reasons`` pass; ``unresolvable`` when preemption cannot help
(upstream's ``UnschedulableAndUnresolvable``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FilterResult:
    """Empty ``reasons``: the pod fits. ``unresolvable``: preemption would not help."""

    reasons: tuple[str, ...] = ()
    unresolvable: bool = False

    @property
    def fits(self) -> bool:
        return not self.reasons


FITS = FilterResult()
