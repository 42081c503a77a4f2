"""Restarts: with AOF and appendfsync always, every acknowledged command survives a SIGKILL of
the server, the library comes back (functions are persisted), and the cache verifies clean.

These tests start their own redis-server on a free loopback port (real Redis only: fakeredis
has no process to kill).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from schedcache import Cache
from tests.factories import make_node, make_pod


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, directory: Path, fsync: str) -> subprocess.Popen:
    assert shutil.which("redis-server"), "these tests start their own redis-server: install it"
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(directory),
            "--appendonly",
            "yes",
            "--appendfsync",
            fsync,
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            if client.ping():
                return process
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def test_acknowledged_commands_survive_sigkill_with_appendfsync_always(tmp_path):
    port = free_port()
    server = start_server(port, tmp_path, "always")
    try:
        cache = Cache(redis.Redis(port=port), "durable", ttl=0, replica="r")
        cache.add_node(make_node("n1", "64", "64Gi"))
        acknowledged = []
        for i in range(300):
            pod = make_pod(f"p{i}", "n1", "10m", "1Mi")
            cache.add_pod(pod)
            acknowledged.append(pod.uid)
        with cache.batch() as batch:
            for i in range(300, 600):
                batch.add_pod(make_pod(f"p{i}", "n1", "10m", "1Mi"))
        acknowledged += [f"p{i}" for i in range(300, 600)]
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)

        server = start_server(port, tmp_path, "always")
        client = redis.Redis(port=port)
        assert client.function_list(library="schedcache"), "functions are persisted in the AOF"
        cache = Cache(client, "durable", ttl=0, replica="r")
        assert {p.uid for p in cache.list_pods()} == set(acknowledged)
        assert cache.verify() == []
        cache.add_pod(make_pod("after", "n1", "10m", "1Mi"))  # and it carries on
        assert cache.pod_count() == 601
    finally:
        server.kill()
        server.wait(timeout=10)


def test_a_client_carries_on_across_a_restart_without_manual_action(tmp_path):
    port = free_port()
    server = start_server(port, tmp_path, "always")
    try:
        cache = Cache(redis.Redis(port=port), "durable", ttl=0, replica="r")
        cache.add_node(make_node("n1"))
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        server = start_server(port, tmp_path, "always")
        cache.add_pod(make_pod("a", "n1", "10m", "1Mi"))  # the same client object, reconnected
        assert cache.pod_count() == 1 and cache.verify() == []
    finally:
        server.kill()
        server.wait(timeout=10)
