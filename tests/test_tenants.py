"""Many tenants on one Redis (issue 44): what one tenant's processes expose to others and how
they share a server (/metrics on loopback by default, ...)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from schedcache.cli.app import main
from schedcache.history.verify import Difference
from schedcache.store.eviction import check_eviction
from schedcache.store.library import (
    SCHEMA_VERSION,
    ensure_loaded,
    function_names,
    library_name,
    library_source,
    library_tag,
)
from schedcache.store.routing import primaries
from tests.conftest import REAL_REDIS_URL, backend_url
from tests.factories import keyspace, make_node, make_pod
from tests.servers import free_port


def listening_addresses(port: int) -> set[str]:
    """The local addresses a TCP socket listens on at ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


@pytest.mark.parametrize(
    "argv",
    [
        ["metrics", "--port", "{port}"],
        ["worker", "expiry", "--metrics-port", "{port}"],
    ],
    ids=["metrics", "worker expiry"],
)
def test_metrics_listen_on_loopback_unless_told(argv: list[str], tmp_path: Path) -> None:
    for address, expected in ((None, {"0100007F"}), ("0.0.0.0", {"00000000"})):
        port = free_port()
        words = [word.format(port=port) for word in argv]
        if address is not None:
            words += ["--address" if argv[0] == "metrics" else "--metrics-address", address]
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "schedcache.cli",
                "--redis",
                REAL_REDIS_URL,
                "--cache",
                f"bind-{port}",
                *words,
            ],
            env={**os.environ},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 20
            while not listening_addresses(port) and time.monotonic() < deadline:
                assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
                time.sleep(0.05)
            assert listening_addresses(port) == expected, (address, listening_addresses(port))
        finally:
            process.terminate()
            process.wait(timeout=10)


def test_every_metrics_address_option_defaults_to_loopback() -> None:
    """sync's as well (it needs an API server to run: its option is checked here)."""
    seen = []
    context = click.Context(main)  # subcommands load lazily: ask the group for them
    for name in ("sync", "metrics"):
        command = main.get_command(context, name)
        assert command is not None
        seen += [p for p in command.params if p.name in ("metrics_address", "address")]
    worker = main.get_command(context, "worker")
    assert isinstance(worker, click.Group)
    seen += [p for p in worker.commands["expiry"].params if p.name == "metrics_address"]
    assert len(seen) == 3 and {p.default for p in seen} == {"127.0.0.1"}


# -- library versions side by side --------------------------------------------------------


def other_build() -> tuple[str, str]:
    """Another release's library (its own tag: what a tenant on that release loads) and its
    name."""
    other_tag = "v2_0123456789ab"
    assert library_tag() != other_tag
    return library_source().replace(library_tag(), other_tag), f"schedcache_{other_tag}"


def test_two_builds_share_a_server_and_neither_replaces_the_other(
    make_cache: Any, client: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    """Tenant B's newer build loaded beside tenant A's: A's caches keep running A's code (a new
    Cache loads nothing and fails nothing), B's functions answer under B's names, and
    ``scripts`` lists B's library and unloads it on request."""
    a = make_cache(name=f"a-{uuid.uuid4().hex[:8]}")
    a.add_node(make_node("n1", "4", "8Gi"))
    text, name = other_build()
    server = a.store.server()  # (in a Cluster, the primary of A's slot)
    server.function_load(text, replace=True)
    libraries = {entry[b"library_name"] for entry in map(as_dict, server.function_list())}
    assert {library_name().encode(), name.encode()} <= libraries
    again = make_cache(name=a.name)  # loads nothing: A's build is still there
    again.add_pod(make_pod("p", "n1", "100m", "64Mi"))
    assert again.verify() == []
    other_version = name.removeprefix("schedcache_")
    answer = server.fcall_ro(f"sc_version_{other_version}", 0)
    assert answer.decode().split()[0] == str(SCHEMA_VERSION)
    url = backend_url(backend, request)
    if backend != "fakeredis":
        runner = CliRunner()
        listed = runner.invoke(main, ["--redis", url, "scripts"])
        assert listed.exit_code == 0, listed.output
        assert f"also loaded: {name}" in listed.output
        refused = runner.invoke(main, ["--redis", url, "scripts", "--unload", library_name()])
        assert refused.exit_code == 2 and "not another build's" in refused.output
        unloaded = runner.invoke(main, ["--redis", url, "scripts", "--unload", name])
        assert unloaded.exit_code == 0 and "also loaded" not in unloaded.output
    else:
        server.function_delete(name)
    assert a.node_count() == 1


def as_dict(entry: list[Any]) -> dict[bytes, Any]:
    return dict(zip(entry[::2], entry[1::2], strict=True))


def test_every_function_the_library_registers_carries_the_builds_tag(client: Any) -> None:
    """Functions added later are versioned too, as long as they register through
    ``function_name`` in lua/_register.lua: a literal name would be caught here."""
    server = primaries(client)[0]
    ensure_loaded(server)
    (entry,) = (
        as_dict(e)
        for e in server.function_list(library=library_name())
        if as_dict(e)[b"library_name"] == library_name().encode()
    )
    names = {as_dict(f)[b"name"].decode() for f in entry[b"functions"]}
    assert names == set(function_names())
    assert all(name.endswith(f"_{library_tag()}") for name in names)


# -- eviction -------------------------------------------------------------------------------


@contextmanager
def policy(cache: Any, name: str) -> Iterator[None]:
    """``maxmemory-policy`` set on the server holding ``cache`` (maxmemory stays 0: nothing
    is evicted, the setting alone is what is checked), restored afterwards."""
    server = cache.store.server()
    before = server.config_get("maxmemory-policy")["maxmemory-policy"]
    server.config_set("maxmemory-policy", name)
    try:
        yield
    finally:
        server.config_set("maxmemory-policy", before)


def test_verify_and_long_running_processes_name_a_policy_that_can_evict(
    make_cache: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    cache = make_cache()
    cache.add_node(make_node("n1", "4", "8Gi"))
    if backend == "fakeredis":  # no CONFIG GET: said, never guessed
        check = check_eviction(cache.store.server())
        assert check.policy is None and "fakeredis has no CONFIG GET" in check.why
        assert cache.verify() == []
        return
    assert cache.verify() == []  # noeviction, the default
    url = backend_url(backend, request)
    runner = CliRunner()
    for evicting in ("allkeys-lru", "volatile-ttl"):
        with policy(cache, evicting):
            assert Difference("server", "maxmemory-policy", "noeviction", evicting) in (
                cache.verify()
            )
            result = runner.invoke(main, ["--redis", url, "--cache", cache.name, "verify"])
            assert result.exit_code == 1 and f"maxmemory-policy is {evicting}" in result.output
            started = runner.invoke(
                main, ["--redis", url, "--cache", cache.name, "worker", "expiry", "--once"]
            )
            assert started.exit_code == 1, started.output
            assert f"maxmemory-policy is {evicting}" in started.output
            assert "Traceback" not in started.output + result.output
    assert cache.verify() == []


def test_verify_notices_a_cache_whose_stream_or_generation_was_evicted(make_cache: Any) -> None:
    """What allkeys-lru left of a tenant's cache (86 of 93 keys gone, the stream and the
    generation with them): the fold and the live sets agree on nothing left to compare (54b1d0e's
    verify found nothing), but the node entry and the indexes every write keeps say commands
    were applied; and the other way round, a generation whose stream is gone."""
    cache = make_cache()
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_pod(make_pod("p", "n1", "100m", "64Mi"))
    server, keys = cache.store.server(), cache.keys
    kept = {keys.node_generations, keys.tree_zones, keys.node("n1")}
    server.delete(*[key for key in keyspace(server, keys.pattern) if key.decode() not in kept])
    assert Difference("cache", "gen", "a generation counter", None) in cache.verify()
    cache.clear()
    cache.add_node(make_node("n1", "4", "8Gi"))
    server.delete(keys.events)
    found = cache.verify()
    assert Difference("cache", "events", "a stream (generation 1)", None) in found, found
