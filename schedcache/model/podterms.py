"""A pod's inter-pod rules as kube-scheduler reads them: pod (anti-)affinity terms, topology
spread constraints, preferred node affinity.

They are kept in the pod's record (and so in every snapshot, replay and what-if) because the
InterPodAffinity and PodTopologySpread plugins judge a node by *other* pods' rules as much as by
the incoming pod's. Each value stores itself as plain lists (msgpack friendly) and reads itself
back; reading a manifest raises :class:`ValidationError` naming the field.

As the API server does at admission (and the scheduler for spread), ``matchLabelKeys`` and
``mismatchLabelKeys`` are merged into the term's selector when the manifest is read: ``key In
(the pod's value)`` and ``key NotIn (the pod's value)``; a key the pod lacks adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schedcache.errors import ValidationError

__all__ = [
    "LabelSelector",
    "PodAffinityTerm",
    "SpreadConstraint",
    "WeightedTerm",
]

SelectorRequirement = tuple[str, str, tuple[str, ...]]  # key, In/NotIn/Exists/DoesNotExist, values

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """``metav1.LabelSelector``: matchLabels and matchExpressions, ANDed; empty matches all."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.expressions:
            present = key in labels
            if operator == "In":
                ok = present and labels[key] in values
            elif operator == "NotIn":
                ok = not present or labels[key] not in values
            elif operator == "Exists":
                ok = present
            else:  # DoesNotExist
                ok = not present
            if not ok:
                return False
        return True

    def to_list(self) -> list[Any]:
        return [
            [list(p) for p in self.match_labels],
            [[k, o, list(v)] for k, o, v in self.expressions],
        ]

    @classmethod
    def from_list(cls, stored: Any) -> LabelSelector:
        labels, expressions = stored
        return cls(
            tuple((k, v) for k, v in labels), tuple((k, o, tuple(v)) for k, o, v in expressions)
        )


def _selector_or_none(stored: Any) -> LabelSelector | None:
    return None if stored is None else LabelSelector.from_list(stored)


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """``v1.PodAffinityTerm``. ``selector`` None matches no pod (upstream: a nil selector is
    ``labels.Nothing()``); ``namespace_selector`` None with no ``namespaces`` means the owning
    pod's namespace; an empty ``namespace_selector`` means every namespace."""

    topology_key: str
    selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None

    @property
    def reads_namespace_labels(self) -> bool:
        """Whether the term selects namespaces by their labels (a non-empty
        namespaceSelector): its verdicts depend on the cache's Namespaces."""
        ns = self.namespace_selector
        return ns is not None and bool(ns.match_labels or ns.expressions)

    def matches_pod(
        self,
        owner_namespace: str,
        namespace: str,
        labels: Mapping[str, str],
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> bool:
        """Does a pod (``namespace``, ``labels``) match this term of a pod in
        ``owner_namespace``? As upstream, the term's namespaces are ``namespaces`` and those
        whose labels (``namespace_labels``, the cache's Namespaces) a non-empty
        namespaceSelector selects; a namespace the cache does not hold is selected by none."""
        if self.selector is None:
            return False
        ns_selector = self.namespace_selector
        if ns_selector is not None and not ns_selector.match_labels and not ns_selector.expressions:
            pass  # every namespace
        elif self.namespaces or ns_selector is not None:
            if namespace not in self.namespaces:
                if ns_selector is None or namespace_labels is None:
                    return False
                ns_labels = namespace_labels.get(namespace)
                if ns_labels is None or not ns_selector.matches(ns_labels):
                    return False
        elif namespace != owner_namespace:
            return False
        return self.selector.matches(labels)

    def to_list(self) -> list[Any]:
        return [
            self.topology_key,
            None if self.selector is None else self.selector.to_list(),
            list(self.namespaces),
            None if self.namespace_selector is None else self.namespace_selector.to_list(),
        ]

    @classmethod
    def from_list(cls, stored: Any) -> PodAffinityTerm:
        key, selector, namespaces, ns_selector = stored
        return cls(
            key, _selector_or_none(selector), tuple(namespaces), _selector_or_none(ns_selector)
        )


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    """``v1.WeightedPodAffinityTerm``."""

    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """``v1.TopologySpreadConstraint`` (matchLabelKeys already merged into ``selector``)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"
    selector: LabelSelector | None = None
    min_domains: int = 1
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"

    def to_list(self) -> list[Any]:
        return [
            self.max_skew,
            self.topology_key,
            self.when_unsatisfiable,
            None if self.selector is None else self.selector.to_list(),
            self.min_domains,
            self.node_affinity_policy,
            self.node_taints_policy,
        ]

    @classmethod
    def from_list(cls, stored: Any) -> SpreadConstraint:
        skew, key, when, selector, min_domains, affinity_policy, taints_policy = stored
        return cls(
            int(skew),
            key,
            when,
            _selector_or_none(selector),
            int(min_domains),
            affinity_policy,
            taints_policy,
        )


def terms_to_list(terms: tuple[PodAffinityTerm, ...]) -> list[Any]:
    return [t.to_list() for t in terms]


def terms_from_list(stored: Any) -> tuple[PodAffinityTerm, ...]:
    return tuple(PodAffinityTerm.from_list(t) for t in stored)


def weighted_to_list(terms: tuple[WeightedTerm, ...]) -> list[Any]:
    return [[t.weight, t.term.to_list()] for t in terms]


def weighted_from_list(stored: Any) -> tuple[WeightedTerm, ...]:
    return tuple(WeightedTerm(int(w), PodAffinityTerm.from_list(t)) for w, t in stored)


# -- reading manifests -----------------------------------------------------------------------


class _Fields:
    """Shape checks that name the field (the manifest reader's rules, in small)."""

    def __init__(self, subject: str) -> None:
        self.subject = subject

    def fail(self, path: str, why: str) -> ValidationError:
        return ValidationError(self.subject, path, why)

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected an object, got {type(value).__name__}")
        return value

    def seq(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {type(value).__name__}")
        return value

    def string(self, value: Any, path: str, required: bool = False) -> str:
        if value is None or value == "":
            if required:
                raise self.fail(path, "is required")
            return ""
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {type(value).__name__}")
        return value

    def integer(self, value: Any, path: str, default: int, low: int, high: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(path, f"{value!r} must be an integer in [{low}, {high}]")
        return value

    def choice(self, value: Any, path: str, allowed: tuple[str, ...], default: str) -> str:
        text = self.string(value, path) or default
        if text not in allowed:
            raise self.fail(path, f"{text!r} is not one of {', '.join(allowed)}")
        return text


def _read_selector(f: _Fields, value: Any, path: str) -> LabelSelector | None:
    if value is None:
        return None
    raw = f.mapping(value, path)
    labels = f.mapping(raw.get("matchLabels"), f"{path}.matchLabels")
    pairs = []
    for key, item in labels.items():
        pairs.append(
            (f.string(key, f"{path}.matchLabels"), f.string(item, f"{path}.matchLabels.{key}"))
        )
    expressions: list[SelectorRequirement] = []
    for i, item in enumerate(f.seq(raw.get("matchExpressions"), f"{path}.matchExpressions")):
        where = f"{path}.matchExpressions[{i}]"
        e = f.mapping(item, where)
        key = f.string(e.get("key"), f"{where}.key", required=True)
        operator = f.choice(e.get("operator"), f"{where}.operator", _OPERATORS, "")
        values = tuple(
            f.string(v, f"{where}.values") for v in f.seq(e.get("values"), f"{where}.values")
        )
        if operator in ("In", "NotIn") and not values:
            raise f.fail(f"{where}.values", f"must be non-empty for operator {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise f.fail(f"{where}.values", f"must be empty for operator {operator}")
        expressions.append((key, operator, values))
    return LabelSelector(tuple(sorted(pairs)), tuple(expressions))


def _merge_keys(
    selector: LabelSelector | None,
    labels: Mapping[str, str],
    match_keys: list[str],
    mismatch_keys: list[str],
) -> LabelSelector | None:
    """``key In/NotIn (the pod's value)`` for each key the pod carries (as upstream)."""
    extra: list[SelectorRequirement] = []
    for keys, operator in ((match_keys, "In"), (mismatch_keys, "NotIn")):
        extra += [(k, operator, (labels[k],)) for k in keys if k in labels]
    if not extra:
        return selector
    base = selector or LabelSelector()
    return LabelSelector(base.match_labels, base.expressions + tuple(extra))


def _read_keys(f: _Fields, value: Any, path: str) -> list[str]:
    return [f.string(k, f"{path}[{i}]", required=True) for i, k in enumerate(f.seq(value, path))]


def _read_term(f: _Fields, value: Any, path: str, labels: Mapping[str, str]) -> PodAffinityTerm:
    t = f.mapping(value, path)
    match_keys = _read_keys(f, t.get("matchLabelKeys"), f"{path}.matchLabelKeys")
    mismatch_keys = _read_keys(f, t.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys")
    selector = _read_selector(f, t.get("labelSelector"), f"{path}.labelSelector")
    if selector is not None:
        selector = _merge_keys(selector, labels, match_keys, mismatch_keys)
    namespaces = tuple(
        f.string(n, f"{path}.namespaces[{i}]", required=True)
        for i, n in enumerate(f.seq(t.get("namespaces"), f"{path}.namespaces"))
    )
    return PodAffinityTerm(
        topology_key=f.string(t.get("topologyKey"), f"{path}.topologyKey"),
        selector=selector,
        namespaces=namespaces,
        namespace_selector=_read_selector(
            f, t.get("namespaceSelector"), f"{path}.namespaceSelector"
        ),
    )


@dataclass(frozen=True, slots=True)
class InterPodRules:
    """What :func:`read_inter_pod_rules` returns, one field per Pod field."""

    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_affinity: tuple[WeightedTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedTerm, ...] = ()
    spread_constraints: tuple[SpreadConstraint, ...] = ()


def read_inter_pod_rules(
    subject: str, spec: Mapping[str, Any], labels: Mapping[str, str]
) -> InterPodRules:
    """The pod's inter-pod rules from its ``spec`` (``labels``: its own, for the merged keys)."""
    f = _Fields(subject)
    affinity = f.mapping(spec.get("affinity"), "spec.affinity")
    out: dict[str, Any] = {}
    for kind, name in (("podAffinity", "pod_affinity"), ("podAntiAffinity", "pod_anti_affinity")):
        base = f"spec.affinity.{kind}"
        section = f.mapping(affinity.get(kind), base)
        required = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
        out[name] = tuple(
            _read_term(f, t, f"{required}[{i}]", labels)
            for i, t in enumerate(
                f.seq(section.get("requiredDuringSchedulingIgnoredDuringExecution"), required)
            )
        )
        preferred = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
        weighted = []
        for i, item in enumerate(
            f.seq(section.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred)
        ):
            w = f.mapping(item, f"{preferred}[{i}]")
            weight = f.integer(w.get("weight"), f"{preferred}[{i}].weight", 0, 1, 100)
            if weight == 0:
                raise f.fail(f"{preferred}[{i}].weight", "is required (1-100)")
            weighted.append(
                WeightedTerm(
                    weight,
                    _read_term(
                        f, w.get("podAffinityTerm"), f"{preferred}[{i}].podAffinityTerm", labels
                    ),
                )
            )
        out["preferred_" + name] = tuple(weighted)
    out["spread_constraints"] = _read_spread(f, spec.get("topologySpreadConstraints"), labels)
    return InterPodRules(**out)


def _read_spread(f: _Fields, value: Any, labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out = []
    for i, item in enumerate(f.seq(value, "spec.topologySpreadConstraints")):
        path = f"spec.topologySpreadConstraints[{i}]"
        c = f.mapping(item, path)
        selector = _read_selector(f, c.get("labelSelector"), f"{path}.labelSelector")
        keys = _read_keys(f, c.get("matchLabelKeys"), f"{path}.matchLabelKeys")
        if selector is not None:
            selector = _merge_keys(selector, labels, keys, [])
        when = f.choice(
            c.get("whenUnsatisfiable"),
            f"{path}.whenUnsatisfiable",
            ("DoNotSchedule", "ScheduleAnyway"),
            "",
        )
        min_domains = f.integer(c.get("minDomains"), f"{path}.minDomains", 1, 1, 2**31 - 1)
        if c.get("minDomains") is not None and when != "DoNotSchedule":
            raise f.fail(
                f"{path}.minDomains", "may only be set with whenUnsatisfiable DoNotSchedule"
            )
        out.append(
            SpreadConstraint(
                max_skew=f.integer(c.get("maxSkew"), f"{path}.maxSkew", 0, 1, 2**31 - 1)
                or _required(f, f"{path}.maxSkew"),
                topology_key=f.string(c.get("topologyKey"), f"{path}.topologyKey", required=True),
                when_unsatisfiable=when,
                selector=selector,
                min_domains=min_domains,
                node_affinity_policy=f.choice(
                    c.get("nodeAffinityPolicy"),
                    f"{path}.nodeAffinityPolicy",
                    ("Honor", "Ignore"),
                    "Honor",
                ),
                node_taints_policy=f.choice(
                    c.get("nodeTaintsPolicy"),
                    f"{path}.nodeTaintsPolicy",
                    ("Honor", "Ignore"),
                    "Ignore",
                ),
            )
        )
    return tuple(out)


def _required(f: _Fields, path: str) -> int:
    raise f.fail(path, "is required (at least 1)")
