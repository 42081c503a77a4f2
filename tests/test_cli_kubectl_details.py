"""What a kubectl user trips on in a first hour with ``get``, ``describe`` and ``load``, on every
backend: kubectl's YAML quoting, jsonpath escapes, quantities sorted by value, extended
resources in describe, READY and AGE as kubectl shows them (AGE surviving ``compact``), a load
that can be interrupted and rerun without writing anything twice, kubectl's refusals in
kubectl's words, and shell completion of names from the cache."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.shell_completion import ShellComplete
from click.testing import CliRunner

from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.cli.units import age
from schedcache.feed.sync import node_command, pod_command
from schedcache.model.values import Node, Pod
from schedcache.store.batch import CommandBatch
from tests.conftest import REAL_REDIS_URL, backend_url
from tests.test_cli_kubectl import loaded_cli, ok

HOUR_AGO = datetime.fromtimestamp(time.time() - 3 * 3600 - 60, tz=UTC)
CREATED = HOUR_AGO.strftime("%Y-%m-%dT%H:%M:%SZ")
ZONE = "topology.kubernetes.io/zone"


def pod(
    name: str,
    cpu: str,
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    ready: tuple[bool, ...] = (True,),
    **extra: Any,
) -> dict[str, Any]:
    """A bound, running pod with one container per entry of ``ready`` (its readiness)."""
    containers = [
        {"name": f"c{i}", "image": "nginx", "resources": {"requests": {"cpu": cpu, **extra}}}
        for i in range(len(ready))
    ]
    statuses = [
        {"name": f"c{i}", "ready": up, "state": {"running": {"startedAt": CREATED}}}
        for i, up in enumerate(ready)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": labels or {},
            "creationTimestamp": CREATED,
        },
        "spec": {"nodeName": "n1", "containers": containers},
        "status": {"phase": "Running", "containerStatuses": statuses},
    }


def node(name: str, **allocatable: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": CREATED},
        "status": {
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110", **allocatable},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


HASHED = {"pod-template-hash": "00009", "yes": "on", "big": "1e3", "octal": "0o17", ZONE: "z1"}
CLUSTER = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        node("n1", **{"nvidia.com/gpu": "4", "hugepages-2Mi": "1Gi"}),
        node("n2"),
        pod("web-3", "3", labels=HASHED),
        pod("web-50m", "50m", **{"nvidia.com/gpu": "1"}),
        pod("web-2", "2", ready=(True, False)),
        pod("web-1020m", "1020m", namespace="prod"),
    ],
}


@pytest.fixture
def kube(client, cache, cache_name, monkeypatch, tmp_path):
    """``kube(*args)``: schedcache on this test's backend, with CLUSTER loaded."""
    return loaded_cli(CLUSTER, client, cache_name, monkeypatch, tmp_path)


# -- 1. -o yaml ---------------------------------------------------------------------------------


def test_yaml_quotes_every_string_another_reader_would_take_for_another_type(backend, kube):
    output = ok(kube("get", "pod", "web-3", "-o", "yaml"))
    labels_block = output[output.index("  labels:") :].splitlines()[1:6]
    # kubectl's (go-yaml's) quoting: a YAML 1.2 reader reads a bare 00009 as the number 9,
    # 1e3 as 1000.0 and 0o17 as 15; a YAML 1.1 reader reads a bare on as true.
    assert '    pod-template-hash: "00009"' in labels_block
    assert '    big: "1e3"' in labels_block and '    octal: "0o17"' in labels_block
    assert '    "yes": "on"' in labels_block
    assert f"    {ZONE}: z1" in labels_block  # plain strings stay bare
    assert yaml.safe_load(output)["metadata"]["labels"] == HASHED
    if shutil.which("kubectl"):  # the same lines as kubectl's own -o yaml of the manifest
        theirs = subprocess.run(
            ["kubectl", "label", "--local", "-f", "-", "compared=yes", "-o", "yaml"],
            input=json.dumps(CLUSTER["items"][2]),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert '    pod-template-hash: "00009"' in theirs.splitlines()
        assert '    big: "1e3"' in theirs.splitlines()


# -- 2. jsonpath and custom-columns -------------------------------------------------------------


def test_jsonpath_and_custom_columns_take_kubectls_escaped_dots(backend, kube):
    escaped = r"{.metadata.labels.topology\.kubernetes\.io/zone}"
    assert ok(kube("get", "pod", "web-3", "-o", f"jsonpath={escaped}")) == "z1"
    listed = ok(kube("get", "pods", "-o", f"jsonpath={{.items[*]{escaped[1:]}"))
    assert listed == "z1"
    columns = r"NAME:.metadata.name,ZONE:.metadata.labels.topology\.kubernetes\.io/zone"
    table = ok(
        kube("get", "pods", "--sort-by", ".metadata.name", "-o", f"custom-columns={columns}")
    )
    assert [line.split() for line in table.splitlines()] == [
        ["NAME", "ZONE"],
        ["web-2", "<none>"],
        ["web-3", "z1"],
        ["web-50m", "<none>"],
    ]


def test_a_jsonpath_that_matches_nothing_prints_nothing_and_a_broken_one_fails(backend, kube):
    # kubectl's default (--allow-missing-template-keys=true): nothing printed, exit 0.
    assert ok(kube("get", "pod", "web-3", "-o", "jsonpath={.metadata.nothing}")) == ""
    broken = kube("get", "pod", "web-3", "-o", "jsonpath={.metadata.name")
    assert broken.exit_code != 0 and "unclosed" in broken.output
    assert "web-3" not in broken.output


# -- 3. describe node ---------------------------------------------------------------------------


def test_describe_node_lists_extended_resources_and_hugepages_as_allocated(backend, kube):
    output = ok(kube("describe", "node", "n1"))
    allocated = output[output.index("Allocated resources:") : output.index("Events:")]
    rows = {line.split()[0]: line.split()[1:] for line in allocated.splitlines()[3:]}
    assert rows["nvidia.com/gpu"] == ["1", "n/a"]  # kubectl: the amount, no percentage
    assert rows["hugepages-2Mi"] == ["0", "(0%)", "n/a"]
    assert list(rows)[-2:] == ["hugepages-2Mi", "nvidia.com/gpu"]  # hugepages, then extended
    lines = output.splitlines()
    assert lines[3] == f"CreationTimestamp:  {HOUR_AGO.strftime('%a, %d %b %Y %H:%M:%S +0000')}"
    plain = ok(kube("describe", "node", "n2"))
    assert "nvidia.com/gpu" not in plain  # offered by neither the node nor its pods


# -- 4. --sort-by -------------------------------------------------------------------------------


def test_sort_by_a_quantity_sorts_by_value(backend, kube):
    cpu = ".spec.resources.requests.cpu"
    columns = f"custom-columns=NAME:.metadata.name,CPU:{cpu}"
    table = ok(kube("get", "pods", "-A", "--sort-by", cpu, "-o", columns, "--no-headers"))
    # web-2's two containers ask for 2 each
    assert [line.split()[1] for line in table.splitlines()] == ["50m", "1020m", "3", "4"]
    by_name = ok(kube("get", "pods", "-A", "--sort-by", ".metadata.name", "-o", "name")).split()
    # natural order, as kubectl: web-2 before web-3 before web-50m before web-1020m
    assert by_name == ["pod/web-2", "pod/web-3", "pod/web-50m", "pod/web-1020m"]


# -- 5. READY -----------------------------------------------------------------------------------


def test_ready_counts_ready_containers_as_kubectl(backend, kube):
    rows = {
        line.split()[0]: line.split()[1]
        for line in ok(kube("get", "pods", "--no-headers")).splitlines()
    }
    assert rows == {"web-3": "1/1", "web-50m": "1/1", "web-2": "1/2"}


def test_ready_follows_the_feed_and_a_record_without_counts_stays_readable(backend, kube, cache):
    changed = pod("web-2", "2", ready=(True, True))
    changed["metadata"]["resourceVersion"] = "7"
    event = {"type": "MODIFIED", "object": changed}
    kube.path.write_text(json.dumps(event))
    assert "1 update_pod" in ok(kube("load", str(kube.path)))
    assert ok(kube("get", "pods")).splitlines()[1].split()[:2] == ["web-2", "2/2"]
    # A record written before the counts were kept (no "containers" in its payload).
    cache.add_node(Node.from_k8s(node("n9")))
    old = {"uid": "uid-old", "name": "old", "namespace": "default", "node_name": "n9"}
    cache.add_pod(Pod.from_dict(old))
    row = next(line for line in ok(kube("get", "pods")).splitlines() if line.startswith("old "))
    assert row.split()[1] == "<unknown>"


def test_sync_keeps_ready_counts_and_creation_times_as_load_does(backend, cache):
    cache.run(
        node_command(
            "ADDED",
            {
                **node("n1"),
                "metadata": {
                    "name": "n1",
                    "uid": "u",
                    "resourceVersion": "1",
                    "creationTimestamp": CREATED,
                },
            },
        )
    )
    running = pod("web-2", "2", ready=(True, False))
    running["metadata"]["resourceVersion"] = "2"
    cache.run(pod_command("ADDED", running))
    stored = cache.get_pod("uid-web-2")
    assert (stored.ready_containers, stored.containers) == (1, 2)
    assert stored.created_ms == int(HOUR_AGO.timestamp()) * 1000
    assert cache.get_node_info("n1").node.created_ms == stored.created_ms


# -- 6. AGE -------------------------------------------------------------------------------------


def test_age_comes_from_creation_timestamps_and_survives_compaction(backend, kube, cache):
    ok(kube("checkpoint"))
    assert "removed" in ok(kube("compact"))
    # As the cache keeps it: CREATED's whole seconds (HOUR_AGO's fraction of a second made the
    # expected age a minute short once, when the minute turned within that fraction).
    created_ms = (
        int(datetime.strptime(CREATED, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()) * 1000
    )
    before = age(created_ms, int(time.time() * 1000))  # (CREATED is fixed at import: the
    pods = ok(kube("get", "pods", "--no-headers")).splitlines()  # suite may run long after)
    nodes = ok(kube("get", "nodes", "--no-headers")).splitlines()
    expected = {before, age(created_ms, int(time.time() * 1000))}  # a minute may turn meanwhile
    assert {line.split()[-1] for line in pods} <= expected and before.startswith("3h")
    assert {line.split()[3] for line in nodes} <= expected
    document = json.loads(ok(kube("get", "pod", "web-3", "-o", "json")))
    assert document["metadata"]["creationTimestamp"] == CREATED
    # The checkpoint keeps them too: replay from it gives every pod its creation time.
    replayed = [pod for info in cache.replay().nodes.values() for pod in info.pods]
    assert len(replayed) == 4 and all(pod.created_ms for pod in replayed)
    assert cache.verify() == []


# -- 7. load: rerun and Ctrl-C ------------------------------------------------------------------


def test_loading_twice_writes_no_event_the_second_time(backend, kube, cache):
    events = cache.stream_length()
    again = ok(kube("load", str(kube.path)))
    assert "applied: nothing" in again and "skipped: 6 (6 unchanged)" in again
    assert cache.stream_length() == events


@pytest.mark.parametrize(
    "content",
    [b"{ not json", b'{"kind": "List", "items": [', b'{"kind": "Pod"} {"kind"', b"\xff\xfe{"],
    ids=["not json or yaml", "cut short", "broken json stream", "half a BOM"],
)
def test_load_names_the_file_it_cannot_parse(
    backend, client, cache, cache_name, monkeypatch, tmp_path, content
):
    # Found in review (mended): `load FILE` said "input: not valid JSON or YAML ...".
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    path = tmp_path / "cluster.json"
    path.write_bytes(content)
    result = CliRunner().invoke(main, ["--cache", cache_name, "load", str(path)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {path}: "), result.output
    stdin = CliRunner().invoke(main, ["--cache", cache_name, "load", "-"], input=content)
    assert stdin.exit_code == 1, stdin.output
    assert stdin.output.startswith("Error: <stdin>: "), stdin.output
    assert cache.stream_length() == 0 and cache.is_empty()


def test_ctrl_c_while_load_reads_its_input_exits_130_and_writes_nothing(
    backend, client, cache, cache_name, monkeypatch, tmp_path
):
    # Found in review (mended): Ctrl-C before the first batch (a large file being parsed, or
    # `load -` waiting on stdin) ended in click's "Aborted!", exit 1.
    from schedcache.cli import load as load_module

    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(CLUSTER))

    def interrupted(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(load_module, "parse_documents", interrupted)
    stopped = CliRunner().invoke(main, ["--cache", cache_name, "load", str(path)])
    assert stopped.exit_code == 130
    assert "interrupted while reading the input: nothing was applied" in stopped.output
    assert "Aborted" not in stopped.output
    assert cache.stream_length() == 0 and cache.is_empty()


def test_ctrl_c_in_load_says_how_far_it_got_and_a_rerun_finishes(
    backend, client, cache, cache_name, monkeypatch, tmp_path
):
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(CLUSTER))
    real_execute = CommandBatch.execute
    calls = []

    def interrupted(self: CommandBatch) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_execute(self)

    monkeypatch.setattr(CommandBatch, "execute", interrupted)
    stopped = CliRunner().invoke(
        main, ["--cache", cache_name, "load", "--batch-size", "2", str(path)]
    )
    assert stopped.exit_code == 130
    assert "interrupted: 2 of 6 objects applied (and up to 2 more" in stopped.output
    assert "Aborted" not in stopped.output
    monkeypatch.setattr(CommandBatch, "execute", real_execute)
    events = cache.stream_length()
    rerun = CliRunner().invoke(main, ["--cache", cache_name, "load", str(path)])
    assert rerun.exit_code == 0, rerun.output
    # The batch in flight went out before Ctrl-C (its commands are sent as they are added):
    # whatever landed is skipped as unchanged, the rest applied; nothing is written twice.
    added = int(re.search(r"applied: (\d+) add_pod\n", rerun.output)[1])  # type: ignore[index]
    assert f"skipped: {6 - added} ({6 - added} unchanged)" in rerun.output
    assert added in (2, 4) and cache.stream_length() == events + added
    assert cache.pod_count() == 4 and cache.node_count() == 2


# -- 8. kubectl's refusals, in the CLI's words ----------------------------------------------------


def test_get_by_name_across_all_namespaces_is_refused_as_kubectl_does(backend, kube):
    refused = kube("get", "pods", "-A", "web-3")
    assert refused.exit_code == 1
    assert refused.output == (
        "Error: a resource cannot be retrieved by name across all namespaces\n"
    )


@pytest.mark.parametrize(
    "selection",
    [
        ["-l", "app=web"],
        ["--field-selector", "metadata.name=web-3"],
        ["-l", "app=nothing", "-o", "name"],
        ["-A", "-l", "app=web"],  # (the selector's refusal comes first, as kubectl's)
    ],
)
def test_a_name_with_a_selector_is_refused_as_kubectl_does(backend, kube, selection):
    # Found in review (helper-84, mended): taken, and judged unevenly: `get nodes n1
    # --field-selector metadata.name=n2` printed nothing with exit 0, `get pods web-3 -l
    # app=nothing -o name` printed pod/web-3.
    for kind, name in (("pods", "web-3"), ("nodes", "n1")):
        refused = kube("get", kind, name, *selection)
        assert refused.exit_code == 1
        assert refused.output == "Error: name cannot be provided when a selector is specified\n"


def test_a_blank_selector_with_a_name_is_no_selector(backend, kube):
    assert ok(kube("get", "pods", "web-3", "-l", " ", "-o", "name")) == "pod/web-3\n"
    assert ok(kube("get", "nodes", "n1", "--field-selector", "", "-o", "name")) == "node/n1\n"


def test_compact_without_a_checkpoint_answers_in_the_clis_words(backend, kube, client, monkeypatch):
    bare = kube("compact")
    assert bare.exit_code == 1
    assert "run `schedcache checkpoint` first" in bare.output and "()" not in bare.output
    empty = CliRunner().invoke(main, ["--cache", "never-written-42", "compact"])
    assert empty.exit_code == 1 and "does not exist" in empty.output


def test_an_empty_file_to_load_fails_and_changes_nothing(
    backend, client, cache, cache_name, tmp_path, monkeypatch
):
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)
    for text in ("", "\n# nothing here\n---\n"):
        path = tmp_path / "empty.yaml"
        path.write_text(text)
        result = CliRunner().invoke(main, ["--cache", cache_name, "load", str(path)])
        assert result.exit_code == 1
        assert "holds no object" in result.output and "nothing was loaded" in result.output
        assert cache.is_empty()


def test_rediss_to_a_plain_server_fails_fast_and_says_why():
    started = time.monotonic()
    tls_url = REAL_REDIS_URL.replace("redis://", "rediss://", 1)
    result = CliRunner().invoke(main, ["--redis", tls_url, "get", "pods"])
    elapsed = time.monotonic() - started
    assert result.exit_code == 1
    assert "no TLS handshake within 2 s" in result.output and "redis://" in result.output
    assert elapsed < 4  # 11 s before: the handshake waited for the socket timeout, twice


# -- 9. start-up and completion -------------------------------------------------------------------

# What a plain `get` does not need: the embedded backend, the simulator, the loader and the
# manifest reader, the API client, rich and PyYAML (only -o yaml and tables of other commands).
NOT_FOR_GET = (
    "fakeredis",
    "numpy",
    "rich",
    "yaml",
    "kubernetes",
    "schedcache.sim.simulation",
    "schedcache.feed.loader",
    "schedcache.model.manifests",
    "schedcache.cli.whatif",
    "schedcache.cli.inspection",
)


@pytest.mark.parametrize("command", [["get", "pods", "-A"], ["describe", "node"]])
def test_get_and_describe_import_only_what_they_use(command, cache_name):
    script = (
        "import sys\n"
        "from schedcache.cli.app import main\n"
        "try:\n"
        f"    main({[*command, '--redis', REAL_REDIS_URL, '--cache', cache_name]!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {NOT_FOR_GET!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def completions(args: list[str], incomplete: str) -> list[str]:
    complete = ShellComplete(main, {}, "schedcache", "_SCHEDCACHE_COMPLETE")
    return [item.value for item in complete.get_completions(args, incomplete)]


def test_completion_offers_names_and_namespaces_from_the_cache(
    backend, kube, client, cache_name, request, monkeypatch
):
    url = backend_url(backend, request)
    if url == "embedded":  # the fixture's fakeredis stands for a server the shell can reach
        url = "redis://fakeredis.invalid"
    where = ["--redis", url, "--cache", cache_name]
    assert completions([*where, "get", "nodes"], "") == ["n1", "n2"]
    assert completions(["get", "pods", *where], "web-") == ["web-2", "web-3", "web-50m"]
    assert completions(["describe", "pod", "-n", "prod", *where], "") == ["web-1020m"]
    assert completions(["get", "pods", *where, "-n"], "") == ["default", "prod"]
    assert completions(["describe", *where], "no") == ["nodes"]
    # Without a shared Redis, or with one that does not answer: nothing, never an error.
    assert completions(["get", "nodes", "--cache", cache_name], "") == []
    monkeypatch.undo()
    refused = ["--redis", "redis://127.0.0.1:1/0", "--cache", cache_name]
    assert completions([*refused, "get", "nodes"], "") == []


@pytest.mark.parametrize(
    "args",
    [["--cache"], ["stats", "--redis"], ["--timeout"], ["get", "nodes", "--cache"]],
)
def test_tab_after_a_global_option_waiting_for_its_value_is_no_error(args):
    # Found in review (stop 58, mended): the global options' hoisting refused the line as
    # "Option '--cache' requires an argument." and the shell printed click's traceback.
    assert completions(args, "") == []
    assert completions(["--log-level"], "") == ["debug", "info", "warning", "error"]


def test_completion_is_documented():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "source <(schedcache completion bash)" in readme
    assert "node names, pod names and namespaces" in readme


# -- 10. no import circle in the CLI ------------------------------------------------------------


def test_no_module_of_the_cli_imports_one_that_imports_it_back():
    """Every import counts (under TYPE_CHECKING and inside functions too), as in
    tests/test_layers.py: the group (app) registers subcommands, which never import it."""
    from tests.test_layers import PACKAGE, imported_modules, module_name

    cli = {module_name(path): path for path in (PACKAGE / "cli").glob("*.py")}
    graph = {
        name: {module for _, module in imported_modules(path) if module in cli}
        for name, path in cli.items()
    }

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and not seen.add(nxt) and reaches(nxt, goal, seen))
            for nxt in graph[start]
        )

    circles = sorted(name for name in graph if reaches(name, name, set()))
    assert circles == []
