"""``schedcache load``: kubectl lists and watch streams applied as the informers would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from schedcache import Node, Pod
from schedcache import cli as cli_module
from schedcache.cli import main
from schedcache.errors import ValidationError
from schedcache.loader import load, parse_documents
from tests.factories import keyspace, node_manifest, pod_manifest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CLUSTER = (EXAMPLES / "kubectl-cluster.json").read_text()
WATCH = (EXAMPLES / "kubectl-watch.json").read_text()


def cluster_items() -> list[dict]:
    return json.loads(CLUSTER)["items"]


def cached_pods(items: list[dict]) -> list[dict]:
    return [
        item
        for item in items
        if item["kind"] == "Pod"
        and item["spec"].get("nodeName")
        and item["status"]["phase"] not in ("Succeeded", "Failed")
    ]


@pytest.fixture
def run_cli(client, cache_name, monkeypatch):
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)

    def run(*args: str, stdin: str | None = None):
        return CliRunner().invoke(main, ["--cache", cache_name, *args], input=stdin)

    return run


def test_kubectl_list_loads_every_node_and_bound_pod(cache):
    report = load(cache, CLUSTER)
    items = cluster_items()
    bound = cached_pods(items)
    assert report.ok and report.applied == {"add_node": 20, "add_pod": len(bound)}
    assert cache.node_count() == sum(1 for item in items if item["kind"] == "Node")
    assert cache.pod_count() == len(bound)
    for item in bound[:40]:
        assert cache.get_pod(item["metadata"]["uid"]) == Pod.from_k8s(item)
    gpu_node = next(i for i in items if i["kind"] == "Node" and "nvidia.com/gpu" in str(i))
    assert cache.get_node_info(gpu_node["metadata"]["name"]).node == Node.from_k8s(gpu_node)
    assert len(report.skipped) == len(items) - 20 - len(bound)  # pending or finished pods


def test_loading_the_same_list_twice_changes_only_the_stream(cache):
    load(cache, CLUSTER)
    first = cache.dump()
    report = load(cache, CLUSTER)
    assert report.ok and report.applied["update_pod"] == cache.pod_count()
    second = cache.dump()
    for name, info in first.nodes.items():
        again = second.nodes[name]
        assert (again.requested, again.pods, again.used_ports) == (
            info.requested,
            info.pods,
            info.used_ports,
        )


def test_watch_stream_applies_modified_deleted_and_newly_bound_pods(cache):
    load(cache, CLUSTER)
    events = parse_documents(WATCH)
    modified, deleted, newly_bound, added, finished, broken = (e["object"] for e in events[:6])
    node = modified["spec"]["nodeName"]
    before = cache.get_node_info(node).requested.milli_cpu
    report = load(cache, WATCH)
    assert not report.ok and len(report.invalid) == 1
    assert report.invalid[0].startswith("event 5: pod ")
    assert (
        'spec.containers[0].resources.requests.cpu: "lots" is not a quantity' in report.invalid[0]
    )
    assert cache.get_pod(modified["metadata"]["uid"]).labels["release"] == "canary"
    assert cache.get_node_info(node).requested.milli_cpu > before
    for gone in (deleted, finished):
        assert cache.pod_state(gone["metadata"]["uid"]) is None
    for arrived in (newly_bound, added):
        assert cache.pod_state(arrived["metadata"]["uid"]) == "added"
    assert cache.get_pod(broken["metadata"]["uid"]) == Pod.from_k8s(cluster_pod(broken))


def cluster_pod(obj: dict) -> dict:
    uid = obj["metadata"]["uid"]
    return next(item for item in cluster_items() if item["metadata"]["uid"] == uid)


def test_yaml_documents_and_a_pod_before_its_node(cache):
    text = yaml.safe_dump_all(
        [pod_manifest("web-0", "n9", "100m", "1Mi"), node_manifest("n9", "2", "1Gi")]
    )
    report = load(cache, text)
    assert report.ok and report.applied == {"add_pod": 1, "add_node": 1}
    assert cache.get_node_info("n9").pods[0].name == "web-0"


def test_a_file_that_is_neither_json_nor_yaml_writes_nothing(cache):
    before = keyspace(cache.client, cache.keys.pattern)
    for text in ("{ not json", "just a sentence", "- [a, b\n"):
        with pytest.raises(ValidationError):
            load(cache, text)
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_cli_load_file_and_stdin(run_cli, cache, tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text(CLUSTER)
    result = run_cli("load", str(path))
    assert result.exit_code == 0, result.output
    assert f"applied: 20 add_node, {len(cached_pods(cluster_items()))} add_pod" in result.output
    watched = run_cli("load", "-", stdin=WATCH)
    assert watched.exit_code == 1
    assert "invalid: 1" in watched.output and "event 5: pod" in watched.output
    bad = run_cli("load", "-", stdin="{ nope")
    assert bad.exit_code == 1 and "neither JSON nor YAML" in bad.output
    assert cache.node_count() == 20
