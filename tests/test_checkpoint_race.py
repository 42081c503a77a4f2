"""Checkpoint and compaction racing each other and a slow writer: the stored checkpoint is never
replaced by an older or incomplete fold, and a replay that the stream was trimmed under fails
(``HistoryCompacted``) instead of silently skipping events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from schedcache import Cache
from schedcache.history import checkpoints
from schedcache.history.checkpoints import HistoryCompacted, write_checkpoint
from schedcache.history.replay import ReplayState
from tests.conftest import REAL_REDIS_URL, real_client
from tests.factories import keyspace, make_node, make_pod

ROOT = Path(__file__).resolve().parent.parent


def populate(cache: Cache, pods: int, start: int = 0) -> None:
    with cache.batch(chunk_size=500) as batch:
        if start == 0:
            batch.add_node(make_node("n1", "1000", "1Ti", pods="100000"))
            batch.add_node(make_node("n2", "1000", "1Ti", pods="100000"))
        for i in range(start, start + pods):
            batch.add_pod(make_pod(f"p{i}", f"n{1 + i % 2}", "1m", "1Mi"))


def stored_id(cache: Cache) -> str | None:
    value = cache.client.hget(f"{cache.keys.prefix}checkpoint", "id")
    return value.decode() if value else None


def chunk_prefixes(cache: Cache) -> set[str]:
    """The distinct chunk prefixes (``checkpoint:<id>:<token>:``) present in Redis."""
    keys = cache.client.scan_iter(match=f"{cache.keys.prefix}checkpoint:*", count=1000)
    names = {key.decode() for key in keys} - {f"{cache.keys.prefix}checkpoint:parts"}
    return {name.rsplit(":", 1)[0] for name in names}


def assert_consistent(cache: Cache, checkpoint_id: str) -> None:
    """The stored checkpoint is ``checkpoint_id``, only its chunks are left, and replay from it
    equals the live keys."""
    assert stored_id(cache) == checkpoint_id
    meta = cache.client.hgetall(f"{cache.keys.prefix}checkpoint")
    assert chunk_prefixes(cache) == {meta[b"prefix"].decode().rstrip(":")}
    assert cache.verify() == []
    assert cache.replay().nodes == cache.dump().nodes


def test_an_old_replay_written_after_checkpoint_and_compact_is_refused(cache):
    """The one-process reproducer: the fold of the slow writer predates the compaction."""
    populate(cache, 20)
    slow = checkpoints.replay(cache.store)
    cache.remove_pod(make_pod("p0", "n1"))
    cache.add_pod(make_pod("late", "n2", "5m", "1Mi"))
    good = cache.checkpoint()
    cache.compact()
    before = keyspace(cache.client, cache.keys.pattern)
    with pytest.raises(HistoryCompacted, match="compacted up to"):
        write_checkpoint(cache.store, slow)
    assert keyspace(cache.client, cache.keys.pattern) == before  # refused before any write
    assert_consistent(cache, good)


def test_an_older_state_never_overwrites_a_newer_checkpoint(cache):
    """History intact (compacted only up to the slow fold's own checkpoint): the older state is
    dropped, the newer checkpoint stays and is what ``write_checkpoint`` answers."""
    populate(cache, 20)
    cache.checkpoint()
    slow = checkpoints.replay(cache.store)  # checkpoint + tail
    cache.remove_pod(make_pod("p1", "n2"))
    good = cache.checkpoint()
    before = keyspace(cache.client, cache.keys.pattern)
    assert write_checkpoint(cache.store, slow) == good
    assert keyspace(cache.client, cache.keys.pattern) == before
    assert_consistent(cache, good)
    cache.compact(keep=1000)  # marker at the stream's first event: before slow's base
    assert write_checkpoint(cache.store, slow) == good
    assert_consistent(cache, good)


@pytest.mark.parametrize("compact", [True, False])
def test_a_checkpoint_or_compaction_during_the_chunk_writes_is_caught_at_the_switch(
    make_cache, monkeypatch, compact
):
    """The checks before writing passed; another process checkpoints (and compacts) while the
    chunks are written: the WATCHed switch refuses, and the chunks written are deleted."""
    slow = make_cache(replica="slow")
    fast = make_cache(replica="fast")
    populate(fast, 30)
    state = checkpoints.replay(slow.store)
    fast.remove_pod(make_pod("p5", "n2"))
    server = slow.store.server()
    set_ = server.set
    newer: list[str] = []

    def set_then_race(key: str, value: bytes, *args: object, **kwargs: object) -> object:
        if not newer and ":checkpoint:" in str(key):
            newer.append("")  # (fast may share this client: no recursion)
            newer[0] = fast.checkpoint()
            if compact:
                fast.compact()
        return set_(key, value, *args, **kwargs)

    monkeypatch.setattr(server, "set", set_then_race)
    if compact:
        with pytest.raises(HistoryCompacted):
            write_checkpoint(slow.store, state)
    else:
        assert write_checkpoint(slow.store, state) == newer[0]
    monkeypatch.undo()
    assert_consistent(fast, newer[0])


class Pause:
    """Stops folds running in one thread before the page holding event ``after`` until
    released (folds go a page at a time: ``ReplayState.fold_entries``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, after: int) -> None:
        self.paused, self.release = threading.Event(), threading.Event()
        self.thread: threading.Thread | None = None
        self.after, self.seen = after, 0
        fold_entries = ReplayState.fold_entries

        def paused_fold(state: ReplayState, entries: Sequence[Any]) -> None:
            if threading.current_thread() is self.thread:
                before, self.seen = self.seen, self.seen + len(entries)
                if before < self.after <= self.seen:
                    self.paused.set()
                    assert self.release.wait(60), "never released"
            fold_entries(state, entries)

        monkeypatch.setattr(ReplayState, "fold_entries", paused_fold)

    def run(self, work: Callable[[], object]) -> Iterator[BaseException | object]:
        """Run ``work`` in the paused thread; yields once paused, then its outcome."""
        outcome: list[BaseException | object] = []

        def target() -> None:
            try:
                outcome.append(work())
            except BaseException as error:
                outcome.append(error)
            finally:
                self.paused.set()  # (also when it ended before the pause: the test sees how)

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()
        assert self.paused.wait(60), "the fold never reached the pause"
        assert not outcome, f"ended before the pause: {outcome[0]!r}"
        yield None
        self.release.set()
        self.thread.join(60)
        yield outcome[0]


def test_a_checkpoint_paused_mid_paging_while_another_compacts_raises(make_cache, monkeypatch):
    """Paused after the first page (1,000 events): meanwhile another cache object checkpoints
    and compacts. The paused one must not store what it folds from the trimmed stream."""
    fast = make_cache(replica="fast")
    slow = make_cache(replica="slow")
    populate(fast, 1500)
    pause = Pause(monkeypatch, after=600)
    steps = pause.run(slow.checkpoint)
    next(steps)  # the slow checkpoint is paused inside its first page
    for i in range(0, 400, 2):
        fast.remove_pod(make_pod(f"p{i}", "n1"))
    good = fast.checkpoint()
    fast.compact()
    outcome = next(steps)
    assert isinstance(outcome, HistoryCompacted), outcome
    assert_consistent(fast, good)
    assert slow.verify() == []


def test_a_replay_paused_mid_paging_raises_history_compacted(make_cache, monkeypatch):
    """``checkpoints.replay`` takes the ``compacted`` marker with every page (MULTI/EXEC): the
    page after the pause sees the trim and refuses, from a checkpoint and from the start."""
    monkeypatch.setattr(checkpoints, "PAGE", 50)
    fast = make_cache(replica="fast")
    slow = make_cache(replica="slow")
    populate(fast, 300)
    for gone, base in enumerate(("start", "checkpoint")):
        if base == "checkpoint":
            first = fast.checkpoint()
            populate(fast, 300, start=1000)
        pause = Pause(monkeypatch, after=120)
        steps = pause.run(lambda: checkpoints.replay(slow.store))
        next(steps)
        fast.remove_pod(make_pod(f"p{gone}", f"n{1 + gone}"))
        good = fast.checkpoint()
        fast.compact()
        outcome = next(steps)
        assert isinstance(outcome, HistoryCompacted), (base, outcome)
        assert_consistent(fast, good)
        if base == "checkpoint":
            assert first != good
    assert checkpoints.replay(slow.store).node_infos() == slow.dump().nodes


def test_a_paused_replay_that_read_everything_before_the_trim_succeeds(make_cache, monkeypatch):
    """A trim behind the events already read loses nothing: no false alarm (marker <= the last
    event read)."""
    monkeypatch.setattr(checkpoints, "PAGE", 50)
    fast = make_cache(replica="fast")
    slow = make_cache(replica="slow")
    populate(fast, 100)
    fast.checkpoint()
    populate(fast, 100, start=1000)
    before = fast.dump().nodes
    pause = Pause(monkeypatch, after=1)
    steps = pause.run(lambda: checkpoints.replay(slow.store))
    next(steps)
    assert fast.compact() == 101  # the history before the checkpoint the replay started from
    outcome = next(steps)
    assert not isinstance(outcome, BaseException), outcome
    assert outcome.node_infos() == before  # type: ignore[union-attr]


def test_a_checkpoint_replaced_while_it_is_read_is_read_again(make_cache, monkeypatch):
    """Its chunks are deleted by the newer writer: the reader follows the new pointer."""
    monkeypatch.setattr(checkpoints, "CHUNK", 5)
    reader = make_cache(replica="reader")
    writer = make_cache(replica="writer")
    populate(writer, 40)
    writer.checkpoint()
    writer.remove_pod(make_pod("p3", "n2"))
    server = reader.store.server()
    get = server.get
    replaced: list[str] = []

    def get_then_replace(key: str) -> bytes | None:
        value = get(key)
        if not replaced and ":checkpoint:" in str(key):
            replaced.append("")  # (the writer may share this client: no recursion)
            replaced[0] = writer.checkpoint()  # switches and deletes the chunks being read
        return value

    monkeypatch.setattr(server, "get", get_then_replace)
    state = checkpoints.read_checkpoint(reader.store)
    assert state is not None and replaced and state.last_id == replaced[0]
    monkeypatch.undo()
    assert_consistent(writer, replaced[0])


def test_missing_chunk_of_the_current_checkpoint_is_corrupt(cache):
    populate(cache, 10)
    cache.checkpoint()
    prefix = cache.client.hget(f"{cache.keys.prefix}checkpoint", "prefix").decode()
    cache.client.delete(f"{prefix}0")
    with pytest.raises(Exception, match=r"checkpoint chunk .*:0: missing"):
        checkpoints.read_checkpoint(cache.store)


def test_chunks_left_by_a_crashed_writer_are_swept_by_the_next_checkpoint(cache):
    populate(cache, 10)
    first = cache.checkpoint()
    crashed = f"{cache.keys.prefix}checkpoint:{first}:deadbeef:"
    cache.client.hset(f"{cache.keys.prefix}checkpoint:parts", crashed, 2)
    cache.client.set(f"{crashed}0", b"x")
    cache.client.set(f"{crashed}1", b"x")
    cache.remove_pod(make_pod("p2", "n1"))
    second = cache.checkpoint()
    assert_consistent(cache, second)
    parts = cache.client.hkeys(f"{cache.keys.prefix}checkpoint:parts")
    assert [p.decode() for p in parts] == [
        cache.client.hget(f"{cache.keys.prefix}checkpoint", "prefix").decode()
    ]


def test_compact_never_moves_the_history_start_back(cache):
    populate(cache, 10)
    cache.checkpoint()
    cache.compact()
    start = checkpoints.history_start(cache.store)
    length = cache.stream_length()
    assert cache.compact(keep=100) == 0
    assert checkpoints.history_start(cache.store) == start and cache.stream_length() == length
    assert cache.verify() == []


def test_two_processes_sigstop_during_checkpoint(cache_name):
    """Real processes on the real server (signals between processes: one server is enough): a
    checkpoint process stopped (SIGSTOP) inside its replay while this one checkpoints and
    compacts, then continued (SIGCONT)."""
    cache = Cache(real_client(), cache_name, replica="main")
    try:
        populate(cache, 1500)
        script = (
            "import os, signal, sys, redis\n"
            "from schedcache import Cache\n"
            "from schedcache.history.replay import ReplayState\n"
            "fold, seen = ReplayState.fold_entries, [0]\n"
            "def slow(state, entries):\n"
            "    seen[0] += 1\n"
            "    if seen[0] == 1:  # inside the first page (1,000 events) of 1,500\n"
            "        print('paused', flush=True); os.kill(os.getpid(), signal.SIGSTOP)\n"
            "    fold(state, entries)\n"
            "ReplayState.fold_entries = slow\n"
            "cache = Cache(redis.Redis.from_url(sys.argv[1]), sys.argv[2], replica='slow')\n"
            "try:\n"
            "    print('stored', cache.checkpoint(), flush=True)\n"
            "except Exception as error:\n"
            "    print('error', type(error).__name__, flush=True)\n"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen(
            [sys.executable, "-c", script, REAL_REDIS_URL, cache_name],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "paused"
            for i in range(0, 400, 2):
                cache.remove_pod(make_pod(f"p{i}", "n1"))
            good = cache.checkpoint()
            cache.compact()
            os.kill(child.pid, signal.SIGCONT)
            out, _ = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
        assert out.strip() == "error HistoryCompacted"
        assert_consistent(cache, good)
    finally:
        cache.clear()
