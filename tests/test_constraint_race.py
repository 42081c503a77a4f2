"""A randomized race: four replicas place pods with every kind of required inter-pod rule
while nodes are relabelled, tainted, untainted, added and filled in from placeholders, and
matching pods come and go; no claim breaks a rule of the cache as it was at that instant
(tests/rule_race.py; the ≥ 5,000-placement run is bench/rule_race.py)."""

from __future__ import annotations

from collections.abc import Callable

from schedcache import Cache
from tests.rule_race import claim_violations, race


def test_four_replicas_under_node_and_pod_churn_break_no_rule_at_any_claim(
    cache: Cache, make_cache: Callable[..., Cache]
) -> None:
    outcome = race(make_cache, replicas=4, nodes=12, pods=240, seed=38, churn_per_second=300)
    assert outcome.placed >= 120, outcome
    assert sum(outcome.churn.values()) > 0, outcome
    assert claim_violations(cache) == []
    assert cache.verify() == []
