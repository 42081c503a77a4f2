"""``schedcache load`` stores an over-limit pod as ``sync`` does: without its labels, marked
``truncated``, still counting on its node (issue 29 item 5: never invisible to fit)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.errors import FitConflict
from schedcache.feed.loader import load
from tests.factories import make_pod, node_manifest, pod_manifest

LABELS = 70_000  # 969 KB of labels: under etcd's 1.5 MiB, over what the cache reads back


def labelled(name: str, cpu: str, labels: int = LABELS) -> dict[str, Any]:
    manifest = pod_manifest(name, "n0", cpu, "1Mi", namespace="shop", uid=f"uid-{name}")
    manifest["metadata"]["labels"] = {f"example.com/label-{i}": "v" * 6 for i in range(labels)}
    return manifest


@pytest.fixture
def run_cli(client: Any, cache_name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    monkeypatch.setattr(cli_module.Settings, "is_shared", lambda self: True)

    def run(*args: str) -> Any:
        return CliRunner().invoke(main, ["--cache", cache_name, *args])

    return run


def test_load_stores_an_over_limit_pod_truncated_and_it_counts_on_its_node(
    cache: Any, run_cli: Any, tmp_path: Any
) -> None:
    """Before: load listed the pod as invalid (exit 1) and left it out: the node looked free."""
    items = [node_manifest("n0", "4", "8Gi"), labelled("big", "2"), labelled("small", "1", 1)]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": items}))
    result = run_cli("load", str(path))
    assert result.exit_code == 0, result.output
    assert "applied: 1 add_node, 2 add_pod" in result.stdout
    assert "truncated: 1 (pods stored without their labels)" in result.stdout
    assert "invalid: 0" in result.stdout
    big = cache.get_pod("uid-big")
    assert big.truncated and big.labels == {}
    assert not cache.get_pod("uid-small").truncated
    assert cache.get_node_info("n0").requested.milli_cpu == 3000
    with pytest.raises(FitConflict):  # 3000m of 4000m taken: 2 cpu more does not fit
        cache.assume_pod(make_pod("claim", "n0", "2", "1Mi"), check_fit=True)
    stats = run_cli("stats")
    assert stats.exit_code == 0 and "truncated pods\t1\n" in stats.output, stats.output
    assert cache.verify() == []


def test_a_truncated_pod_updated_by_a_watch_event_stays_counted(cache: Any) -> None:
    """An update (MODIFIED) of a pod already cached goes through the same truncation."""
    node = node_manifest("n0", "4", "8Gi")
    events = [
        {"type": "ADDED", "object": node},
        {"type": "ADDED", "object": labelled("big", "1")},
        {"type": "MODIFIED", "object": labelled("big", "2")},  # a change: unchanged is skipped
    ]
    report = load(cache, "\n".join(json.dumps(event) for event in events))
    assert report.ok and report.truncated == 2, report
    assert report.applied == {"add_node": 1, "add_pod": 1, "update_pod": 1}
    assert cache.get_pod("uid-big").truncated
    assert cache.get_node_info("n0").requested.milli_cpu == 2000
