"""Kubernetes ``resource.Quantity`` parsing, exact, with upstream rounding.

Manifests carry quantities as strings (``"100m"``, ``"1Gi"``, ``"1e3"``) or JSON numbers. The
scheduler only ever sees them through ``MilliValue()`` (CPU) and ``Value()`` (bytes, counts), both
of which round *up* (away from zero), so a pod asking for ``"0.1m"`` CPU still gets 1 millicore.
Values are kept as :class:`~fractions.Fraction` so sums of requests are exact before rounding,
as they are in Go (quantities are added, then converted).
"""

from __future__ import annotations

import functools
import json
import math
import re
from fractions import Fraction
from typing import Any

from schedcache.errors import ValidationError

__all__ = [
    "MAX_QUANTITY",
    "int_value",
    "milli_value",
    "parse_quantity",
    "past_int64",
    "round_away",
]

#: ParseQuantity caps magnitudes at the largest int64 (whole units), like upstream.
MAX_QUANTITY = Fraction(2**63 - 1)
_NANO = Fraction(1, 10**9)

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# sign, integer digits, fraction digits, suffix. "E" alone is exa; "E3"/"e3" is an exponent.
_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?"
)


def _show(value: Any) -> str:
    """Quote an offending value JSON-style for error messages (``"lots"``, ``true``, ``null``)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def parse_quantity(value: Any, *, obj: str, field: str) -> Fraction:
    """Parse a quantity (str, int or finite float) into an exact Fraction.

    Like Go's ``ParseQuantity``, non-zero values are rounded up to nano precision and magnitudes
    are capped at 2**63-1. Negative values parse; rejecting them is the caller's job.
    """

    def bad() -> ValidationError:
        return ValidationError(obj, field, f"{_show(value)} is not a quantity")

    if isinstance(value, bool):  # bool is an int subclass, never a quantity
        raise bad()
    if isinstance(value, int):
        return _normalize(Fraction(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise bad()
        text = repr(value)  # shortest round-trip text, i.e. what the JSON document said
    elif isinstance(value, str):
        text = value
    else:
        raise bad()

    amount = _parse_short(text) if len(text) <= 32 else _parse_text(text)
    if amount is None:
        raise bad()
    return amount


def _parse_text(text: str) -> Fraction | None:
    """The quantity a text denotes, or None."""
    amount = _exact_text(text)
    return None if amount is None else _normalize(amount)


def _exact_text(text: str) -> Fraction | None:
    """The quantity a text denotes exactly (not rounded, not capped), or None."""
    m = _QUANTITY_RE.fullmatch(text)
    if m is None or not (m["int"] or m["frac"]):
        return None
    mantissa = Fraction(int((m["int"] or "0") + (m["frac"] or "")), 10 ** len(m["frac"] or ""))
    suffix = m["suffix"] or ""
    amount: Fraction
    if suffix in _BINARY:
        amount = mantissa * 2 ** _BINARY[suffix]
    else:
        if suffix in _DECIMAL:
            exponent = _DECIMAL[suffix]
        else:  # exponent form; clamp absurd exponents, the result saturates anyway
            limit = 40 + len(text)
            exponent = max(-limit, min(limit, int(suffix[1:])))
        amount = mantissa * Fraction(10) ** exponent
    if m["sign"] == "-":
        amount = -amount
    return amount


def past_int64(value: Any) -> bool:
    """Whether a quantity stands for more than 2**63-1 (in magnitude): parse_quantity reads it
    as that cap, which then passes for an amount the manifest never gave."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    if isinstance(value, int):
        return abs(value) > MAX_QUANTITY
    if isinstance(value, float):
        return math.isfinite(value) and abs(Fraction(repr(value))) > MAX_QUANTITY
    amount = _exact_text(value)
    return amount is not None and abs(amount) > MAX_QUANTITY


# A cluster's manifests repeat a few short quantities ("100m", "128Mi") hundreds of thousands
# of times: remembered (Fractions are immutable); long texts are not, to bound the memory.
_parse_short = functools.lru_cache(maxsize=4096)(_parse_text)


def _normalize(amount: Fraction) -> Fraction:
    """Round up (away from zero) to nano precision and cap at int64, as ParseQuantity does."""
    magnitude = abs(amount)
    if magnitude.denominator != 1:
        magnitude = Fraction(math.ceil(magnitude / _NANO)) * _NANO
    magnitude = min(magnitude, MAX_QUANTITY)
    return -magnitude if amount < 0 else magnitude


def round_away(amount: Fraction) -> int:
    """Round to an integer away from zero (Go's ``inf.RoundUp`` used by ``ScaledValue``)."""
    return math.ceil(amount) if amount >= 0 else math.floor(amount)


def milli_value(value: Any, *, obj: str, field: str) -> int:
    """``Quantity.MilliValue()``: the value in thousandths, rounded up (CPU millicores)."""
    return round_away(parse_quantity(value, obj=obj, field=field) * 1000)


def int_value(value: Any, *, obj: str, field: str) -> int:
    """``Quantity.Value()``: the value in whole units, rounded up (bytes, counts)."""
    return round_away(parse_quantity(value, obj=obj, field=field))
