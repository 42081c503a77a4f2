"""``schedcache load`` losing Redis midway: the counts so far and "run it again", not the
library's advice to settle a batch (noticed since stop 49: `load` ended in "settle them with
batch.settle(error.unsettled)", which a CLI user cannot do, and printed no counts)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from schedcache import Cache
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.store.batch import CommandBatch
from schedcache.store.connection import embedded_client
from tests.conftest import REAL_REDIS_URL, real_client
from tests.factories import node_manifest
from tests.tcp_proxy import FaultyProxy

NODES, BATCH = 30, 10


def nodes_file(tmp_path: Path) -> Path:
    """A kubectl List of NODES nodes (`kubectl get nodes -o json`)."""
    items = [node_manifest(f"n{i:02d}", "4", "8Gi") for i in range(NODES)]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def load_cut_after_first_batch(
    args: list[str], path: Path, cut: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """``schedcache ARGS load PATH`` in batches of BATCH, Redis made unreachable as the second
    batch's first command is added (a batch sends each group as it fills: before anything of
    the second batch is sent)."""
    original = CommandBatch.add
    added: list[int] = []

    def add(self: CommandBatch, command: Any) -> Any:
        added.append(1)
        if len(added) == BATCH + 1:
            cut()
        return original(self, command)

    with monkeypatch.context() as patched:
        patched.setattr(CommandBatch, "add", add)
        return CliRunner().invoke(main, [*args, "load", str(path), "--batch-size", str(BATCH)])


@pytest.mark.parametrize("retry_for", ["0", "0.3"])
@pytest.mark.parametrize("where", ["fakeredis", "redis"])
def test_a_load_that_loses_redis_says_how_far_it_got_and_a_rerun_finishes_it(
    where: str,
    retry_for: str,
    cache_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = nodes_file(tmp_path)
    client: Any
    if where == "fakeredis":
        client = embedded_client()
        monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
        server = client.connection_pool.connection_kwargs["server"]
        args, url = ["--cache", cache_name, "--retry-for", retry_for], "embedded"

        def lose() -> None:
            server.connected = False

        def restore() -> None:
            server.connected = True

        proxy = None
    else:
        client = real_client()
        target = urlsplit(REAL_REDIS_URL)
        proxy = FaultyProxy(target.hostname or "127.0.0.1", target.port or 6379)
        url = f"redis://127.0.0.1:{proxy.port}{target.path}"
        args = ["--redis", url, "--cache", cache_name, "--retry-for", retry_for]

        def lose() -> None:
            assert proxy is not None
            proxy.set_down(True)

        def restore() -> None:
            assert proxy is not None
            proxy.set_down(False)

    cache = Cache(client, cache_name)
    try:
        result = load_cut_after_first_batch(args, path, lose, monkeypatch)
        assert result.exit_code == 1, result.output
        assert f"applied: {BATCH} add_node" in result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, result.output
        (error,) = errors
        assert f"Redis at {url}" in error
        assert f": {BATCH} of {NODES} objects applied (and up to {BATCH} more" in error
        assert error.endswith(
            "run the same load again to finish: what the cache already "
            "holds is skipped as unchanged"
        )
        assert "settle" not in result.output and "Traceback" not in result.output
        restore()
        assert cache.node_count() == BATCH  # the first batch, no more
        again = CliRunner().invoke(main, [*args, "load", str(path), "--batch-size", str(BATCH)])
        assert again.exit_code == 0, again.output
        assert f"applied: {NODES - BATCH} add_node" in again.output  # the rest, once
        assert cache.node_count() == NODES
    finally:
        if proxy is not None:
            proxy.release()
            proxy.close()
        cache.clear()
        if where == "redis":
            client.close()
