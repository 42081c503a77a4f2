"""``schedcache demo``, ``stats`` and ``scripts`` as a user runs them, on both backends.

On the real backend the CLI is given ``--redis <test server>`` and this test's cache name (its
keys are deleted afterwards). The embedded default starts a new in-process fakeredis on every
``connect()``, so on fakeredis a test can only check what one invocation prints; state left
behind by the demo is checked by calling ``run_demo`` on the fixture's cache.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import pytest
import redis
from click.testing import CliRunner, Result

from schedcache import Cache
from schedcache.cli import app as cli_module
from schedcache.cli.app import hoist_global_options, main
from schedcache.sim.demo import run_demo
from schedcache.store.connection import ENV_URL, embedded_client
from schedcache.store.library import function_names
from tests.conftest import REAL_REDIS_URL, backend_url, real_client
from tests.factories import make_node, node_manifest
from tests.servers import silent_port
from tests.test_cli_follow import behind_a_proxy

# Table borders rich draws (unicode, or ASCII when the output cannot encode them).
BORDERS = re.compile(r"[│┃|]")


def cells(line: str) -> list[str]:
    """The non-empty cells of one row of a rich table."""
    return [cell.strip() for cell in BORDERS.split(line) if cell.strip()]


def summary(output: str) -> dict[str, str]:
    """The rows of the ``Summary`` table: what -> value."""
    _, marker, tail = output.partition("Summary")
    assert marker, f"no Summary table in:\n{output}"
    rows = {}
    for line in tail.splitlines():
        row = cells(line)
        if len(row) == 2:
            rows[row[0]] = row[1]
    return rows


def table_rows(output: str, first_cell: str) -> list[list[str]]:
    """Rows of any table whose first cell starts with ``first_cell``."""
    return [row for row in map(cells, output.splitlines()) if row and row[0].startswith(first_cell)]


@pytest.fixture
def cli(backend, client, cache_name, monkeypatch, request) -> Iterator:
    """``cli(*args)``: run ``schedcache --redis <backend> --cache <this test's cache> *args``."""
    monkeypatch.delenv(ENV_URL, raising=False)
    url = backend_url(backend, request)

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, ["--redis", url, "--cache", cache_name, *args])

    run.url = url  # type: ignore[attr-defined]
    yield run
    if backend != "fakeredis":
        Cache(client, cache_name).clear()


def test_demo_prints_the_nodes_and_a_summary(backend, cli):
    result = cli("demo", "--pods", "12", "--nodes", "3", "--seed", "5")
    assert result.exit_code == 0, result.output
    rows = summary(result.output)
    assert rows["pods to schedule"] == "12"
    assert "Nodes of cache" in result.output
    nodes = [line.split() for line in result.output.splitlines() if line.startswith("node-")]
    assert [row[0] for row in nodes] == ["node-0", "node-1", "node-2"]
    placed = sum(int(row[3].split("/")[0]) for row in nodes)
    if backend == "fakeredis":  # replicas take turns in-process
        assert placed == int(rows["confirmed by the informer (add_pod)"])
        # Taking turns, replicas cannot collide: the summary says so instead of a bare 0.
        assert rows["conflicts (another replica was first)"] == "n/a, take turns"
        assert "The replicas take turns in this process" in result.stdout
    else:  # replica processes claim concurrently; a table of replicas
        assert rows["claimed"] == "12" and placed == 12
        assert rows["overcommitted nodes"] == "0"


def test_demo_shows_each_replica(backend, cli):
    result = cli("demo", "--pods", "30", "--nodes", "4", "--replicas", "3")
    assert result.exit_code == 0, result.output
    rows = summary(result.output)
    assert rows["pods to schedule"] == "30"
    if backend == "fakeredis":
        per_replica = [int(rows[f"by sched-{k}"]) for k in range(3)]
        assert sum(per_replica) == int(rows["assumed (scheduled)"])
        assert all(count > 0 for count in per_replica)
    else:
        replicas = table_rows(result.output, "sched-")
        assert [row[0] for row in replicas] == ["sched-0", "sched-1", "sched-2"]
        assert sum(int(row[1]) for row in replicas) == int(rows["claimed"])


def test_run_demo_accounts_for_every_assumed_pod(cache):
    report = run_demo(cache, nodes=4, pods=30, replicas=2, seed=3)

    assert report.pods == 30
    assert report.scheduled + report.unschedulable + report.conflicts == report.pods
    assert sum(report.per_replica.values()) == report.scheduled
    # Every assumed pod ends confirmed, forgotten (bind failed) or expired (never confirmed).
    assert report.scheduled == report.confirmed + report.bind_failures + report.expired
    assert cache.pod_count() == report.confirmed
    dump = cache.dump()
    assert dump.assumed_pods == set()

    types = Counter(event.type for event in cache.events())
    assert types["PodExpired"] == report.expired
    assert types["PodForgotten"] == report.bind_failures
    assert types["PodAdded"] == report.confirmed
    assert types["PodAssumed"] == report.scheduled
    assert report.events == cache.stream_length() == sum(types.values())
    assert report.generation == dump.generation

    assert sorted(dump.nodes) == ["node-0", "node-1", "node-2", "node-3"]
    for name, info in dump.nodes.items():
        assert info.requested.milli_cpu <= info.allocatable.milli_cpu, name
        assert info.requested.memory <= info.allocatable.memory, name
    assert sum(len(info.pods) for info in dump.nodes.values()) == report.confirmed
    assert cache.verify() == []


def test_run_demo_with_this_seed_forgets_and_expires(cache):
    """The seed used above really exercises forget_pod and expiry (the sums are not 0 = 0)."""
    report = run_demo(cache, nodes=4, pods=30, replicas=2, seed=3)
    assert report.confirmed > 0
    assert report.bind_failures > 0
    assert report.expired > 0


def test_stats_counts_what_the_demo_left(backend, cli, client, cache_name, monkeypatch):
    if backend == "fakeredis":
        # Every embedded connect() is a new server: point both invocations at the fixture's.
        monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    demo = cli("demo", "--pods", "20", "--nodes", "3", "--seed", "7")
    assert demo.exit_code == 0, demo.output
    rows = summary(demo.output)

    stats = cli("stats")
    assert stats.exit_code == 0, stats.output
    counts = dict(line.split("\t") for line in stats.output.splitlines())
    assert counts["nodes"] == "3"
    assert counts["ghost/placeholder nodes"] == "0"
    cache = Cache(client, cache_name)
    assert int(counts["pods"]) == cache.pod_count()
    assert int(counts["stream length"]) == cache.stream_length()
    assert int(counts["generation"]) == cache.generation()
    assert counts["stream length"] == rows["events in the stream"]
    if backend == "fakeredis":
        assert counts["pods"] == rows["confirmed by the informer (add_pod)"]
        assert counts["assumed pods"] == "0"
    else:  # claimed pods stay assumed (the replica processes have no informer)
        assert counts["pods"] == rows["claimed"] == "20"
        assert counts["assumed pods"] == "20"


def test_scripts_lists_every_function(cli):
    result = cli("scripts")
    assert result.exit_code == 0, result.output
    listed = result.output.split()
    expected = function_names()
    assert len(expected) > 10
    for name in expected:
        assert name in listed
    assert "functions loaded" in result.output


@pytest.mark.parametrize(
    "option", [["--nodes", "0"], ["--replicas", "0"], ["--pods", "-1"]], ids=lambda o: o[0]
)
def test_demo_rejects_impossible_sizes(cli, option):
    result = cli("demo", *option)
    assert result.exit_code == 2
    assert f"Invalid value for '{option[0]}'" in result.stderr
    assert "Traceback" not in result.output


def test_unreachable_redis_names_the_url():
    url = "redis://127.0.0.1:1/0"
    result = CliRunner().invoke(main, ["--redis", url, "stats"])
    assert result.exit_code == 1
    assert f"Error: cannot reach Redis at {url}" in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


def test_unreachable_redis_masks_the_password():
    url = "redis://admin:s3cret@127.0.0.1:1/0"
    result = CliRunner().invoke(main, ["--redis", url, "stats"])
    assert result.exit_code == 1
    assert "cannot reach Redis at redis://admin:***@127.0.0.1:1/0" in result.output
    assert "s3cret" not in result.output


NO_ANSWER = "did not answer: each try waited 0.3 s (--timeout, or $SCHEDCACHE_TIMEOUT)"


@pytest.mark.parametrize("where", ["option", "environment"])
@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:{port}/0", "redis+cluster://127.0.0.1:{port}"],
    ids=["plain", "cluster"],
)
def test_a_redis_that_takes_the_connection_but_never_answers_names_the_timeout(url, where):
    # Found in review (mended): a server that took the connection and never answered read
    # "cannot reach Redis at URL: Timeout reading from 127.0.0.1:PORT", as if nothing listened;
    # a Cluster's startup node (stop 58): "cannot reach Redis at URL: Redis Cluster cannot be
    # connected. Please provide at least one reachable node: Timeout reading from socket".
    with silent_port() as port:
        url = url.format(port=port)
        if where == "option":
            result = CliRunner().invoke(main, ["--redis", url, "--timeout", "0.3", "stats"])
        else:
            result = CliRunner(env={"SCHEDCACHE_TIMEOUT": "0.3"}).invoke(
                main, ["--redis", url, "stats"]
            )
    assert result.exit_code == 1, result.output
    assert result.stderr == f"Error: Redis at {url} {NO_ANSWER}\n"


@pytest.mark.parametrize("where", ["fakeredis", "redis"])
def test_redis_not_answering_in_the_middle_of_a_command_names_the_timeout(
    where, cache_name, monkeypatch
):
    """A call past --timeout after connecting (a script that runs long, a server that stops),
    with --retry-for 0 so the retry policy does not resend it."""
    if where == "fakeredis":  # (it cannot time out: the timeout redis-py raises, raised)
        client: Any = embedded_client()
        monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
        Cache(client, cache_name).add_node(make_node("n1", "4", "8Gi"))
        monkeypatch.setattr(Cache, "dump", stalled)
        result = CliRunner().invoke(
            main, ["--cache", cache_name, "--timeout", "0.3", "--retry-for", "0", "get", "nodes"]
        )
        url = "embedded"
    else:
        with behind_a_proxy(cache_name) as (proxy, url):
            for _ in range(2):  # `get` first asks whether the cache exists; redis-py resends
                proxy.hold_next(b"EXISTS")
            args = ["--redis", url, "--cache", cache_name, "--timeout", "0.3", "--retry-for", "0"]
            result = CliRunner().invoke(main, [*args, "get", "nodes"])
    assert result.exit_code == 1, result.output
    assert result.stderr == f"Error: Redis at {url} {NO_ANSWER}\n"


@pytest.mark.parametrize("where", ["option", "environment"])
def test_a_worker_waiting_for_a_redis_that_never_answers_names_the_timeout_option(where, tmp_path):
    # Found in review (mended): `schedcache worker expiry` (and every long-running command)
    # logged "each try waited 0.3 s (connect()'s timeout)" while waiting for Redis: a CLI user
    # never called connect(); the setting to mend is --timeout or $SCHEDCACHE_TIMEOUT.
    log = tmp_path / "stderr.log"
    with silent_port() as port, log.open("w") as stderr:
        url = f"redis://127.0.0.1:{port}/0"
        args = ["--redis", url, "worker", "expiry"]
        env = {**os.environ, "SCHEDCACHE_TIMEOUT": "0.3"}
        if where == "option":
            args, env["SCHEDCACHE_TIMEOUT"] = ["--timeout", "0.3", *args], "9"
        command = [sys.executable, "-m", "schedcache.cli", *args]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        try:
            deadline = time.monotonic() + 30
            while "Redis unavailable" not in log.read_text() and time.monotonic() < deadline:
                assert process.poll() is None, log.read_text()
                time.sleep(0.05)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    waiting = next(line for line in log.read_text().splitlines() if "Redis unavailable" in line)
    assert f"Redis at {url} {NO_ANSWER}" in waiting
    assert "connect()" not in log.read_text()


@pytest.mark.parametrize("when", ["at connect", "in the middle of a command"])
def test_a_urls_socket_timeout_is_the_one_the_no_answer_message_names(when, cache_name):
    # Found in review (mended): redis-py takes a URL's ?socket_timeout= over --timeout, but
    # the message named --timeout's 7 s while each try had waited the URL's 0.3 s.
    args = ["--timeout", "7", "--retry-for", "0", "--cache", cache_name]
    if when == "at connect":
        with silent_port() as port:
            url = f"redis://127.0.0.1:{port}/0?socket_timeout=0.3"
            result = CliRunner().invoke(main, ["--redis", url, *args, "stats"])
    else:
        with behind_a_proxy(cache_name) as (proxy, url):
            url += "?socket_timeout=0.3"
            for _ in range(2):  # `get` first asks whether the cache exists; redis-py resends
                proxy.hold_next(b"EXISTS")
            result = CliRunner().invoke(main, ["--redis", url, *args, "get", "nodes"])
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"Error: Redis at {url} did not answer: each try waited 0.3 s (the URL's socket_timeout)\n"
    )


def stalled(*args: object, **kwargs: object) -> NoReturn:
    raise redis.TimeoutError("Timeout reading from socket")  # redis-py's, past socket_timeout


@pytest.mark.parametrize(
    ("option", "value"),
    [("--timeout", "0"), ("--retry-for", "-1"), ("--wait-replicas", "-1"), ("--wait-timeout", "0")],
)
def test_connection_options_out_of_range_are_refused(backend, cli, option, value):
    result = cli(option, value, "stats")
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in result.stderr


def test_retry_for_zero_turns_retries_off(backend, cli):
    seen: list[Cache] = []
    original = cli_module.Settings.cache

    def recording(self, *args, **kwargs):
        seen.append(original(self, *args, **kwargs))
        return seen[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli_module.Settings, "cache", recording)
        result = cli("--retry-for", "0", "--timeout", "3", "stats")
    assert result.exit_code == 1 and "does not exist" in result.output, result.output
    assert seen[0].store.retry.attempts == 0


def test_migrate_refuses_a_cache_that_does_not_exist_and_writes_nothing(
    backend, cli, client, cache_name
):
    # Found in review (mended): a misspelled --cache was answered "0 node pod sets converted;
    # the cache is at schema 2", exit 0, while the real cache stayed on schema 1.
    typo = f"{cache_name}-typo"
    result = cli("--cache", typo, "migrate")
    assert result.exit_code == 1, result.output
    assert f"cache {typo!r} does not exist" in result.output
    assert "converted" not in result.output
    assert list(client.scan_iter(match=Cache(client, typo).keys.pattern)) == []


def test_global_options_work_after_the_subcommand(backend, client, cache_name, request, tmp_path):
    """kubectl users put flags anywhere: `schedcache load --redis URL --cache prod FILE`."""
    url = backend_url(backend, request)
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "List", "items": [node_manifest("n1", "2", "1Gi")]}))
    try:
        if backend == "fakeredis":
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(cli_module.Settings, "client", lambda self: client)
                loaded = CliRunner().invoke(main, ["load", str(path), "--cache", cache_name])
        else:
            loaded = CliRunner().invoke(
                main, ["load", "--redis", url, "--cache", cache_name, "--timeout=3", str(path)]
            )
        assert loaded.exit_code == 0, loaded.output
        assert Cache(client, cache_name).node_count() == 1
    finally:
        Cache(client, cache_name).clear()


def test_the_cache_name_comes_from_schedcache_cache(backend, cli, client, cache_name, monkeypatch):
    if backend == "fakeredis":
        monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    Cache(client, cache_name).add_node(make_node("n1", "1", "1Gi"))
    result = CliRunner(env={"SCHEDCACHE_CACHE": cache_name}).invoke(
        main, ["stats", *([] if backend == "fakeredis" else ["--redis", cli.url])]
    )
    assert result.exit_code == 0, result.output
    assert "nodes\t1" in result.stdout


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["load", "--redis", "U", "--cache", "c", "F"],
            ["--redis", "U", "--cache", "c", "load", "F"],
        ),
        (["dump", "-o", "wide", "--cache=c"], ["--cache=c", "dump", "-o", "wide"]),
        (["--cache", "a", "stats", "--cache", "b"], ["--cache", "a", "--cache", "b", "stats"]),
        # A subcommand option's value is never taken for a global option...
        (
            ["worker", "expiry", "--replica", "--cache", "--once"],
            ["worker", "expiry", "--replica", "--cache", "--once"],
        ),
        (["events", "--since", "--redis"], ["events", "--since", "--redis"]),
        # ... nor anything after "--".
        (["history", "node", "--", "--cache"], ["history", "node", "--", "--cache"]),
        (["nosuch", "--cache", "c"], ["--cache", "c", "nosuch"]),
    ],
)
def test_global_options_are_hoisted_exactly(argv, expected):
    assert hoist_global_options(main, argv) == expected


@pytest.mark.parametrize(
    ("variable", "value", "option"),
    [
        ("SCHEDCACHE_TIMEOUT", "abc", "--timeout"),
        ("SCHEDCACHE_CACHE", "bad name!", "--cache"),
        ("SCHEDCACHE_RETRY_FOR", "-1", "--retry-for"),
        ("SCHEDCACHE_WAIT_REPLICAS", "-1", "--wait-replicas"),
        ("SCHEDCACHE_WAIT_TIMEOUT", "0", "--wait-timeout"),
        ("SCHEDCACHE_READ_FROM", "bogus", "--read-from"),
    ],
)
def test_a_bad_value_from_the_environment_names_the_variable(variable, value, option):
    # Found in review (mended): `SCHEDCACHE_TIMEOUT=abc schedcache get nodes` said "Invalid
    # value for '--timeout'", an option the user never typed.
    result = CliRunner(env={variable: value}).invoke(main, ["get", "nodes"])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}' (from ${variable}): " in result.stderr
    assert "Traceback" not in result.output


def test_a_bad_cache_variable_refuses_no_command_that_does_not_read_it():
    # Found in review (stop 58, mended): `demo` (which ignores $SCHEDCACHE_CACHE: README),
    # `completion` (which prints a script) and a command's --help were refused, exit 2, for the
    # variable's bad name.
    runner = CliRunner(env={"SCHEDCACHE_CACHE": "bad name!"})
    result = runner.invoke(main, ["completion", "bash"])
    assert result.exit_code == 0 and "_schedcache_completion" in result.stdout, result.output
    result = runner.invoke(main, ["demo", "--nodes", "2", "--pods", "3"])
    assert result.exit_code == 0 and "Nodes of cache 'demo'" in result.stdout, result.output
    result = runner.invoke(main, ["stats", "--help"])  # (help reads no cache either)
    assert result.exit_code == 0 and "Usage: main stats" in result.stdout, result.output
    result = runner.invoke(main, ["stats"])
    assert result.exit_code == 2
    assert "Invalid value for '--cache' (from $SCHEDCACHE_CACHE)" in result.stderr


def test_a_bad_value_on_the_command_line_names_only_the_option():
    result = CliRunner(env={"SCHEDCACHE_TIMEOUT": "3"}).invoke(
        main, ["--timeout", "abc", "get", "nodes"]
    )
    assert result.exit_code == 2
    assert "Invalid value for '--timeout': 'abc' is not a number of seconds" in result.stderr
    assert "SCHEDCACHE_TIMEOUT" not in result.stderr


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("notaurl", "notaurl: no scheme (no '://'); use one of redis://"),
        ("http://127.0.0.1:6379", "unsupported scheme 'http'"),
        ("redis://127.0.0.1:abc/0", "Port could not be cast to integer value as 'abc'"),
        ("redis+sentinel://127.0.0.1:26379", "no master name"),
        ("redis+cluster://", "no host:port given"),
    ],
)
def test_a_malformed_redis_url_is_a_usage_error(url, reason):
    # Found in review (mended): `schedcache --redis notaurl get nodes` exited 1, as if a server
    # had not answered.
    result = CliRunner().invoke(main, ["--redis", url, "get", "nodes"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--redis': " in result.stderr
    assert reason in result.stderr
    assert "cannot reach" not in result.stderr


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis://127.0.0.1:1/1x", "database '1x' is not a number"),
        ("redis://127.0.0.1:1/0/1", "database '0/1' is not a number"),  # (redis-py: 1)
        ("redis://127.0.0.1:1/1?db=2", "two databases named: /1 and ?db=2"),
        ("redis://127.0.0.1:1/0#primary", "a '#' part means nothing in a Redis URL"),
        ("redis+cluster://127.0.0.1:1/5", "'/5': Redis Cluster has database 0 only"),
        ("redis+sentinel://127.0.0.1:1/primary/1x", "database '1x' is not a number"),
        ("redis+sentinel://127.0.0.1:1/primary/0/extra", "'extra' after the database"),
        ("redis+sentinel://127.0.0.1:1/primary/1?db=2", "two databases named: /1 and ?db=2"),
        # Found in review (helper-84, mended): a '#' on Sentinel and Cluster URLs was taken into
        # the master's name (or refused as a database), and of two ?db= one was used silently.
        ("redis+sentinel://127.0.0.1:1/primary#x", "a '#' part means nothing in a Redis URL"),
        ("redis+cluster://127.0.0.1:1/#x", "a '#' part means nothing in a Redis URL"),
        ("redis://127.0.0.1:1/?db=1&db=2", "two databases named: ?db=1 and ?db=2"),
        ("redis+sentinel://127.0.0.1:1/primary?db=1&db=2", "option 'db' given twice"),
        # Found in review (stop 58, mended): redis-py used the first of two values, the checks
        # the last (?decode_responses=true&decode_responses=false: a traceback at the first
        # read); a timeout that is no number of seconds ended in a traceback (inf), read as an
        # unreachable server (0, -1) or hung connect_async (nan).
        (
            "redis://127.0.0.1:1/0?decode_responses=true&decode_responses=false",
            "option 'decode_responses' given twice; give it once",
        ),
        ("redis://127.0.0.1:1/0?encoding=latin-1&encoding=utf-8", "option 'encoding' given twice"),
        ("redis://127.0.0.1:1/0?socket_timeout=inf", "'inf': must be more than 0 and at most"),
        ("redis://127.0.0.1:1/0?socket_timeout=1e400", "'1e400': must be more than 0"),
        ("redis://127.0.0.1:1/0?socket_timeout=0", "'socket_timeout': '0': must be more than 0"),
        ("redis://127.0.0.1:1/0?socket_timeout=-1", "'-1': must be more than 0"),
        ("redis://127.0.0.1:1/0?socket_timeout=nan", "'nan': must be more than 0"),
        ("unix:///tmp/r.sock?socket_connect_timeout=x", "'x' is not a number of seconds"),
    ],
)
@pytest.mark.parametrize("where", ["option", "environment"])
def test_a_url_part_that_cannot_be_honoured_is_a_usage_error(url, reason, where, monkeypatch):
    # Found in review (mended): each was dropped without a word (database 0 used, or the
    # first database named), so the cache read and wrote another database than the URL says.
    # (Port 1 refuses: unmended, each failed as "cannot reach", exit status 1.)
    monkeypatch.delenv(ENV_URL, raising=False)
    if where == "option":
        result = CliRunner().invoke(main, ["--redis", url, "get", "nodes"])
        named = "'--redis'"
    else:
        result = CliRunner(env={ENV_URL: url}).invoke(main, ["get", "nodes"])
        named = f"'--redis' (from ${ENV_URL})"
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {named}: " in result.stderr
    assert reason in result.stderr
    assert "cannot reach" not in result.stderr


def test_a_malformed_redis_url_from_the_environment_names_the_variable():
    result = CliRunner(env={ENV_URL: "notaurl"}).invoke(main, ["get", "nodes"])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--redis' (from ${ENV_URL}): notaurl: no scheme" in result.stderr


def test_a_malformed_redis_url_never_shows_its_password():
    result = CliRunner().invoke(main, ["--redis", "redis://admin:s3c/ret@h:1x/0", "stats"])
    assert result.exit_code == 2, result.output
    assert "redis://admin:***@" in result.stderr
    assert "s3c" not in result.output and "ret@" not in result.output


def test_a_database_index_the_server_lacks_is_named_as_such():
    # Found in review (mended): "cannot reach Redis at redis://.../99: DB index is out of
    # range", though the server answered. Real Redis only: the embedded fakeredis has no URL
    # to name a database in, and a Cluster has database 0 alone.
    client = real_client()
    databases = int(client.config_get("databases")["databases"])
    client.close()
    url = urlsplit(REAL_REDIS_URL)._replace(path=f"/{databases}").geturl()
    result = CliRunner().invoke(main, ["--redis", url, "--cache", "clihelper-db", "stats"])
    assert result.exit_code == 1, result.output
    assert (
        f"Error: Redis at {url} has no database {databases} (its 'databases' setting is lower)"
        in result.output
    )
    assert "cannot reach" not in result.output


@pytest.mark.parametrize(
    "options", [["--cache", "x"], ["--redis", "redis://127.0.0.1:1/0", "--timeout", "3"]]
)
def test_global_options_without_a_command_print_the_usage_screen_as_no_arguments_do(options):
    # Found in review (mended): `schedcache --cache X` printed a bare "Missing command.", where
    # `schedcache` alone prints the usage screen whole.
    bare = CliRunner().invoke(main, [])
    result = CliRunner().invoke(main, options)
    assert result.exit_code == bare.exit_code
    assert result.output == bare.output
    assert "Commands:" in result.output and "Missing command" not in result.output
    assert result.output.startswith("Usage: main [OPTIONS] COMMAND [ARGS]...")


def _interrupted(*_: object, **__: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("argv", [["get", "nodes"], ["get", "--cache", "c", "nodes"]])
def test_ctrl_c_while_a_command_module_is_imported_exits_130(argv, monkeypatch):
    # Found in review (mended): Ctrl-C in the ~50 ms click spends importing the command's
    # module ended in "Aborted!", exit status 1, as for a failure.
    monkeypatch.delitem(main.commands, "get", raising=False)  # imported by an earlier test
    monkeypatch.setitem(cli_module.COMMANDS, "get", (_interrupted, "get"))
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 130, result.output
    assert "Aborted" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["extender", "sync", "worker"])
def test_ctrl_c_before_a_long_running_command_set_its_handlers_exits_0(command, monkeypatch):
    # Found in review (mended): the commands that run until stopped end with status 0 on
    # SIGINT (README), but a Ctrl-C in their first second, before their own handlers, got 130.
    monkeypatch.delitem(main.commands, command, raising=False)
    monkeypatch.setitem(cli_module.COMMANDS, command, (_interrupted, command))
    result = CliRunner().invoke(main, [command])
    assert result.exit_code == 0, result.output
    assert "Aborted" not in result.output and "Traceback" not in result.output


# The console script as pip writes it for `schedcache = "schedcache.cli:main"`, run with a
# finder that sends the process SIGINT as MODULE starts to be imported (the file FIRED says it
# did): a Ctrl-C at that moment of the start-up, every time.
CTRL_C_DURING_IMPORT = """
import os, pathlib, signal, sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["MODULE"]:
            sys.meta_path.remove(self)
            pathlib.Path(os.environ["FIRED"]).touch()
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
from schedcache.cli import run
sys.exit(run())
"""


@pytest.mark.parametrize(
    "module", ["schedcache.cli.app", "click", "redis", "schedcache.cache", "msgpack"]
)
@pytest.mark.parametrize(
    ("argv", "status"),
    [(["stats"], 130), (["--redis", "redis://127.0.0.1:1/0", "worker", "expiry"], 0)],
    ids=["stats", "worker"],
)
def test_ctrl_c_while_the_command_line_loads_ends_it_quietly(module, argv, status, tmp_path):
    # Found in review (mended): a Ctrl-C in the half second the package took to import
    # (schedcache/__init__.py imported the whole cache before the CLI could catch anything)
    # printed a Python traceback; it ends as a Ctrl-C later does: the line after the terminal's
    # ^C, 130 (0 for a command that runs until stopped).
    fired = tmp_path / "fired"
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_DURING_IMPORT, *argv],
        env={**os.environ, "MODULE": module, "FIRED": str(fired)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert fired.exists(), f"{module} was not imported after the CLI started"
    assert (done.returncode, done.stdout, done.stderr) == (status, "", "\n"), done.stderr


# Run as the console script (the file pip writes) and as `python -m schedcache.cli`, with a
# sitecustomize.py that makes a Ctrl-C happen at one moment, as CTRL_C says:
# * "string": while the command line loads, KeyboardInterrupt leaves code run from a string
#   (dataclasses build their methods so: where a Ctrl-C in that half second often lands);
# * "teardown": SIGINT once the command has ended: from an exit handler, and from the
#   interpreter's teardown, after Python gave SIGINT back to its default action.
CTRL_C_AT = """
import atexit, builtins, os, pathlib, signal, sys

if os.environ["CTRL_C"] == "string":
    real_exec = builtins.exec

    def exec_interrupted(source, *args, **kwargs):
        if isinstance(source, str) and source:
            builtins.exec = real_exec
            pathlib.Path(os.environ["FIRED"]).touch()
            real_exec("raise KeyboardInterrupt")
        return real_exec(source, *args, **kwargs)

    class Arm:
        def find_spec(self, name, path=None, target=None):
            if name == "schedcache.cli.app":
                sys.meta_path.remove(self)
                builtins.exec = exec_interrupted
            return None

    sys.meta_path.insert(0, Arm())

if os.environ["CTRL_C"] == "teardown":
    class CtrlCWhenFreed:
        def __del__(self):
            pathlib.Path(os.environ["FIRED"]).touch()
            os.kill(os.getpid(), signal.SIGINT)

    freed_at_teardown = CtrlCWhenFreed()
    atexit.register(os.kill, os.getpid(), signal.SIGINT)

if os.environ["CTRL_C"] == "started":
    class Started:
        def find_spec(self, name, path=None, target=None):
            if name == "schedcache.cli.app":
                sys.meta_path.remove(self)
                pathlib.Path(os.environ["FIRED"]).touch()
            return None

    sys.meta_path.insert(0, Started())
"""

CONSOLE_SCRIPT = """import re
import sys
from schedcache.cli import run
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(run())
"""

UNREACHABLE = ["--redis", "redis://127.0.0.1:1/0"]


def start_with_ctrl_c_at(
    moment: str, entry: str, argv: list[str], tmp_path: Path
) -> subprocess.Popen[str]:
    """The command line started by ``entry`` ("script" or "module") with ``argv``, and a Ctrl-C
    at ``moment`` (CTRL_C_AT; "started" only writes FIRED when the command line loads)."""
    (tmp_path / "sitecustomize.py").write_text(CTRL_C_AT)
    (tmp_path / "schedcache-script").write_text(CONSOLE_SCRIPT)
    root = str(Path(__file__).parent.parent)
    path = os.pathsep.join(filter(None, [str(tmp_path), root, os.environ.get("PYTHONPATH")]))
    first = [str(tmp_path / "schedcache-script")] if entry == "script" else ["-m", "schedcache.cli"]
    return subprocess.Popen(
        [sys.executable, *first, *argv],
        env={**os.environ, "PYTHONPATH": path, "CTRL_C": moment, "FIRED": str(tmp_path / "fired")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("entry", ["script", "module"])
@pytest.mark.parametrize(
    ("argv", "status"), [(["stats"], 130), ([*UNREACHABLE, "worker", "expiry"], 0)]
)
def test_both_entry_points_end_a_ctrl_c_while_loading_with_the_documented_status(
    entry, argv, status, tmp_path
):
    # Found in review (mended): `python -m schedcache.cli` ended by SIGINT (-2, whatever the
    # status: CPython's runpy path, 3.11-3.13, once a KeyboardInterrupt left code run from a
    # string, even one caught) where the console script gave 130; `worker` -2 for 0.
    process = start_with_ctrl_c_at("string", entry, argv, tmp_path)
    stdout, stderr = process.communicate(timeout=60)
    assert (tmp_path / "fired").exists(), "no string was run while the command line loaded"
    assert (process.returncode, stdout, stderr) == (status, "", "\n"), stderr


@pytest.mark.parametrize("entry", ["script", "module"])
def test_a_ctrl_c_once_the_command_has_ended_changes_its_status_no_more(entry, tmp_path):
    # Found in review (mended): a Ctrl-C while the interpreter tore down after an error turned
    # exit 1 into -2 (Python gives SIGINT back to its default action then), and one in an exit
    # handler printed "Exception ignored ..." and a traceback.
    process = start_with_ctrl_c_at("teardown", entry, [*UNREACHABLE, "stats"], tmp_path)
    stdout, stderr = process.communicate(timeout=60)
    assert (tmp_path / "fired").exists(), "the interpreter's teardown freed no object"
    assert (process.returncode, stdout) == (1, ""), stderr
    assert stderr.startswith("Error: cannot reach Redis") and stderr.count("\n") == 1, stderr


@pytest.mark.parametrize("entry", ["script", "module"])
def test_a_ctrl_c_at_any_moment_after_start_up_ends_without_a_traceback(entry, tmp_path):
    # A real SIGINT at a few delays once the command line starts loading (before that, Python's
    # own start-up: site, runpy, the console script's `import re`, where no code of ours runs):
    # 130, or 1 where the command had already failed (Redis unreachable); never a traceback,
    # never death by SIGINT.
    outcomes = []
    for delay in (0.0, 0.03, 0.1, 0.25):
        fired = tmp_path / "fired"
        fired.unlink(missing_ok=True)
        process = start_with_ctrl_c_at("started", entry, [*UNREACHABLE, "stats"], tmp_path)
        deadline = time.monotonic() + 30
        while not fired.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
        outcomes.append((delay, process.returncode, stderr))
        assert fired.exists() and stdout == "", outcomes
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, outcomes
        assert (process.returncode, stderr) == (130, "\n") or (
            process.returncode == 1 and stderr.startswith("Error: cannot reach Redis")
        ), outcomes


def test_the_console_scripts_start_where_a_ctrl_c_is_handled():
    import tomllib

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {
        "schedcache": "schedcache.cli:run",
        "kubectl-schedcache": "schedcache.cli:kubectl_plugin",
    }


def test_ctrl_c_in_a_command_that_does_not_handle_it_exits_130(backend, cli, monkeypatch):
    monkeypatch.setattr(cli_module.Settings, "existing_cache", _interrupted)
    result = cli("stats")
    assert result.exit_code == 130, result.output
    assert "Aborted" not in result.output


@pytest.mark.parametrize("argv", [["stats", "--cache"], ["--cache", "x", "dump", "--timeout"]])
def test_a_global_option_that_ends_the_line_without_its_value_is_refused_as_click_does(argv):
    # Found by test_cli_fuzz (mended): moved in front of the subcommand, the option took the
    # subcommand's name for its value and the line read as options without a command.
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert f"Error: Option '{argv[-1]}' requires an argument." in result.stderr
    assert "Commands:" not in result.output and "Missing command" not in result.output
