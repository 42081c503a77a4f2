"""Every Lua call bounded by its input, every argument checked before the first write (issue
39 items 1 and 7, issue 44 item 3). Each attack of the issues is answered with the work it
does bounded (counted by Redis' ``INFO commandstats`` where the backend keeps them: a real
Redis and a Cluster's primary; fakeredis keeps none, and there the answer itself is checked),
or with a limit refused by name and every key of the cache unchanged."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.errors import FitConflict
from tests.factories import keyspace, make_node, make_pod, port


def command_calls(cache: Cache, *names: str) -> int | None:
    """How many times the server holding the cache ran the commands ``names`` (scripts'
    calls included), or None where the backend keeps no count (fakeredis)."""
    try:
        stats: dict[str, Any] = cache.store.server().info("commandstats")
    except redis.ResponseError:
        return None
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


def fcall(cache: Cache, function: str, *args: Any) -> Any:
    return cache.client.fcall(function, 1, cache.keys.prefix, "r", "", *args)


def assert_refused(cache: Cache, function: str, args: list[Any], code: str) -> None:
    """The raw call is refused with ``code`` (naming the argument); no key changed."""
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=code):
        fcall(cache, function, *args)
    assert keyspace(cache.client, cache.keys.pattern) == before


# -- host ports (issue 39, item 1) --------------------------------------------------------------

PORTS = 4_000


def test_a_claim_of_thousands_of_wildcard_ports_reads_the_node_once(cache: Cache) -> None:
    """4,000 TCP ports held, a claim of 4,000 wildcard UDP ports: the node's port fields are
    read once per claim, not once per port (quadratic: 11.7 s of a blocked Redis)."""
    cache.add_node(make_node("n1", "4", "1Gi"))
    held = [port(10_000 + i, "10.0.0.1") for i in range(PORTS)]
    cache.add_pod(make_pod("tcp", "n1", "1m", "1Mi", ports=held))
    wanted = [port(10_000 + i, protocol="UDP") for i in range(PORTS)]
    before = command_calls(cache, "hkeys", "hexists")
    cache.assume_pod(make_pod("udp", "n1", "1m", "1Mi", ports=wanted), check_fit=True)
    after = command_calls(cache, "hkeys", "hexists")
    if before is not None and after is not None:
        assert after - before == 1
    # ...and the same index finds a conflict among thousands, on any IP.
    clash = wanted[:10] + [port(10_000 + PORTS - 1)]
    with pytest.raises(FitConflict) as info:
        cache.assume_pod(make_pod("clash", "n1", "1m", "1Mi", ports=clash), check_fit=True)
    expected = [f"port:UDP/{10_000 + i}" for i in range(10)] + [f"port:TCP/{10_000 + PORTS - 1}"]
    assert list(info.value.reasons) == expected
