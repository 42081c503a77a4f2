"""kubectl-style label selectors (``app=web,tier!=db,env in (prod,staging),!canary``).

Used to filter pods and nodes by labels. Semantics follow ``k8s.io/apimachinery`` ``labels``:
``!=`` and ``notin`` also match objects that do not carry the key at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from schedcache.errors import ValidationError

__all__ = [
    "Requirement",
    "Selector",
    "is_dns_subdomain",
    "label_key_error",
    "label_value_error",
    "parse_selector",
]

_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

_TOKEN = r"[^\s,()=!]+"
_EXISTS_RE = re.compile(rf"(?P<key>{_TOKEN})")
_NOT_EXISTS_RE = re.compile(rf"!\s*(?P<key>{_TOKEN})")
_EQUALITY_RE = re.compile(rf"(?P<key>{_TOKEN})\s*(?P<op>==|=|!=)\s*(?P<value>{_TOKEN})?")
_SET_RE = re.compile(rf"(?P<key>{_TOKEN})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")

EXISTS, NOT_EXISTS, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, IN, NOT_IN = (
    "exists",
    "!",
    "=",
    "==",
    "!=",
    "in",
    "notin",
)


def is_dns_subdomain(value: str) -> bool:
    """Whether ``value`` is a lowercase RFC 1123 DNS subdomain of at most 253 characters: what
    the API server requires of a label key's prefix, a node's name and ``spec.schedulerName``."""
    return len(value) <= 253 and _DNS_SUBDOMAIN_RE.fullmatch(value) is not None


def label_key_error(key: str) -> str | None:
    """Why ``key`` is not a qualified name (``[prefix/]name``), or None if it is valid."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        if not is_dns_subdomain(prefix):
            return f"prefix {prefix!r} must be a lowercase DNS subdomain of at most 253 characters"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_RE.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def label_value_error(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None (the empty value is valid)."""
    if len(value) > 63:
        return "value must be no more than 63 characters"
    if value and not _NAME_RE.fullmatch(value):
        return (
            f"value {value!r} must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key <op> values`` term; all terms of a selector must match (logical AND)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Apply the term to one object's labels."""
        present = self.key in labels
        if self.operator == EXISTS:
            return present
        if self.operator == NOT_EXISTS:
            return not present
        hit = present and labels[self.key] in self.values
        return not hit if self.operator in (NOT_EQUALS, NOT_IN) else hit

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == NOT_EXISTS:
            return f"!{self.key}"
        if self.operator in (IN, NOT_IN):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        return f"{self.key}{self.operator}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed selector; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when every requirement matches ``labels``."""
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True for the select-everything selector."""
        return not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _split(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _checked(req: Requirement, term: str) -> Requirement:
    """Validate the key and values of a requirement built from ``term``."""
    if reason := label_key_error(req.key):
        raise ValidationError("selector", term, f"invalid label key {req.key!r}: {reason}")
    for value in req.values:
        if reason := label_value_error(value):
            raise ValidationError("selector", term, f"invalid label value: {reason}")
    return req


def _requirement(raw: str, whole: str) -> Requirement:
    term = raw.strip()
    if not term:
        raise ValidationError("selector", whole, "empty requirement")
    if m := _SET_RE.fullmatch(term):
        if not m["values"].strip():
            raise ValidationError("selector", term, f"values for '{m['op']}' must not be empty")
        values = tuple(sorted({v.strip() for v in m["values"].split(",")}))
        return _checked(Requirement(m["key"], m["op"], values), term)
    if m := _EQUALITY_RE.fullmatch(term):
        return _checked(Requirement(m["key"], m["op"], (m["value"] or "",)), term)
    if m := _NOT_EXISTS_RE.fullmatch(term):
        return _checked(Requirement(m["key"], NOT_EXISTS), term)
    if m := _EXISTS_RE.fullmatch(term):
        return _checked(Requirement(m["key"], EXISTS), term)
    raise ValidationError(
        "selector", term, "expected k=v, k==v, k!=v, k in (a,b), k notin (a,b), k or !k"
    )


def parse_selector(text: str | Mapping[str, str] | None) -> Selector:
    """Parse a kubectl label selector; a Mapping means equality on every key; None/"" = all."""
    if text is None:
        return Selector()
    if isinstance(text, Mapping):
        reqs = []
        for key, value in text.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValidationError("selector", str(key), "keys and values must be strings")
            reqs.append(_checked(Requirement(key, EQUALS, (value,)), f"{key}={value}"))
        return Selector(tuple(sorted(reqs, key=lambda r: r.key)))
    if not isinstance(text, str):
        raise ValidationError("selector", "", "must be a string or a mapping")
    if not text.strip():
        return Selector()
    reqs = [_requirement(part, text) for part in _split(text)]
    return Selector(tuple(sorted(reqs, key=lambda r: r.key)))
