"""What the CLI prints is text: NUL bytes (the zone key ``region:\\0:zone``), escape sequences,
bidi overrides, lone surrogates and rich markup in names come out escaped, never raw, so
``schedcache events | grep NodeAdded`` sees text and a manifest cannot rewrite the terminal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner, Result

from schedcache import Cache
from schedcache.cli import settings as cli_settings
from schedcache.cli.app import main
from schedcache.cli.text import node_status, one_line, printable
from schedcache.model.values import Node, Resource
from schedcache.store.connection import ENV_URL
from tests.conftest import backend_url
from tests.factories import make_node, make_pod

ROOT = Path(__file__).resolve().parent.parent
ZONE = {"topology.kubernetes.io/region": "eu", "topology.kubernetes.io/zone": "eu-1"}
# Names a manifest can carry (models accept them): markup, an ANSI escape, a bidi override.
NASTY_NODES = ["a[/]", "[bold]b", "c\x1b[2Jd", "e\u202ef", "g\x7fh"]


@pytest.fixture
def cli(backend, client, cache_name, monkeypatch, request) -> Iterator:
    monkeypatch.delenv(ENV_URL, raising=False)
    if backend == "fakeredis":
        monkeypatch.setattr(cli_settings, "connect", lambda url=None, **_: client)
    url = backend_url(backend, request)

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, ["--redis", url, "--cache", cache_name, *args])

    return run


def raw_control_characters(data: bytes) -> set[int]:
    """Bytes below 0x20 other than tab and newline, and DEL."""
    return {b for b in data if (b < 0x20 and b not in (0x09, 0x0A)) or b == 0x7F}


def populate(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "8Gi", labels=ZONE))
    for name in NASTY_NODES:
        cache.add_node(make_node(name, "1", "1Gi", labels=ZONE))
    cache.add_pod(make_pod("web-0", "a[/]", "100m", "1Mi", namespace="prod"))
    cache.add_pod(make_pod("x\x1b]0;pwned\x07", "n1", "100m", "1Mi", namespace="prod"))


def test_printable_escapes_what_a_terminal_or_grep_would_trip_on():
    assert printable("eu:\x00:eu-1") == "eu:\\x00:eu-1"
    assert printable("c\x1b[2Jd") == "c\\x1b[2Jd"
    assert printable("e\u202ef") == "e\\u202ef"
    assert printable("lone\udc80") == "lone\\udc80"
    assert printable("tab\tnew\nline") == "tab\\x09new\\x0aline"
    assert printable("plain, ünïcode and spaces [ok]") == "plain, ünïcode and spaces [ok]"
    assert one_line("while parsing\n  in line 1\n\nfound \x00") == (
        "while parsing; in line 1; found \\x00"
    )


@pytest.mark.parametrize(
    ("conditions", "cordoned", "expected"),
    [
        ([{"type": "Ready", "status": "True"}], False, "Ready"),
        ([{"type": "Ready", "status": "False"}], False, "NotReady"),
        ([{"type": "Ready", "status": "Unknown"}], False, "Unknown"),
        ([{"type": "MemoryPressure", "status": "False"}], False, "Unknown"),
        ([], False, "Unknown"),
        ([{"type": "Ready", "status": "True"}], True, "Ready,SchedulingDisabled"),
        ([{"type": "Ready", "status": "False"}], True, "NotReady,SchedulingDisabled"),
    ],
)
def test_node_status_is_kubectls(conditions, cordoned, expected):
    manifest = {"kind": "Node", "metadata": {"name": "n"}, "spec": {"unschedulable": cordoned}}
    manifest["status"] = {"allocatable": {"cpu": "1"}, "conditions": conditions}
    node = Node.from_k8s(manifest)
    assert node_status(SimpleNamespace(node=node, allocatable=Resource())) == expected


def test_entries_without_a_node_are_ghosts_or_placeholders():
    assert node_status(SimpleNamespace(node=None, allocatable=Resource(milli_cpu=1))) == "Ghost"
    assert node_status(SimpleNamespace(node=None, allocatable=Resource())) == "Placeholder"


def test_events_output_is_text_with_the_zone_key_as_region_slash_zone(cache, cli):
    populate(cache)
    result = cli("events")
    assert result.exit_code == 0, result.output
    data = result.stdout_bytes
    assert b"\x00" not in data and raw_control_characters(data) == set()
    added = [line for line in result.stdout.splitlines() if " NodeAdded " in line]
    assert len(added) == 1 + len(NASTY_NODES)
    assert "zone=eu/eu-1" in added[0].split()  # region/zone, not the raw key
    assert any(line.split()[4] == "c\\x1b[2Jd" for line in added)
    pod = next(
        line for line in result.stdout.splitlines() if "PodAdded" in line and "\\x1b]" in line
    )
    assert pod.split()[4] == "prod/x\\x1b]0;pwned\\x07"


@pytest.mark.parametrize("args", [["dump", "-o", "wide"], ["replay", "-o", "wide"], ["verify"]])
def test_tables_show_markup_and_escapes_literally(cache, cli, args):
    populate(cache)
    result = cli(*args)
    assert result.exit_code == 0, result.output
    assert raw_control_characters(result.stdout_bytes) == set()
    if args[0] != "verify":
        names = [line.split()[0] for line in result.stdout.splitlines()[1:-1]]
        assert sorted(names) == sorted(["n1", *map(printable, NASTY_NODES)])


def test_history_and_diff_escape_names(cache, cli):
    populate(cache)
    first, last = next(cache.events()).id, list(cache.events())[-1].id
    for args in (["history", "node", "c\x1b[2Jd"], ["diff", first, last]):
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert raw_control_characters(result.stdout_bytes) == set()
        assert "\\x1b" in result.stdout


def test_demo_keeps_and_shows_nodes_with_markup_names(backend, client, cache_name, monkeypatch):
    """The embedded demo with --keep prints the nodes already there: names with markup and
    escapes used to crash it."""
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.setattr(cli_settings, "connect", lambda url=None, **_: client)
    cache = Cache(client, cache_name)
    populate(cache)
    try:
        result = CliRunner().invoke(
            main, ["--cache", cache_name, "demo", "--keep", "--nodes", "2", "--pods", "4"]
        )
        assert result.exit_code == 0, result.output
        assert "a[/]" in result.stdout and "[bold]b" in result.stdout
        assert "c\\x1b[2Jd" in result.stdout
        assert raw_control_characters(result.stdout_bytes) == set()
    finally:
        cache.clear()


def test_events_piped_into_grep_is_text(backend, cache, cli, request):
    """The issue's pipeline: grep used to say "binary file matches". On a server, in a shell;
    the embedded backend lives in one process, so there the CLI's output is piped to grep."""
    populate(cache)
    if backend == "fakeredis":
        events = cli("events")
        assert events.exit_code == 0, events.output
        result = subprocess.run(
            ["grep", "NodeAdded"], input=events.stdout_bytes, capture_output=True, timeout=60
        )
    else:
        url = backend_url(backend, request)
        command = f"{sys.executable} -m schedcache.cli --redis '{url}' --cache {cache.name} events"
        result = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command} | grep NodeAdded"],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=60,
        )
    assert result.returncode == 0, result.stderr
    assert b"binary file matches" not in result.stdout + result.stderr
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 1 + len(NASTY_NODES) and all("NodeAdded" in line for line in lines)
    assert raw_control_characters(result.stdout) == set()
