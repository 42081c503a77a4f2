"""``schedcache events -f``: the lines that arrive after the first table line up under its
header (issue 32 noticed they did not)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from schedcache import Cache
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.cli.inspection import EVENT_COLUMNS
from schedcache.store.connection import embedded_client
from tests.conftest import REAL_REDIS_URL, real_client
from tests.factories import make_node, make_pod
from tests.tcp_proxy import FaultyProxy


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


@contextlib.contextmanager
def behind_a_proxy(cache_name: str) -> Iterator[tuple[FaultyProxy, str]]:
    """The real Redis of the tests behind a :class:`FaultyProxy`, and the proxy's URL, with
    cache ``cache_name`` holding one node (its keys deleted afterwards)."""
    client = real_client()
    target = urlsplit(REAL_REDIS_URL)
    proxy = FaultyProxy(target.hostname or "127.0.0.1", target.port or 6379)
    cache = Cache(client, cache_name)
    cache.add_node(make_node("n1", "4", "8Gi"))
    try:
        yield proxy, f"redis://127.0.0.1:{proxy.port}{target.path}"
    finally:
        proxy.release()  # (a reply it holds)
        proxy.close()
        cache.clear()
        client.close()


def lose_redis_while_following(
    args: list[str], cut: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """``schedcache ARGS events -f`` on a cache holding one node, with ``cut``
    making Redis unreachable after the first wait for new events."""
    calls: list[int] = []
    original = Cache.wait_for_events

    def wait(self: Cache, last: str, timeout: float = 1.0) -> Any:
        calls.append(1)
        if len(calls) == 2:
            cut()
        return original(self, last, timeout=0.1)

    monkeypatch.setattr(Cache, "wait_for_events", wait)
    return CliRunner().invoke(main, [*args, "--retry-for", "0", "events", "-f"])


@pytest.mark.parametrize("where", ["fakeredis", "redis"])
def test_events_follow_losing_redis_says_which_redis_it_cannot_reach(
    where: str, cache_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review (mended): `events -f` ended in a bare "Error 111 connecting to ...",
    without the "cannot reach Redis at URL" every other command's message begins with."""
    if where == "fakeredis":
        client: Any = embedded_client()
        monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
        Cache(client, cache_name).add_node(make_node("n1", "4", "8Gi"))
        server = client.connection_pool.connection_kwargs["server"]
        url, args = "embedded", ["--cache", cache_name]
        result = lose_redis_while_following(
            args, lambda: setattr(server, "connected", False), monkeypatch
        )
    else:
        with behind_a_proxy(cache_name) as (proxy, url):
            args = ["--redis", url, "--cache", cache_name]
            result = lose_redis_while_following(args, lambda: proxy.set_down(True), monkeypatch)
    assert result.exit_code == 1, result.output
    assert "NodeAdded" in result.output  # it followed, then lost Redis
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: cannot reach Redis at {url}: ")
