"""The expiry worker: bounded rounds on the server's clock, safe with several workers, and
surviving Redis going away."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import pytest
import redis

from schedcache import Cache
from schedcache.ops.expiry import ExpiryWorker
from tests.conftest import REAL_REDIS_URL
from tests.factories import make_pod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def server_now(cache: Cache) -> float:
    seconds, micros = cache.client.time()
    return seconds + micros / 1e6


def book_due_pods(cache: Cache, count: int, prefix: str = "p") -> list:
    """Assumed pods whose binding finished long enough ago that they are due now."""
    past = server_now(cache) - 3600
    pods = [make_pod(f"{prefix}{i}", f"n{i % 10}", "10m", "1Mi") for i in range(count)]
    with cache.batch() as batch:
        for pod in pods:
            batch.assume_pod(pod)
            batch.finish_binding(pod, now=past)
    return pods


def expired_events(cache: Cache) -> Counter:
    return Counter(event.uid for event in cache.events() if event.type == "PodExpired")


def test_round_expires_every_due_pod_in_bounded_calls(make_cache):
    cache = make_cache(ttl=10.0)
    book_due_pods(cache, 23)
    not_due = make_pod("later", "n1", "10m", "1Mi")
    cache.assume_pod(not_due)
    cache.finish_binding(not_due)  # deadline: server time + 10 s
    unfinished = make_pod("binding", "n1", "10m", "1Mi")
    cache.assume_pod(unfinished)
    worker = ExpiryWorker(cache, batch=5)
    assert len(worker.run_once()) == 23
    assert cache.is_assumed_pod(not_due) and cache.is_assumed_pod(unfinished)
    assert cache.pod_count() == 2
    assert sum(expired_events(cache).values()) == 23
    assert {e.replica for e in cache.events() if e.type == "PodExpired"} == {"test"}


def test_confirmed_pod_is_never_expired(make_cache):
    cache = make_cache(ttl=10.0)
    (pod,) = book_due_pods(cache, 1)
    cache.add_pod(pod)
    assert ExpiryWorker(cache).run_once() == []
    assert cache.pod_state(pod) == "added"


def test_sleep_until_the_next_deadline_or_the_interval(make_cache):
    cache = make_cache(ttl=3.0)  # (0.4 s passed between two calls once, on a loaded CI run)
    worker = ExpiryWorker(cache, interval=5.0)
    assert worker.seconds_until_next_deadline() == 5.0
    pod = make_pod("p", "n1", "10m", "1Mi")
    cache.assume_pod(pod)
    cache.finish_binding(pod)
    assert 1.0 < worker.seconds_until_next_deadline() <= 3.01


def test_running_worker_wakes_for_the_deadline_and_stops_cleanly(make_cache):
    cache = make_cache(ttl=0.3)
    worker = ExpiryWorker(cache, interval=30.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    pod = make_pod("p", "n1", "10m", "1Mi")
    cache.assume_pod(pod)
    cache.finish_binding(pod)
    thread.start()
    deadline = time.monotonic() + 5
    while cache.pod_count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache.pod_count() == 0, "the worker slept through the deadline"
    worker.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_three_workers_at_once_expire_each_pod_exactly_once(make_cache):
    cache = make_cache(ttl=10.0)
    book_due_pods(cache, 600)
    workers = [ExpiryWorker(make_cache(replica=f"w{i}"), batch=25) for i in range(3)]
    threads = [threading.Thread(target=w.run_once) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = expired_events(cache)
    assert len(events) == 600 and set(events.values()) == {1}
    assert sum(w.expired_total for w in workers) == 600
    assert cache.pod_count() == 0


def test_three_worker_processes_on_real_redis_expire_each_pod_once():
    """Separate processes, as deployed: no pod expired twice, none missed."""
    client = redis.Redis.from_url(REAL_REDIS_URL)
    cache = Cache(client, f"x-{uuid.uuid4().hex[:10]}", ttl=10.0, replica="test")
    try:
        book_due_pods(cache, 3000)
        command = [sys.executable, "-m", "schedcache.cli", "--redis", REAL_REDIS_URL]
        command += ["--cache", cache.name, "worker", "expiry", "--once", "--batch", "40"]
        processes = [subprocess.Popen(command, cwd=ROOT) for _ in range(3)]
        assert [p.wait(timeout=120) for p in processes] == [0, 0, 0]
        events = expired_events(cache)
        assert len(events) == 3000 and set(events.values()) == {1}
        assert cache.pod_count() == 0
    finally:
        cache.clear()


def test_worker_process_stops_cleanly_on_sigterm():
    name = f"x-{uuid.uuid4().hex[:10]}"
    command = [sys.executable, "-m", "schedcache.cli", "--redis", REAL_REDIS_URL]
    command += ["--cache", name, "worker", "expiry", "--interval", "0.2"]
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    # Its handlers are installed before it logs that it started (a fixed sleep raced a slow
    # start on a loaded machine: the signal then met Python's default handler).
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "expiry worker started" in line:
            break
    assert process.poll() is None, "".join(seen)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0, "".join(seen) + process.stderr.read()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(port: int, directory: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return process
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def test_worker_reconnects_after_redis_restarts(tmp_path):
    assert shutil.which("redis-server"), "this test starts its own redis-server: install it"
    port = free_port()
    server = start_redis(port, str(tmp_path))
    client = redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=1)
    cache = Cache(client, "restart", ttl=10.0)
    worker = ExpiryWorker(cache, interval=0.2, max_backoff=0.5)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        server.terminate()
        server.wait(timeout=10)
        time.sleep(1.0)  # the worker is now retrying
        server = start_redis(port, str(tmp_path))  # empty: no functions, no data
        cache = Cache(redis.Redis(port=port), "restart", ttl=10.0)
        book_due_pods(cache, 5)
        deadline = time.monotonic() + 10
        while cache.pod_count() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cache.pod_count() == 0, "the worker did not come back"
        assert thread.is_alive()
    finally:
        worker.stop()
        thread.join(timeout=10)
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"interval": 0}, "interval"),
        ({"interval": -1}, "interval"),
        ({"interval": float("nan")}, "interval"),
        ({"interval": "1"}, "interval"),
        ({"interval": 7200}, "interval"),
        ({"max_backoff": -1}, "max_backoff"),
        ({"batch": 0}, "batch"),
        ({"batch": 2.5}, "batch"),
        ({"batch": "10"}, "batch"),
        ({"batch": True}, "batch"),
        ({"batch": 10_001}, "batch"),
    ],
)
@pytest.mark.parametrize("worker_class", ["sync", "async"])
def test_a_worker_with_settings_that_would_busy_loop_or_fail_later_is_refused(
    make_cache, options, field, worker_class
):
    """A zero interval would hammer Redis, a bad batch fail at the first call blaming the
    library: both workers refuse them when made, naming the setting."""
    from schedcache.aio import AsyncExpiryWorker
    from schedcache.errors import ValidationError

    cls = ExpiryWorker if worker_class == "sync" else AsyncExpiryWorker
    with pytest.raises(ValidationError, match=rf"expiry worker: {field}: "):
        cls(make_cache(), **options)
