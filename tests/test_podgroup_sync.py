"""PodGroups fed by ``sync`` and kept in the cache (scheduler-plugins' Coscheduling CRD,
docs/gangs.md): listed and watched like nodes and pods, applied by ``sc_sync_podgroup`` with
the feeders' resourceVersion checks, read by the scheduler in one HMGET. A cluster without the
CRD (404 on the list) is synced without them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.feed.sync import Syncer, api_client
from schedcache.store.library import function_name
from schedcache.store.podgroups import PodGroup, read_pod_group
from tests.apiserver import FakeApiServer
from tests.factories import keyspace
from tests.scheduling import FAST, eventually, node
from tests.test_gang_scheduling import pod_group


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def held(cache: Cache, name: str) -> PodGroup | None:
    return read_pod_group(cache.client, cache.keys, name)


def test_sync_feeds_pod_groups_into_the_cache(
    make_cache: Callable[..., Cache], server: FakeApiServer, tmp_path: Path
) -> None:
    """Listed, then watched: added, modified, deleted; a relist removes what is gone. Before,
    the cache held no PodGroup (the scheduler read each from the API server)."""
    server.create(pod_group("listed", 3, timeout=30))
    server.create(pod_group("stale", 2))
    cache = make_cache(replica="feeder")
    syncer = Syncer(cache, api_client(str(server.kubeconfig(tmp_path / "kc"))), FAST, "f")
    syncer.list_once()
    assert held(cache, "default/listed") == PodGroup("default/listed", 3, 30.0)
    server.delete("PodGroup", "stale")
    syncer.list_once()  # the relist speaks for every PodGroup: "stale" goes
    assert held(cache, "default/stale") is None
    with syncer.start():
        assert syncer.wait_synced(10)
        server.create(pod_group("watched", 8))
        eventually(lambda: held(cache, "default/watched") == PodGroup("default/watched", 8))
        server.update(pod_group("watched", 4, timeout=5))
        eventually(lambda: held(cache, "default/watched") == PodGroup("default/watched", 4, 5.0))
        server.delete("PodGroup", "watched")
        eventually(lambda: held(cache, "default/watched") is None)
    assert sorted(cache.client.smembers(cache.keys.pod_groups)) == [b"default/listed"]


def test_a_cluster_without_the_pod_group_crd_syncs_without_it(
    make_cache: Callable[..., Cache],
    server: FakeApiServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """404 on the PodGroup list: nodes and pods are synced anyway, the absence logged once."""
    server.podgroups_installed = False
    server.create(node("n1", "4"))
    caplog.set_level("WARNING", logger="schedcache.feed.sync")
    cache = make_cache(replica="feeder")
    syncer = Syncer(cache, api_client(str(server.kubeconfig(tmp_path / "kc"))), FAST, "f")
    with syncer.start():
        assert syncer.wait_synced(10)
        eventually(lambda: cache.node_count() == 1)
        server.create(node("n2", "4"))
        eventually(lambda: cache.node_count() == 2)
    missing = [r.getMessage() for r in caplog.records if "CRD is not installed" in r.getMessage()]
    assert len(missing) == 1, missing
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert syncer.feeds[2].counters.api_errors == 0


def fcall(cache: Cache, *args: Any) -> Any:
    return cache.client.fcall(function_name("sync_podgroup"), 1, cache.keys.prefix, "f", "", *args)


def test_sync_podgroup_drops_stale_versions(cache: Cache) -> None:
    assert [x.decode() for x in fcall(cache, "5", "set", "ns/g", "3", "")] == ["applied", "set", ""]
    assert fcall(cache, "4", "set", "ns/g", "9", "")[:2] == [b"dropped", b"stale"]
    assert fcall(cache, "6", "delete", "ns/g")[:2] == [b"applied", b"remove"]
    assert fcall(cache, "5", "set", "ns/g", "3", "")[:2] == [b"dropped", b"stale"]  # tombstone
    assert held(cache, "ns/g") is None


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["x", "set", "ns/g", "3", ""], "BADARG rv"),
        (["1", "put", "ns/g", "3", ""], "BADARG op"),
        (["1", "set", "ns/g", "3"], "BADARG argc"),
        (["1", "delete", "ns/g", "3"], "BADARG argc"),
        (["1", "set", "nog", "3", ""], "BADARG group"),
        (["1", "set", "ns/g", "0", ""], "BADARG min"),
        (["1", "set", "ns/g", "2147483648", ""], "BADARG min"),
        (["1", "set", "ns/g", "3", "-1"], "BADARG timeout"),
    ],
)
def test_malformed_sync_podgroup_writes_nothing(cache: Cache, args: list[str], error: str) -> None:
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(redis.ResponseError, match=error):
        fcall(cache, *args)
    assert keyspace(cache.client, cache.keys.pattern) == before
