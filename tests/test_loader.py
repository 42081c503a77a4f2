"""``schedcache load``: kubectl lists and watch streams applied as the informers would."""

from __future__ import annotations

import codecs
import json
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from schedcache import Node, Pod
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.errors import ValidationError
from schedcache.feed.loader import load
from schedcache.model.manifests import MAX_DEPTH, parse_documents
from tests.factories import keyspace, node_manifest, pod_manifest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CLUSTER = (EXAMPLES / "kubectl-cluster.json").read_text()
WATCH = (EXAMPLES / "kubectl-watch-with-an-invalid-object.json").read_text()


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
def run_cli(client, cache, cache_name, monkeypatch):
    """The CLI on this test's cache (``cache`` deletes its keys afterwards), which outlives
    the command as a --redis server would (no note that it is gone)."""
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    monkeypatch.setattr(cli_module.Settings, "is_shared", lambda self: True)

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


def test_loading_the_same_list_twice_writes_nothing_the_second_time(cache):
    load(cache, CLUSTER)
    first, events = cache.dump(), cache.stream_length()
    report = load(cache, CLUSTER)
    assert report.ok and not report.applied, report.applied
    unchanged = report.skipped_by_reason()["unchanged"]
    assert unchanged == cache.pod_count() + cache.node_count()
    assert cache.stream_length() == events  # no no-op update_pod/update_node events
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


def bad_cluster() -> tuple[list[dict], dict[int, str]]:
    """A List of one node and 1,000 bound pods, some of them invalid in ways that used to
    escape as OverflowError/UnicodeEncodeError halfway through a load; {index: expected
    message} of the invalid ones."""
    items = [node_manifest("n1", "1000", "1Ti", pods="5000")]
    items += [pod_manifest(f"p{i}", "n1", "10m", "1Mi", namespace="shop") for i in range(1000)]
    items[250]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e30"
    items[501]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1Ei" * 1
    items[502]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1Ei"
    items[700]["spec"]["priority"] = 2**64
    items[900]["metadata"]["name"] = "lone\udc80surrogate"
    expected = {
        250: "pod shop/p249: spec.containers[0].resources.requests.cpu",
        502: "pod shop/p501: spec.containers[0].resources.requests.cpu",
        700: "pod shop/p699: spec.priority",
        900: "metadata.name",
    }
    return items, expected


def test_invalid_objects_in_a_batch_are_reported_by_name_and_the_rest_loads(cache):
    items, expected = bad_cluster()
    report = load(cache, json.dumps({"kind": "List", "items": items}), batch_size=500)
    assert not report.ok and report.rejected == []
    assert len(report.invalid) == len(expected)
    for line, (index, message) in zip(report.invalid, sorted(expected.items()), strict=True):
        assert line.startswith(f"items[{index}]: ") and message in line, line
    assert report.applied == {"add_node": 1, "add_pod": 1000 - len(expected)}
    assert cache.pod_count() == 1000 - len(expected)
    assert cache.verify() == []


def test_a_command_the_cache_rejects_does_not_stop_its_batch(cache):
    # Valid manifests the cache refuses (a pod bound to one node, then "added" on another is
    # an update on another node) sit between pods that must all load.
    items = [pod_manifest(f"p{i}", "n1", "10m", "1Mi") for i in range(5)]
    cache.add_pod(Pod.from_k8s(pod_manifest("moved", "n2", "10m", "1Mi")))
    items.insert(2, pod_manifest("moved", "n1", "10m", "1Mi"))
    report = load(cache, json.dumps({"kind": "List", "items": items}))
    assert len(report.rejected) == 1 and report.rejected[0].startswith("items[2]: ")
    assert "moved" in report.rejected[0]
    assert report.applied == {"add_pod": 5}


def test_skipped_objects_are_counted_per_reason_and_named(run_cli, tmp_path):
    items = [
        pod_manifest("pending-0", "", "10m", "1Mi", namespace="shop"),
        pod_manifest("pending-1", "", "10m", "1Mi", namespace="shop"),
        {
            **pod_manifest("done", "n1", "10m", "1Mi", namespace="shop"),
            "status": {"phase": "Succeeded"},
        },
        {"kind": "Service", "metadata": {"name": "web", "namespace": "shop"}},
        node_manifest("n1", "1", "1Gi"),
    ]
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"kind": "List", "items": items}))
    quiet = run_cli("load", str(path))
    assert quiet.exit_code == 0, quiet.output
    assert "skipped: 4 (2 pending, 1 terminated, 1 not cached)" in quiet.stdout
    assert "items[0]" not in quiet.stdout
    assert quiet.stderr == ""  # no progress bar, no blank line when stderr is not a terminal
    verbose = run_cli("load", "-v", str(path))
    assert "  items[0] pod shop/pending-0: pending (not bound to a node)" in verbose.stdout
    assert "  items[2] pod shop/done: terminated (Succeeded)" in verbose.stdout
    assert "  items[3] service shop/web: not cached (kind Service)" in verbose.stdout


def test_cli_load_reports_invalid_objects_and_ends_with_one_error_line(run_cli, tmp_path, cache):
    items, expected = bad_cluster()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"kind": "List", "items": items}, ensure_ascii=True))
    result = run_cli("load", "--batch-size", "300", str(path))
    assert result.exit_code == 1
    assert f"invalid: {len(expected)}" in result.stdout
    assert "lone\\udc80surrogate" in result.stdout  # printed escaped, never raw
    assert result.stderr.splitlines() == [
        f"Error: {len(expected)} object{'' if len(expected) == 1 else 's'} invalid, 0 rejected "
        "(listed above); the rest was loaded"
    ]
    assert cache.pod_count() == 1000 - len(expected)


def test_yaml_is_parsed_by_libyaml():
    assert yaml.__with_libyaml__, "PyYAML without libyaml: install the wheel with it"
    from schedcache.model import manifests

    assert manifests.YAML_LOADER is yaml.CSafeLoader


def test_yaml_alias_bombs_are_refused_quickly(cache):
    fan_out = "a: &a [" + ",".join(["x"] * 1000) + "]\nb: [" + ",".join(["*a"] * 1000) + "]\n"
    started = time.perf_counter()
    with pytest.raises(ValidationError, match="aliases expand to over 100,000 more nodes"):
        parse_documents(fan_out)
    laughs = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    laughs += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 10)]
    with pytest.raises(ValidationError, match="aliases expand"):
        parse_documents("\n".join(laughs))
    assert time.perf_counter() - started < 1.0
    # A few anchors, as people write them, are fine.
    small = "base: &base {cpu: 100m}\nuse: [*base, *base]\n"
    assert parse_documents(small) == [{"base": {"cpu": "100m"}, "use": [{"cpu": "100m"}] * 2}]


@pytest.mark.parametrize("syntax", ["json", "yaml-flow", "yaml-block", "yaml-indented"])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_deeply_nested_documents_are_refused(syntax, depth):
    # 100,000 levels used to be a RecursionError (JSON) or a crash of the interpreter (libyaml's
    # composer recursing in C).
    text = {
        "json": "[" * depth + "]" * depth,
        "yaml-flow": "a: " + "[" * depth + "]" * depth,
        "yaml-block": "- " * depth + "x\n",
        "yaml-indented": "".join(f"{' ' * i}k:\n" for i in range(min(depth, 2000))) + "  v\n",
    }[syntax]
    with pytest.raises(ValidationError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_documents(text)


def test_utf16_with_a_byte_order_mark_loads_and_binary_is_refused(cache):
    text = json.dumps({"kind": "List", "items": [node_manifest("n1", "1", "1Gi")]})
    report = load(cache, codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    assert report.ok and report.applied == {"add_node": 1}
    with pytest.raises(ValidationError, match=r"not UTF-8 text \(byte 0x89 at offset 0\)"):
        parse_documents(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(ValidationError, match="NUL bytes: binary, or UTF-16/32 without a BOM"):
        parse_documents(text.encode("utf-16-le"))  # no BOM: not guessed


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"kind": "List", "items": 5}, "document: List: items: must be a list, found int"),
        ({"type": "ADDED", "object": 5}, "event 0: object: must be a mapping, found int"),
        ({"type": "GONE", "object": {}}, "event 0: watch event: type: 'GONE' is not a change"),
        ({"kind": ["Pod"]}, None),
    ],
)
def test_malformed_documents_are_invalid_entries(cache, document, message):
    before = keyspace(cache.client, cache.keys.pattern)
    report = load(cache, json.dumps(document))
    if message is None:  # an unhashable kind is just a kind that is not cached
        assert report.ok and report.skipped[0].reason == "not cached"
    else:
        assert report.invalid == [message]
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_batch_size_must_be_positive(cache):
    with pytest.raises(ValidationError, match="batch_size"):
        load(cache, "{}", batch_size=0)


@pytest.mark.parametrize("prune", [False, True])
def test_a_cached_pod_listed_as_finished_leaves_the_cache(cache, prune):
    """A List states each pod as the informer reads it: one that is now Succeeded or Failed
    leaves the cache (assumed or added), with or without --prune."""
    node = node_manifest("n1", "4", "8Gi")
    done, failed, running = (pod_manifest(n, "n1", "100m", "1Mi") for n in ("done", "bad", "up"))
    load(cache, json.dumps({"kind": "List", "apiVersion": "v1", "items": [node, done, failed]}))
    cache.assume_pod(Pod.from_k8s(running))
    done["status"] = {"phase": "Succeeded"}
    failed["status"] = {"phase": "Failed"}
    running["status"] = {"phase": "Failed"}
    again = {"kind": "List", "apiVersion": "v1", "items": [node, done, failed, running]}
    report = load(cache, json.dumps(again), prune=prune)
    assert report.ok and report.applied["remove_pod"] == 3
    assert cache.pod_count() == 0 and cache.get_node_info("n1").requested.milli_cpu == 0
    assert cache.verify() == []
    # Listed again, finished pods that the cache does not hold are skipped as before.
    assert load(cache, json.dumps(again)).skipped_by_reason()["terminated"] == 3


def test_the_examples_load_as_their_names_say(run_cli, cache):
    """The README's samples: the cluster loads cleanly with every node Ready (kubectl's
    STATUS, not Unknown); the watch stream named for its invalid object loads the rest and
    exits 1 naming that object."""
    cluster = run_cli("load", str(EXAMPLES / "kubectl-cluster.json"))
    assert cluster.exit_code == 0 and "invalid: 0" in cluster.stdout, cluster.output
    nodes = run_cli("get", "nodes", "--no-headers").stdout.splitlines()
    assert len(nodes) == 20 and {line.split()[1] for line in nodes} == {"Ready"}
    watch = run_cli("load", str(EXAMPLES / "kubectl-watch-with-an-invalid-object.json"))
    assert watch.exit_code == 1 and "invalid: 1" in watch.stdout
    assert "lots" in watch.stdout and watch.stderr.startswith("Error: 1 object invalid")
    assert sorted(p.name for p in EXAMPLES.glob("*.json")) == [
        "kubectl-cluster.json",
        "kubectl-watch-with-an-invalid-object.json",
    ]


@pytest.mark.parametrize(
    ("text", "found"), [("[]", "an array"), ('[{"kind": "Node"}]', "an array"), ('"x"', "str")]
)
def test_a_document_that_is_no_object_is_invalid_in_words_that_do_not_contradict(
    cache, text, found
):
    """Found in review: `[]` was "expected an object, a list or a watch event, found list"
    (a kubectl List is an object of kind List; a JSON array is no document of kubectl's)."""
    report = load(cache, text)
    assert not report.ok and not report.applied
    (line,) = report.invalid
    assert line.endswith(
        "expected an object: one object, a kind List as `kubectl get -o json` prints, or a "
        f"watch event; found {found}"
    ), line
    assert cache.is_empty()


def test_prune_leaves_a_node_its_listed_pods_keep_and_a_second_prune_exits_clean(cache):
    """Found in review: a List holding a pod but not its node: --prune removes the node, which
    its pod keeps in the cache (a ghost); every later --prune tried to remove it again and
    was rejected ("already removed"), so such a load could never exit 0."""
    node, other = node_manifest("n1", "4", "8Gi"), node_manifest("n2", "4", "8Gi")
    pod = pod_manifest("web-0", "n1", "100m", "1Mi")
    load(cache, json.dumps({"kind": "List", "apiVersion": "v1", "items": [node, other, pod]}))
    without_n1 = json.dumps({"kind": "List", "apiVersion": "v1", "items": [other, pod]})
    first = load(cache, without_n1, prune=True)
    assert first.ok and first.pruned == {"nodes": 1}, (first.rejected, first.pruned)
    before = keyspace(cache.client, cache.keys.pattern)
    second = load(cache, without_n1, prune=True)
    assert second.ok and not second.rejected and not second.pruned, second.rejected
    assert keyspace(cache.client, cache.keys.pattern) == before  # nothing written
    assert cache.get_node_info("n1").requested.milli_cpu == 100  # its pod still counted
    assert cache.verify() == []
