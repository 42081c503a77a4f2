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
from schedcache.feed import loader
from schedcache.store.batch import CommandBatch
from schedcache.store.connection import embedded_client
from tests.conftest import REAL_REDIS_URL, real_client
from tests.factories import node_manifest
from tests.tcp_proxy import FaultyProxy

NODES, BATCH = 30, 10


def nodes_file(tmp_path: Path, cpu: str = "4") -> Path:
    """A kubectl List of NODES nodes (`kubectl get nodes -o json`)."""
    items = [node_manifest(f"n{i:02d}", cpu, "8Gi") for i in range(NODES)]
    path = tmp_path / f"nodes-{cpu}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def cpus(cache: Cache) -> list[int]:
    """Each node's allocatable CPU (m), by name."""
    nodes = cache.dump().nodes
    return [nodes[name].allocatable.milli_cpu for name in sorted(nodes)]


def load_cut_after_first_batch(
    args: list[str],
    path: Path,
    cut: Callable[[], None],
    where: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """``schedcache ARGS load PATH`` in batches of BATCH, Redis made unreachable as the second
    batch begins: ``where`` "add", as its first command is added (a batch sends each group as
    it fills: before anything of it is sent), or "read", before the reads that plan it (which
    objects the cache holds unchanged)."""
    calls: list[int] = []

    def cut_at_the_second_batch(count: int) -> None:
        calls.append(1)
        if len(calls) == count:
            cut()

    with monkeypatch.context() as patched:
        if where == "add":
            add = CommandBatch.add

            def adding(self: CommandBatch, command: Any) -> Any:
                cut_at_the_second_batch(BATCH + 1)
                return add(self, command)

            patched.setattr(CommandBatch, "add", adding)
        else:
            plan = loader._plan

            def planning(*arguments: Any) -> Any:
                cut_at_the_second_batch(2)
                return plan(*arguments)

            patched.setattr(loader, "_plan", planning)
        return CliRunner().invoke(main, [*args, "load", str(path), "--batch-size", str(BATCH)])


@pytest.mark.parametrize("cut_at", ["add", "read"])
@pytest.mark.parametrize("retry_for", ["0", "0.3"])
@pytest.mark.parametrize("where", ["fakeredis", "redis"])
def test_a_load_that_loses_redis_says_how_far_it_got_and_a_rerun_finishes_it(
    where: str,
    retry_for: str,
    cut_at: str,
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
    # Cut at "read": the nodes are in the cache already, with less CPU, so that planning
    # each batch reads them (a lost read, not the batch's send); each is written again (an
    # add_node, as load writes a node held already).
    held = 0
    if cut_at == "read":
        seeded = CliRunner().invoke(main, [*args, "load", str(nodes_file(tmp_path, "2"))])
        assert seeded.exit_code == 0, seeded.output
        held = NODES
    try:
        result = load_cut_after_first_batch(args, path, lose, cut_at, monkeypatch)
        assert result.exit_code == 1, result.output
        assert f"applied: {BATCH} add_node" in result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, result.output
        (error,) = errors
        assert f"Redis at {url}" in error
        # (a batch lost as it was sent may have landed: counted as in flight; one lost in the
        # reads before it was not sent)
        in_flight = f" (and up to {BATCH} more" if cut_at == "add" else "; run the same"
        assert f"; {BATCH} of {NODES} objects applied{in_flight}" in error
        assert ".;" not in error
        assert ("each call resent" in error) is (retry_for != "0") or "cannot reach" in error
        assert error.endswith(
            "run the same load again to finish: what the cache already "
            "holds is skipped as unchanged"
        )
        assert "settle" not in result.output and "Traceback" not in result.output
        restore()
        assert cpus(cache) == [4000] * BATCH + [2000] * (held - BATCH)  # the first batch only
        again = CliRunner().invoke(main, [*args, "load", str(path), "--batch-size", str(BATCH)])
        assert again.exit_code == 0, again.output
        assert f"applied: {NODES - BATCH} add_node" in again.output  # the rest, once
        assert cpus(cache) == [4000] * NODES
    finally:
        if proxy is not None:
            proxy.release()
            proxy.close()
        cache.clear()
        if where == "redis":
            client.close()
