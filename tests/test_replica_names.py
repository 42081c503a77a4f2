"""Replica names the Lua side could confuse with its own markers are refused by ``Cache``.

``-`` is the pod record's "no claimer" marker: a replica of that name would lose its lease
protection (its claims would read as nobody's). Whitespace splits the record's header and the
event fields; control characters and lone surrogates cannot be shown or encoded.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from schedcache import Cache
from schedcache.errors import ValidationError
from tests.factories import keyspace, make_node, make_pod

BAD = {
    "the no-claimer marker": ("-", r"'-' is reserved \(the pod record's no-claimer marker\)"),
    "blank": (" ", "must be printable, without whitespace"),
    "tab": ("\t", "must be printable, without whitespace"),
    "leading space": (" sched-0", "must be printable, without whitespace"),
    "trailing newline": ("sched-0\n", "must be printable, without whitespace"),
    "inner space": ("sched 0", "must be printable, without whitespace"),
    "no-break space": ("sched\u00a00", "must be printable, without whitespace"),
    "NUL": ("sched\x000", "must be printable, without whitespace"),
    "lone surrogate": ("sched-\ud800", "must be printable, without whitespace"),
    "too long": ("r" * 254, "254 characters, over 253"),
    "not a string": (7, "7 is not a string"),
    "None": (None, "None is not a string"),
}


@pytest.mark.parametrize("name", BAD, ids=list(BAD))
def test_ambiguous_replica_names_are_refused_naming_the_field(
    client: redis.Redis, cache_name: str, make_cache: Callable[..., Cache], name: str
):
    existing = make_cache(replica="sched-0")
    existing.add_node(make_node("n1", "4", "1Gi"))
    existing.assume_pod(make_pod("p", "n1", "100m", "1Mi"))
    before = keyspace(client, existing.keys.pattern)
    replica, reason = BAD[name]
    with pytest.raises(
        ValidationError, match=rf"^cache {cache_name}: replica: .*{reason}"
    ) as error:
        Cache(client, cache_name, replica=replica)  # type: ignore[arg-type]
    assert error.value.field == "replica"
    assert str(error.value)  # printable
    assert keyspace(client, existing.keys.pattern) == before


@pytest.mark.parametrize("replica", ["", "sched-0", "--", "a-", "replica.zone_b:7", "r" * 253])
def test_ordinary_replica_names_keep_their_claims(make_cache: Callable[..., Cache], replica):
    """A named replica's unfinished claim is its own (forgotten only when its lease lapses)."""
    cache = make_cache(replica=replica)
    cache.add_node(make_node("n1", "4", "1Gi"))
    cache.assume_pod(make_pod("p", "n1", "100m", "1Mi"))
    assert cache.get_pod_record("p").claimer == replica
    assert cache.replica == replica
