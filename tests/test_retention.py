"""Retention: rounds of checkpoint + compact keep the stream bounded, the recent history
readable, replay exact, and any number of workers may run them at once."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from schedcache import Cache
from schedcache.errors import ValidationError
from schedcache.history import checkpoints, retention
from schedcache.history.checkpoints import stream_id
from schedcache.history.retention import retain, run_retention
from tests.factories import keyspace, make_node, make_pod


def pods(cache: Cache, names: range, node: str = "n1") -> None:
    with cache.batch() as batch:
        for i in names:
            batch.add_pod(make_pod(f"p{i}", node, "1m", "1Mi"))


def seconds(event_id: str) -> float:
    return stream_id(event_id)[0] / 1000


def ids(cache: Cache) -> list[str]:
    return [event.id for event in cache.events()]


def assert_exact(cache: Cache) -> None:
    assert cache.verify() == []
    assert checkpoints.replay(cache.store).node_infos() == cache.dump().nodes


def test_a_round_trims_what_is_older_than_keep_and_keeps_the_rest(cache):
    cache.add_node(make_node("n1", "100", "1Ti", pods="10000"))
    pods(cache, range(50))
    old = ids(cache)
    time.sleep(0.01)  # the next events get later milliseconds
    pods(cache, range(50, 80))
    recent = [i for i in ids(cache) if i not in old]
    now = seconds(recent[0]) + 60  # keep 60 s: the recent events exactly
    done = retain(cache, keep_seconds=60, now=now)
    assert done.ran and done.checkpoint == recent[-1]
    assert done.removed == len(old) and ids(cache) == recent
    assert done.stream_length == len(recent) == cache.stream_length()
    assert done.history_start == checkpoints.history_start(cache.store)
    assert stream_id(old[-1]) < stream_id(done.history_start) <= stream_id(recent[0])
    assert_exact(cache)
    with pytest.raises(checkpoints.HistoryCompacted):
        cache.replay(until=old[-1])
    # Nothing new older than the cut: no checkpoint, nothing trimmed.
    again = retain(cache, keep_seconds=60, now=now)
    assert again.ran and again.checkpoint is None and again.removed == 0
    assert ids(cache) == recent
    # Time passes: the recent events age out too; the newest stays (the checkpoint is at it).
    cache.remove_pod(make_pod("p0", "n1"))
    later = retain(cache, keep_seconds=60, now=now + 3600)
    assert later.checkpoint == ids(cache)[-1] and cache.stream_length() == 1
    assert_exact(cache)


def test_keep_events_keeps_at_least_that_many(cache):
    cache.add_node(make_node("n1", "100", "1Ti", pods="10000"))
    pods(cache, range(40))
    before = ids(cache)
    # A second after the last event: every event is older than keep_seconds=0 then. (At the
    # server's own clock the round may run in the millisecond of the last events, and those
    # are not older: it kept 13 of a fast machine's events, all in one millisecond.)
    done = retain(cache, keep_seconds=0, keep_events=10, now=seconds(before[-1]) + 1)
    assert done.ran and ids(cache) == before[-10:] and done.removed == len(before) - 10
    assert_exact(cache)
    events = list(cache.events())
    assert [e.uid for e in events] == [f"p{i}" for i in range(30, 40)]  # still readable


def test_an_empty_stream_is_a_round_with_nothing_to_do(cache):
    done = retain(cache, keep_seconds=0)
    assert done.ran and done.checkpoint is None and done.removed == 0
    assert keyspace(cache.client, cache.keys.pattern) == {}


def test_a_held_lease_makes_the_round_skip_and_change_nothing(cache):
    cache.add_node(make_node("n1", "100", "1Ti"))
    pods(cache, range(10))
    cache.client.set(cache.keys.retention, "other-worker", px=60_000)
    before = keyspace(cache.client, cache.keys.pattern)
    assert retain(cache, keep_seconds=0) == retention.RetentionRound(ran=False)
    assert keyspace(cache.client, cache.keys.pattern) == before
    cache.client.delete(cache.keys.retention)
    assert retain(cache, keep_seconds=0).ran
    assert cache.client.get(cache.keys.retention) is None  # released after the round


@pytest.mark.parametrize("lease_seconds", [retention.LEASE_SECONDS, 0])
def test_two_workers_at_once_stay_correct(make_cache, lease_seconds):
    """Two workers (their own Cache objects, threads) run rounds while a third writes; with the
    lease and without it (then both do the work: checkpoint and compaction stay safe)."""
    writer = make_cache(replica="writer")
    workers = [make_cache(replica=f"worker-{i}") for i in range(2)]
    writer.add_node(make_node("n1", "100", "1Ti", pods="100000"))
    stop = threading.Event()
    outcomes: list[object] = []

    def work(cache: Cache) -> None:
        while not stop.is_set():
            try:
                outcomes.append(retain(cache, keep_seconds=0, lease_seconds=lease_seconds))
            except checkpoints.HistoryCompacted as raced:  # the other one compacted first
                outcomes.append(raced)
            except Exception as error:
                outcomes.append(error)
                raise
            time.sleep(0.005)

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    for wave in range(6):
        pods(writer, range(wave * 50, wave * 50 + 50))
        with writer.batch() as batch:
            for i in range(wave * 50, wave * 50 + 50, 3):
                batch.remove_pod(make_pod(f"p{i}", "n1"))
        time.sleep(0.05)  # rounds run between the waves, and during them
    stop.set()
    for thread in threads:
        thread.join(60)
    errors = [o for o in outcomes if isinstance(o, Exception)]
    unexpected = [e for e in errors if not isinstance(e, checkpoints.HistoryCompacted)]
    assert not unexpected, unexpected
    rounds = [o for o in outcomes if isinstance(o, retention.RetentionRound) and o.ran]
    assert rounds and any(r.removed for r in rounds)
    assert retain(writer, keep_seconds=0).ran
    assert writer.stream_length() == 1
    assert_exact(writer)
    assert writer.verify() == []


def test_run_retention_logs_a_failed_round_and_goes_on(cache, monkeypatch, caplog):
    cache.add_node(make_node("n1", "100", "1Ti"))
    pods(cache, range(5))
    real = retention.retain
    calls: list[int] = []
    stop = threading.Event()

    def flaky(*args: object, **kwargs: object) -> retention.RetentionRound:
        calls.append(1)
        if len(calls) == 1:
            raise checkpoints.CacheError("simulated")
        if len(calls) >= 3:
            stop.set()
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(retention, "retain", flaky)
    with caplog.at_level(logging.INFO, logger="schedcache.history.retention"):
        failures = run_retention(cache, keep_seconds=0, interval=0.01, stop=stop)
    assert failures == 1 and len(calls) == 3
    assert "failed (CacheError: simulated)" in caplog.text
    assert "events trimmed" in caplog.text
    assert cache.stream_length() == 1
    assert_exact(cache)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"keep_seconds": -1}, "keep_seconds"),
        ({"keep_seconds": "1h"}, "keep_seconds"),
        ({"keep_seconds": 1, "keep_events": -5}, "keep_events"),
        ({"keep_seconds": 1, "keep_events": 2**63}, "keep_events"),  # (found in review)
        ({"keep_seconds": 1, "lease_seconds": -1}, "lease_seconds"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(cache, options, field):
    cache.add_node(make_node("n1"))
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(ValidationError, match=field):
        retain(cache, **options)
    with pytest.raises(ValidationError, match=field):
        run_retention(cache, interval=1, stop=threading.Event(), **options)
    with pytest.raises(ValidationError, match="interval"):
        run_retention(cache, keep_seconds=1, interval=0, stop=threading.Event())
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_a_round_that_trims_nothing_leaves_the_whole_history_replayable(cache):
    # Found in review (mended): the first round of `worker compact` (the default keep of an
    # hour, a cache younger than that) trimmed nothing but still set the `compacted` marker
    # at its cut, and replay, diff and whatif then refused every moment before the checkpoint.
    cache.add_node(make_node("n1", "100", "1Ti", pods="10000"))
    pods(cache, range(20))
    before = ids(cache)
    done = retain(cache, keep_seconds=3600)
    assert done.ran and done.removed == 0 and ids(cache) == before
    assert done.checkpoint == before[-1]  # checkpointed all the same
    assert done.history_start is None and checkpoints.history_start(cache.store) is None
    early = cache.replay(until=before[2])
    assert early.last_id == before[2]
    assert [pod.name for pod in early.nodes["n1"].pods] == ["p0", "p1"]
    # Once something is trimmed the marker comes, and stays where that trim put it when a
    # later round has nothing more to trim.
    trimmed = retain(cache, keep_seconds=0, keep_events=10)
    assert trimmed.removed == len(before) - 10 and trimmed.history_start is not None
    with pytest.raises(checkpoints.HistoryCompacted):
        cache.replay(until=before[2])
    again = retain(cache, keep_seconds=0, keep_events=10)
    assert again.removed == 0 and again.history_start == trimmed.history_start
    assert_exact(cache)
