"""Checkpoints and compaction: replay = checkpoint + tail stays exact."""

from __future__ import annotations

import pytest

from schedcache import Cache
from schedcache.history.checkpoints import CHUNK, HistoryCompacted
from schedcache.sim.demo import run_demo
from tests.factories import make_node, make_pod


def test_checkpoint_compaction_and_more_commands_replay_exactly(cache):
    run_demo(cache, nodes=5, pods=40, replicas=2, seed=2)
    length = cache.stream_length()
    checkpoint_id = cache.checkpoint()
    at_checkpoint = cache.dump()
    assert cache.compact() == length - 1  # everything before the checkpoint's own event
    cache.add_pod(make_pod("after", "node-2", "100m", "1Mi"))
    cache.remove_node("node-3")
    assert cache.verify() == []
    assert cache.replay().nodes == cache.dump().nodes
    assert cache.replay(until=checkpoint_id).nodes == at_checkpoint.nodes


def test_replay_before_the_compacted_checkpoint_is_refused(cache):
    cache.add_node(make_node("n1"))
    first = next(iter(cache.events())).id
    cache.add_pod(make_pod("a", "n1", "100m", "1Mi"))
    early = list(cache.events())[-1].id
    cache.add_pod(make_pod("b", "n1", "100m", "1Mi"))
    assert cache.replay(until=first).nodes["n1"].pods == []  # still in the stream
    cache.checkpoint()
    # Nothing before the one event kept: nothing is trimmed and the history stays whole
    # (found in review: a compact that trimmed nothing still made replay refuse it).
    cache.compact(keep=2)
    assert [pod.name for pod in cache.replay(until=early).nodes["n1"].pods] == ["a"]
    cache.compact(keep=1)  # the node's event goes
    assert next(e.id for e in cache.events()) == early  # kept for reading
    with pytest.raises(HistoryCompacted, match="compacted away"):
        cache.replay(until=early)


def test_large_checkpoint_is_written_in_chunks_and_replaces_the_old(cache: Cache):
    with cache.batch(chunk_size=500) as batch:
        batch.add_node(make_node("n1", "1000", "1Ti", pods="100000"))
        for i in range(CHUNK + 500):
            batch.add_pod(make_pod(f"p{i}", "n1", "1m", "1Mi"))
    first = cache.checkpoint()
    chunk_keys = list(cache.client.scan_iter(match=f"{cache.keys.prefix}checkpoint:{first}:*"))
    assert len(chunk_keys) >= 3  # nodes, two of pods, image sizes
    cache.remove_pod(make_pod("p0", "n1"))
    second = cache.checkpoint()
    assert not list(cache.client.scan_iter(match=f"{cache.keys.prefix}checkpoint:{first}:*"))
    cache.compact()
    assert cache.stream_length() == 1 and second == next(iter(cache.events())).id
    assert cache.verify() == []


def test_compact_without_checkpoint_is_an_error(cache):
    cache.add_node(make_node("n1"))
    with pytest.raises(Exception, match="no checkpoint"):
        cache.compact()
    assert cache.stream_length() == 1
