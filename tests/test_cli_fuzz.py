"""Every command fed bad arguments and malformed files: never a traceback, a non-zero exit with
exactly one ``Error:`` line (alone on stderr, or after click's usage text), only printable
characters, and Redis exactly as before (every key of the cache compared).

Runs on every backend. The embedded fakeredis is a new server per ``connect()``, so there the
CLI is pointed at the fixture's client; on Redis and the Cluster it connects by URL as a user's
shell would.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcache import Cache
from schedcache.cli import settings as cli_settings
from schedcache.cli.app import main
from schedcache.store.connection import ENV_URL
from tests.conftest import backend_url
from tests.factories import keyspace, make_node, make_pod, node_manifest, pod_manifest

Run = Callable[..., Result]


def populate(cache: Cache) -> None:
    """Nodes (one with a zone, so its key holds a NUL), added, assumed and ghost-held pods."""
    zone = {"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": "z"}
    cache.add_node(make_node("n1", "4", "8Gi", labels=zone))
    cache.add_node(make_node("gone", "2", "1Gi"))
    cache.add_pod(make_pod("web-0", "n1", "500m", "1Gi", namespace="prod"))
    cache.add_pod(make_pod("db-0", "gone", "1", "1Gi", namespace="prod"))
    cache.remove_node("gone")
    pod = make_pod("web-1", "n1", "250m", "1Gi", namespace="prod")
    cache.assume_pod(pod)
    cache.finish_binding(pod)  # a deadline ttl seconds from now: nothing expires meanwhile


@pytest.fixture
def cli(backend, client, cache, cache_name, monkeypatch, request) -> Iterator[Run]:
    """``cli(*args, input=None)``: ``schedcache --redis <backend> --cache <cache> *args``."""
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.delenv("SCHEDCACHE_CACHE", raising=False)
    if backend == "fakeredis":
        real_connect = cli_settings.connect
        monkeypatch.setattr(
            cli_settings,
            "connect",
            lambda url=None, **kw: client if url == "embedded" else real_connect(url, **kw),
        )
    url = backend_url(backend, request)
    populate(cache)

    def run(*args: str, input: str | bytes | None = None) -> Result:
        return CliRunner().invoke(main, ["--redis", url, "--cache", cache_name, *args], input=input)

    yield run


def assert_clean_failure(result: Result) -> None:
    """Exit 1 with one ``Error:`` line on stderr, or click's usage error (exit 2): one
    ``Error:`` line, or the whole usage screen for options without a command."""
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.exit_code in (1, 2), result.output
    if result.exit_code == 2 and is_usage_screen(result.stderr):
        assert_printable(result)
        return
    # One Error: line, or kubectl's NotFound line per name that does not exist (get, describe).
    missing = "Error from server (NotFound): "
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    if not errors and result.stderr.startswith(missing):
        errors = [line for line in result.stderr.splitlines() if line.startswith(missing)]
    else:
        assert len(errors) == 1, result.stderr
    if result.exit_code == 1:
        assert result.stderr.splitlines() == errors, result.stderr
    assert_printable(result)


def is_usage_screen(text: str) -> bool:
    """The top-level usage screen: what `schedcache` alone and `schedcache --cache X` print
    (found in review: the second said a bare "Missing command.")."""
    return text.startswith("Usage: main [OPTIONS] COMMAND") and "\nCommands:\n" in text


def assert_printable(result: Result) -> None:
    for stream in (result.stdout, result.stderr):
        assert all(c in "\n\t" or c.isprintable() for c in stream), repr(stream)


def unchanged(cache: Cache, run: Callable[[], Result]) -> Result:
    """Run, and check that no key of the cache changed."""
    before = keyspace(cache.client, cache.keys.pattern)
    result = run()
    assert keyspace(cache.client, cache.keys.pattern) == before, result.output
    return result


BAD_ARGUMENTS = [
    # events
    ["events", "--since", "bogus"],
    ["events", "--since", "1-x"],
    ["events", "--since", "99999999999999999999999-0"],
    ["events", "--since", "\x1b[2J"],
    ["events", "--count", "0"],
    ["events", "--count", "-1"],
    ["events", "--count", "many"],
    # replay, diff
    ["replay", "--until", "bogus"],
    ["replay", "--until", "1-0"],
    ["replay", "-o", "xml"],
    ["diff", "1-0", "bogus"],
    ["diff", "bogus", "1-0"],
    ["diff", "1-0", "2-0"],
    ["diff", "1-0"],
    # get, history
    ["get", "pod", "nope/nope"],
    ["get", "pod", "no-such-uid"],
    ["get", "pod", "\udcff"],
    ["get", "pod", ""],
    ["get", "pod", "a\x00b"],
    ["get", "node", "nonode"],
    ["get", "pods", "-o", "jsonpath={range .items[*]}"],
    ["get", "pods", "--field-selector", "spec.hostIP=1"],
    ["get", "pods", "-l", "a b"],
    ["get", "services"],
    ["describe", "node", "nonode"],
    ["describe", "pod", "nope"],
    ["events", "--since", "5x"],
    ["history", "pod", "nope/nope"],
    ["history", "pod", "nope"],
    ["history", "node", "nonode"],
    ["history", "node", "\x1b[31m"],
    # load (files in test_bad_files_change_nothing)
    ["load", "/nonexistent/file.json"],
    ["load", "--batch-size", "0", "-"],
    ["load", "--batch-size", "-1", "-"],
    ["load", "--batch-size", "x", "-"],
    # demo: the cache holds data, and impossible sizes
    ["demo"],
    ["demo", "--nodes", "0"],
    ["demo", "--pods", "-1"],
    ["demo", "--replicas", "0"],
    ["demo", "--ttl", "nan"],
    ["demo", "--ttl", "inf"],
    ["demo", "--ttl", "-1"],
    ["demo", "--seed", "-1"],
    ["demo", "--mode", "x"],
    ["demo", "--keep", "--reset"],
    # workers
    ["worker", "expiry", "--interval", "0"],
    ["worker", "expiry", "--interval", "nan"],
    ["worker", "expiry", "--batch", "0"],
    ["worker", "expiry", "--replica", "", "--once"],
    ["worker", "expiry", "--replica", "a\x00", "--once"],
    ["worker", "expiry", "--replica", "-", "--once"],
    ["worker", "expiry", "--metrics-port", "70000"],
    ["metrics", "--port", "-1"],
    ["metrics", "--port", "70000"],
    # compact without a checkpoint, and a negative keep
    ["compact"],
    ["compact", "--keep", "-1"],
    # global options, before and after the subcommand
    ["--timeout", "nan", "stats"],
    ["stats", "--timeout", "inf"],
    ["--timeout", "-1", "stats"],
    ["--timeout", "0", "stats"],
    ["--timeout", "1e9", "stats"],
    ["--retry-for", "nan", "stats"],
    ["--wait-replicas", "-1", "stats"],
    ["stats", "--wait-timeout", "0"],
    ["--cache", "bad name", "stats"],
    ["stats", "--cache", ""],
    ["--log-level", "LOUD", "stats"],
    ["stats", "--redis", "bogus://x"],
    ["--redis", "redis://127.0.0.1:1/0", "stats"],
    ["nosuch"],
    ["stats", "--nosuch"],
    ["stats", "--\x1b[2J"],
]


@pytest.mark.parametrize(
    "args", BAD_ARGUMENTS, ids=lambda a: " ".join(a).encode("unicode_escape").decode()
)
def test_bad_arguments_are_one_error_line_and_change_nothing(cli, cache, args):
    result = unchanged(cache, lambda: cli(*args, input=""))
    assert_clean_failure(result)


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


BAD_FILES: dict[str, bytes] = {
    "binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe",
    "utf-16 without a BOM": json.dumps({"kind": "List", "items": []}).encode("utf-16-le"),
    "half a BOM": b"\xff\xfe{",
    "not json or yaml": b"{ not json",
    "broken json stream": b'{"kind": "Pod"} {"kind"',
    "a number": b"5",
    "a list": b"[1, 2]",
    "null": b"null",
    "yaml scalars": b"- a\n- b\n",
    "items not a list": b'{"kind": "List", "items": 5}',
    "items of numbers": b'{"kind": "List", "items": [1, 2]}',
    "watch event of a number": b'{"type": "ADDED", "object": 5}',
    "bad metadata": b'{"type": "DELETED", "object": {"kind": "Pod", "metadata": 5}}',
    "unknown watch type": b'{"type": "EXPLODED", "object": {"kind": "Pod"}}',
    "deep json": deep(100_000).encode(),
    "deep yaml": ("a: " + deep(100_000)).encode(),
    "deep yaml block": ("- " * 100_000 + "x").encode(),
    "alias bomb": (
        "a: &a [" + ",".join("x" * 1000) + "]\nb: [" + ",".join(["*a"] * 1000) + "]\n"
    ).encode(),
    "yaml tags": b"kind: Pod\nmetadata: {name: !!binary aGk=, uid: 2001-12-14}\nspec: !!set {a}\n",
    "huge numbers": json.dumps(
        {
            "kind": "List",
            "items": [
                {**node_manifest("n9", "1e30", "1Ei")},
                {**pod_manifest("p", "n1", "1Ei", "1Mi"), "kind": "Pod"},
                {**pod_manifest("q", "n1", "1", "1Mi"), "spec": {"priority": 2**64}},
                {**node_manifest("n8", "1", "1Gi", images=[(["i"], 2**64)])},
                {**pod_manifest("r", "n1", "1", "1Mi"), "metadata": {"name": 10**400}},
            ],
        }
    ).encode(),
    "lone surrogate names": json.dumps(
        [pod_manifest("a\udc80", "n1", "1", "1Mi"), node_manifest("b\udc80", "1", "1Gi")]
    ).encode(),
    "wrong types everywhere": json.dumps(
        [
            {"kind": "Pod", "metadata": [], "spec": "x"},
            {"kind": "Pod", "metadata": {"name": "x", "uid": "u"}, "spec": {"containers": 5}},
            {"kind": "Node", "metadata": {"name": 5}},
            {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": []}},
            {"kind": "Node", "metadata": {"name": "n"}, "spec": {"unschedulable": "yes"}},
        ]
    ).encode(),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_files_are_reported_and_change_nothing(cli, cache, tmp_path: Path, name):
    path = tmp_path / "input"
    path.write_bytes(BAD_FILES[name])
    for args, stdin in ((["load", str(path)], None), (["load", "-"], BAD_FILES[name])):
        result = unchanged(cache, lambda a=args, s=stdin: cli(*a, input=s))
        assert_clean_failure(result)


def test_replay_before_a_compaction_is_one_error_line(cli, cache):
    first = next(cache.events()).id
    cache.checkpoint()
    cache.compact()
    for args in (["replay", "--until", first], ["diff", first, first]):
        result = unchanged(cache, lambda a=args: cli(*a))
        assert_clean_failure(result)
        assert "was compacted away" in result.stderr


def test_a_redis_error_is_one_error_line(cli, cache):
    # Something that is not a stream where the events are: the cache's own type check names
    # the key and its type (sc_read), or Redis answers WRONGTYPE; one line either way.
    cache.client.delete(cache.keys.events)
    cache.client.set(cache.keys.events, "not a stream")
    for args in (["events"], ["events", "--count", "2"], ["replay"], ["stats"]):
        result = unchanged(cache, lambda a=args: cli(*a))
        assert_clean_failure(result)
        named = f"key {cache.keys.events}: is a string, not a stream" in result.stderr
        assert named or "WRONGTYPE" in result.stderr, (args, result.stderr)


# -- random command lines ------------------------------------------------------------------------

READ_COMMANDS = [
    ["dump"],
    ["dump", "-o", "wide"],
    ["get", "pod"],
    ["events"],
    ["history", "pod"],
    ["history", "node"],
    ["replay"],
    ["diff"],
    ["verify"],
    ["stats"],
    ["load", "-"],
    [],
]
NASTY = [
    "",
    "-",
    "--",
    "0",
    "-1",
    "1-0",
    "0-0",
    "nan",
    "inf",
    "1e309",
    "99999999999999999999999",
    "bogus",
    "n1",
    "prod/web-0",
    "web-1",
    "a[/]",
    "[bold]x",
    "\x00",
    "\x1b[2J",
    "\udcff",
    "\u202e",
    "--since",
    "--until",
    "--count",
    "-o",
    "wide",
    "json",
    "--output=wide",
    "--cache",
    "--timeout",
    "--retry-for",
    "--log-format",
    "--batch-size",
    "-v",
    "pod",
    "node",
]
TOKENS = st.one_of(
    st.sampled_from(NASTY), st.text(alphabet=string.printable + "\x00\x1b\u202e", max_size=12)
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    command=st.sampled_from(READ_COMMANDS),
    tokens=st.lists(TOKENS, max_size=4),
    stdin=st.one_of(st.just(""), st.text(max_size=60), st.binary(max_size=60)),
)
def test_random_command_lines_never_end_in_a_traceback(cli, cache, command, tokens, stdin):
    result = unchanged(cache, lambda: cli(*command, *tokens, input=stdin))
    assert isinstance(result.exception, SystemExit | type(None)), result.exception
    assert "Traceback" not in result.output
    assert_printable(result)
    if result.exit_code != 0:
        assert_clean_failure(result)
