"""``schedcache events -f``: the lines that arrive after the first table line up under its
header (issue 32 noticed they did not)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from schedcache import Cache
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.cli.inspection import EVENT_COLUMNS
from tests.factories import make_node, make_pod


def follow(client: Any, cache_name: str, monkeypatch: Any, replica: str, *args: str) -> list[str]:
    """``events -f ARGS`` while ``replica`` assumes and binds a pod (BindingFinished: longer
    than any type in the first table); the lines it printed."""
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    calls: list[int] = []
    original = Cache.wait_for_events

    def wait(self: Cache, last: str, timeout: float = 1.0) -> Any:
        calls.append(1)
        if len(calls) == 1:
            other = Cache(client, cache_name, ttl=10.0, replica=replica)
            pod = make_pod("web-1", "n1", "100m", "1Mi", namespace="prod")
            other.assume_pod(pod)
            other.finish_binding(pod)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return original(self, last, timeout=timeout)

    monkeypatch.setattr(Cache, "wait_for_events", wait)
    result = CliRunner().invoke(main, ["--cache", cache_name, "events", "-f", *args])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def columns(line: str) -> list[int]:
    """Where each of the five columns of ``line`` starts (the last holds spaces)."""
    cells = line.split(maxsplit=4)
    found, at = [], 0
    for cell in cells:
        at = line.index(cell, at)
        found.append(at)
        at += len(cell)
    return found


@pytest.mark.parametrize("replica", ["test", "replica-with-a-longer-name"])
def test_events_follow_lines_line_up_under_the_header_above_them(
    cache: Cache, client: Any, cache_name: str, monkeypatch: pytest.MonkeyPatch, replica: str
) -> None:
    """Before: the first table was aligned and every later line was not (one "   " between
    cells, whatever the widths)."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    cache.add_pod(make_pod("web-0", "n1", "500m", "1Gi", namespace="prod"))
    lines = follow(client, cache_name, monkeypatch, replica)
    headers = [i for i, line in enumerate(lines) if line.split()[:2] == ["ID", "TYPE"]]
    # A replica name wider than the column widens it under a header printed again.
    assert headers == ([0] if replica == "test" else [0, 3]), "\n".join(lines)
    rows = [line for line in lines if line.split()[:2] != ["ID", "TYPE"]]
    assert [row.split()[1] for row in rows] == [
        "NodeAdded",
        "PodAdded",
        "PodAssumed",
        "BindingFinished",
    ]
    header = lines[0]
    for i, line in enumerate(lines):
        if i in headers:
            header = line
            assert header.split(maxsplit=4)[4] == EVENT_COLUMNS[4]
            continue
        assert columns(line) == columns(header), "\n".join(lines)


def test_events_follow_without_headers_keeps_the_first_rows_columns(
    cache: Cache, client: Any, cache_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    lines = follow(client, cache_name, monkeypatch, "test", "--no-headers")
    assert [line.split()[1] for line in lines] == ["NodeAdded", "PodAssumed", "BindingFinished"]
    assert columns(lines[1]) == columns(lines[0]) == columns(lines[2]), "\n".join(lines)
