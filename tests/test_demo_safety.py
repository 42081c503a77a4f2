"""``schedcache demo`` never touches a cache that holds anything unless told to (issue 13).

On a Redis of its own (a redis-server this module starts, so the real names ``default`` and
``demo`` can be used as a user would), a cache ``default`` holding nodes, pods, assumed pods
with deadlines, a checkpoint and a compacted stream must survive every demo invocation byte
for byte (DUMP of every key, and its TTL), unless the user names it with ``--cache default``
and passes ``--reset``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from schedcache import Cache
from schedcache.cli.app import main
from tests.factories import make_node, make_pod
from tests.servers import Server, server_url, start_test_redis

NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = start_test_redis(Path(tmp_path_factory.mktemp("demo-safety")))
    yield started
    started.kill()


@pytest.fixture
def r(server: Server) -> Iterator[redis.Redis]:
    client = server.client()
    client.flushall()
    yield client
    client.flushall()
    client.close()


def populate_production(client: redis.Redis) -> None:
    """The cache ``default`` as a production feeder leaves it."""
    cache = Cache(client, "default", ttl=30.0, replica="sched-0", lease_ttl=0)
    for index in range(3):
        cache.add_node(make_node(f"prod-{index}", "8", "32Gi"))
    for index in range(6):
        cache.add_pod(make_pod(f"api-{index}", f"prod-{index % 3}", "500m", "1Gi"))
    cache.checkpoint()
    cache.compact()
    assumed = make_pod("api-new", "prod-0", "250m", "1Gi")
    cache.assume_pod(assumed)
    cache.finish_binding(assumed, now=NOW)


def everything(client: redis.Redis, pattern: str = "{default}:*") -> dict[bytes, tuple]:
    """Every key of the pattern, byte for byte (DUMP), and whether it expires (remembered
    command ids do; their remaining time ticks on)."""
    return {
        key: (client.dump(key), client.pttl(key) > 0) for key in client.scan_iter(match=pattern)
    }


def run(server: Server, *args: str, **env: str) -> Result:
    """The CLI as a user with ``SCHEDCACHE_REDIS_URL`` exported runs it."""
    environment = {"SCHEDCACHE_REDIS_URL": server_url(server), "SCHEDCACHE_CACHE": None, **env}
    return CliRunner(env=environment).invoke(main, list(args))


def test_demo_with_the_url_in_the_environment_runs_on_its_own_cache(server, r):
    populate_production(r)
    before = everything(r)
    assert any(b":checkpoint" in key for key in before) and len(before) > 10
    # The command of issue 13, and the same with SCHEDCACHE_CACHE naming the production cache,
    # or a name no cache may have: the demo ignores the variable, so it refused nothing (it
    # said "Invalid value for '--cache' (from $SCHEDCACHE_CACHE)", exit 2, until stop 58).
    for env in ({}, {"SCHEDCACHE_CACHE": "default"}, {"SCHEDCACHE_CACHE": "bad name!"}):
        r.delete(*r.keys("{demo}:*") or [b"{demo}:none"])
        result = run(server, "demo", "--nodes", "2", "--pods", "4", **env)
        assert result.exit_code == 0, result.output
        assert "Nodes of cache 'demo'" in result.stdout
        assert everything(r) == before
        assert Cache(r, "demo").node_count() == 2


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (["demo", "--cache", "default"], {}, 1, "cache 'default' on redis://"),
        (["--cache", "default", "demo"], {}, 1, "not empty"),
        (["demo", "--reset"], {"SCHEDCACHE_CACHE": "default"}, 2, "name it with --cache NAME"),
        (["demo", "--cache", "default", "--keep"], {}, 2, "--keep"),
        (["demo", "--cache", "default", "--pods", "-1", "--reset"], {}, 2, "--pods"),
    ],
    ids=["named", "named-before", "reset-from-env", "keep", "bad-size"],
)
def test_demo_refuses_a_cache_that_holds_anything(server, r, args, env, code, message):
    populate_production(r)
    before = everything(r)
    result = run(server, *args, **env)
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("Error:")] == [
        result.stderr.splitlines()[-1]
    ]
    if code == 1:  # what to type instead
        assert "--cache default --reset" in result.stderr
    assert everything(r) == before
    assert everything(r, "{demo}:*") == {}


def test_a_second_demo_needs_its_cache_named_and_reset(server, r):
    first = run(server, "demo", "--nodes", "2", "--pods", "4")
    assert first.exit_code == 0, first.output
    kept = everything(r, "{demo}:*")
    again = run(server, "demo", "--nodes", "3", "--pods", "4")
    assert again.exit_code == 1 and "--cache demo --reset" in again.stderr
    assert everything(r, "{demo}:*") == kept
    reset = run(server, "demo", "--nodes", "3", "--pods", "4", "--cache", "demo", "--reset")
    assert reset.exit_code == 0, reset.output
    assert Cache(r, "demo").node_count() == 3


def test_reset_with_the_cache_named_replaces_its_contents(server, r):
    populate_production(r)
    result = run(server, "demo", "--cache", "default", "--reset", "--nodes", "2", "--pods", "4")
    assert result.exit_code == 0, result.output
    cache = Cache(r, "default")
    assert sorted(cache.dump().nodes) == ["node-0", "node-1"]
    assert r.exists("{default}:checkpoint") == 0  # the old checkpoint went with the rest
    assert {event.replica for event in cache.events()} <= {"simulation", "sched-0", "sched-1"}
