"""``whatif``: other placement policies at a moment of the history, on every backend.

The built-in policies are checked against a plain oracle written from upstream's formulas
(every node through ``filter_pod``, integer scores, first best in node-tree order); the scratch
accounting against the replay of the same claims; the command against a real browser.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

import schedcache.cli.app as cli_module
from schedcache import Cache, Node, Pod
from schedcache.cli import main
from schedcache.errors import PolicyError
from schedcache.model.filters import filter_pod
from schedcache.model.nodeinfo import NodeInfo
from schedcache.sim.policies import BUILT_IN, least_allocated, load_policy, most_allocated
from schedcache.sim.report import time_of
from schedcache.sim.scratch import ScratchSnapshot
from schedcache.sim.whatif import fresh_copy, what_if
from schedcache.views.snapshot import Snapshot
from tests.factories import make_node, make_pod, node_manifest, pod_manifest, port

ZONE = "topology.kubernetes.io/zone"


def zoned_node(
    name: str,
    zone: str,
    cpu: str = "4",
    mem: str = "8Gi",
    *,
    extended: dict[str, str] | None = None,
    spec: dict[str, object] | None = None,
) -> Node:
    manifest = node_manifest(name, cpu, mem, extended=extended)
    manifest["metadata"]["labels"] = {
        ZONE: zone,
        "disk": "ssd" if name.endswith(("0", "2")) else "hdd",
    }
    if spec:
        manifest["spec"] = spec
    return Node.from_k8s(manifest)


def moment(cache: Cache) -> str:
    return cache.last_events(1)[0].id


# -- the built-in policies against an oracle -------------------------------------------------


def oracle(snapshot: Snapshot, pod: Pod, most: bool) -> str | None:
    """Upstream's NodeResourcesFit score, one node at a time."""

    def share(requested: int, capacity: int) -> int:
        if capacity == 0:
            return 0
        if most:
            return min(requested, capacity) * 100 // capacity
        return 0 if requested > capacity else (capacity - requested) * 100 // capacity

    best, best_score = None, -1
    for info in snapshot.node_info_list:
        if not filter_pod(pod, info).fits:
            continue
        cpu = info.non_zero_requested.milli_cpu + pod.non_zero_requests.milli_cpu
        mem = info.non_zero_requested.memory + pod.non_zero_requests.memory
        score = (share(cpu, info.allocatable.milli_cpu) + share(mem, info.allocatable.memory)) // 2
        if score > best_score:
            best, best_score = info.name, score
    return best


def random_pod(rng: random.Random, index: int) -> Pod:
    cpu = rng.choice(["", "100m", "300m", "1"])
    manifest = pod_manifest(
        f"r{index}",
        "",
        cpu,
        rng.choice(["0", "256Mi", "1Gi"]) if cpu else "",
        ports=[port(8080)] if rng.random() < 0.1 else None,
        extended={"example.com/foo": "1"} if rng.random() < 0.1 else None,
    )
    spec = manifest["spec"]
    if rng.random() < 0.2:
        spec["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if rng.random() < 0.2:
        spec["nodeSelector"] = {"disk": "ssd"}
    return Pod.from_k8s(manifest)


def random_cluster(cache: Cache, rng: random.Random) -> None:
    for index in range(12):
        taints = [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}] if index % 5 == 4 else []
        node = zoned_node(
            f"n{index}",
            f"z{index % 3}",
            rng.choice(["1", "2", "4"]),
            rng.choice(["2Gi", "4Gi", "8Gi"]),
            extended={"example.com/foo": "2"} if index % 4 == 1 else None,
            spec={"taints": taints, "unschedulable": index == 7},
        )
        cache.add_node(node)


@pytest.mark.parametrize("seed", range(3))
def test_the_built_ins_choose_as_upstreams_scores_do(cache: Cache, seed: int) -> None:
    rng = random.Random(seed)
    random_cluster(cache, rng)
    at = moment(cache)
    state = cache.replay(until=at)
    fast = {name: ScratchSnapshot.of(fresh_copy(state)) for name in BUILT_IN}
    plain = {name: ScratchSnapshot.of(fresh_copy(state), indexed=False) for name in BUILT_IN}
    chosen = {name: 0 for name in BUILT_IN}
    for index in range(150):
        pod = random_pod(rng, index)
        for name, policy in BUILT_IN.items():
            expected = oracle(fast[name], pod, most=name == "most-allocated")
            assert policy(fast[name], pod) == expected, (name, index)
            assert policy(plain[name], pod) == expected, (name, index)  # no index: same answer
            if expected is not None:
                fast[name].place(pod, expected)
                plain[name].place(pod, expected)
                chosen[name] += 1
    assert all(count > 20 for count in chosen.values())  # the cluster filled, then refused


def test_a_plain_snapshot_from_cache_at_works_too(cache: Cache) -> None:
    cache.add_node(make_node("a", "2", "4Gi"))
    cache.add_node(make_node("b", "2", "4Gi"))
    cache.add_pod(make_pod("busy", "a", "1", "1Gi"))
    snapshot = cache.at(moment(cache))
    pod = make_pod("new", "", "500m", "512Mi")
    assert least_allocated(snapshot, pod) == "b"
    assert most_allocated(snapshot, pod) == "a"
    assert least_allocated(snapshot, make_pod("huge", "", "3", "1Gi")) is None


# -- what_if -------------------------------------------------------------------------------


def history(cache: Cache) -> str:
    """Six nodes in two zones, then twelve claims spread round-robin; returns the moment
    between them."""
    for index in range(6):
        cache.add_node(zoned_node(f"n{index}", f"z{index % 2}"))
    cache.add_pod(make_pod("resident", "n0", "1", "1Gi"))
    at = moment(cache)
    for index in range(12):
        pod = make_pod(f"p{index}", f"n{(index + 1) % 6}", "500m", "1Gi", uid=f"p{index}")
        cache.assume_pod(pod, check_fit=True)
        if index % 3 == 0:
            cache.finish_binding(pod)
            cache.add_pod(pod)
    return at


def test_what_happened_is_replayed_exactly(cache: Cache) -> None:
    """Placing the claims on the scratch copy gives what replaying them gives."""
    at = history(cache)
    result = what_if(cache, at, {})
    (actual,) = result.outcomes
    assert list(result.pods) == [f"p{i}" for i in range(12)]
    assert actual.placements == {f"p{i}": f"n{(i + 1) % 6}" for i in range(12)}
    now = cache.at(moment(cache))
    for name, info in now.node_infos.items():
        usage = actual.after.nodes[name]
        assert usage.pods == len(info.pods)
        assert usage.cpu == info.requested.milli_cpu / info.allocatable.milli_cpu
    assert actual.after.cluster.pods == 13
    assert result.before.cluster.pods == 1 and result.before.nodes["n0"].cpu == 0.25


def test_scratch_accounting_equals_the_fold(cache: Cache) -> None:
    at = history(cache)
    scratch = ScratchSnapshot.of(fresh_copy(cache.replay(until=at)))
    for event in cache.events(start=at):
        if event.type == "PodAssumed":
            scratch.place(Pod.from_dict(event.data), event.node or "")
    replayed = cache.at(moment(cache))

    def shape(info: NodeInfo) -> tuple[object, ...]:
        return (
            info.requested,
            info.non_zero_requested,
            sorted(p.uid for p in info.pods),
            info.used_ports,
            info.pvc_ref_counts,
        )

    assert {n: shape(i) for n, i in scratch.node_infos.items()} == {
        n: shape(i) for n, i in replayed.node_infos.items()
    }
    index = scratch.index
    assert index is not None
    assert [int(v) for v in index.cpu] == [
        scratch.node_infos[n].requested.milli_cpu for n in index.names
    ]


def test_policies_compared_with_what_happened(cache: Cache) -> None:
    at = history(cache)
    state_before = cache.dump()
    length = cache.stream_length()
    result = what_if(cache, at, BUILT_IN)
    assert [o.policy for o in result.outcomes] == ["actual", *BUILT_IN]
    least, most = result.outcome("least-allocated"), result.outcome("most-allocated")
    assert least.placed == most.placed == 12
    assert most.after.nodes_in_use < least.after.nodes_in_use == 6  # bin-packing vs spreading
    assert result.differing("most-allocated")  # the round-robin history was not bin-packing
    assert set(result.differing("least-allocated")) <= set(result.pods)
    assert set(least.after.zones) == {"z0", "z1"}
    # every policy's cluster totals are the same pods, only elsewhere
    assert least.after.cluster.cpu == most.after.cluster.cpu == result.outcomes[0].after.cluster.cpu
    assert cache.dump() == state_before and cache.stream_length() == length  # read-only


def test_until_bounds_the_pods_placed(cache: Cache, run_cli) -> None:  # type: ignore[no-untyped-def]
    at = history(cache)
    sixth = [e.id for e in cache.events(start=at) if e.type == "PodAssumed"][5]
    result = what_if(cache, at, BUILT_IN, until=sixth)
    assert list(result.pods) == [f"p{i}" for i in range(6)]
    text = run_cli("whatif", "--at", at, "--until", sixth).output
    assert f"what-if at {at}: 6 pods on 6 nodes" in text
    backwards = run_cli("whatif", "--at", sixth, "--until", at)
    assert backwards.exit_code == 1 and "is not after --at" in backwards.output
    last = moment(cache)
    later = f"{int(last.split('-')[0]) + 1000}-0"
    assert (
        "no pods to place: none was claimed between"
        in run_cli("whatif", "--at", last, "--until", later).output
    )


def test_unschedulable_pods_and_their_reasons(cache: Cache) -> None:
    cache.add_node(make_node("only", "1", "2Gi"))
    at = moment(cache)
    pods = [make_pod(f"big{i}", "", "600m", "1Gi", uid=f"big{i}") for i in range(3)]

    def stubborn(snapshot: Snapshot, pod: Pod) -> str | None:
        return "only"  # always the same node, fitting or not

    result = what_if(cache, at, {"least": least_allocated, "stubborn": stubborn}, pods)
    least, stuck = result.outcome("least"), result.outcome("stubborn")
    assert least.unschedulable == ["big1", "big2"] and least.reasons["big1"].startswith(
        "policy 'least' chose no node"
    )
    assert stuck.unschedulable == ["big1", "big2"]
    assert stuck.reasons["big1"] == "chose only: Insufficient cpu"
    actual = result.outcomes[0]
    assert actual.placements == {"big0": None, "big1": None, "big2": None}
    assert actual.reasons["big0"] == f"not claimed after {result.at}"


def test_a_policy_that_misbehaves_is_named(cache: Cache) -> None:
    cache.add_node(make_node("only", "1", "2Gi"))
    at = moment(cache)
    pods = [make_pod("web", "", "100m", "1Mi", uid="web")]

    def broken(snapshot: Snapshot, pod: Pod) -> str | None:
        raise ZeroDivisionError("oops")

    with pytest.raises(PolicyError, match=r"policy 'broken' failed on pod .*/web: ZeroDivision"):
        what_if(cache, at, {"broken": broken}, pods)
    with pytest.raises(PolicyError, match="answered 3 for pod"):
        what_if(cache, at, {"number": lambda s, p: 3}, pods)  # type: ignore[arg-type,return-value]
    with pytest.raises(PolicyError, match=r"chose 'elsewhere' for pod .*/web: not a node"):
        what_if(cache, at, {"lost": lambda s, p: "elsewhere"}, pods)


def test_a_policy_may_only_read_the_snapshot(cache: Cache) -> None:
    cache.add_node(make_node("a", "1", "2Gi"))
    cache.add_node(make_node("b", "1", "2Gi"))
    at = moment(cache)
    pods = [make_pod(f"p{i}", "", "600m", "1Gi", uid=f"p{i}") for i in range(3)]

    def drops_a_node(snapshot: Snapshot, pod: Pod) -> str | None:
        snapshot.node_infos.pop("b", None)
        return "a"

    def frees_its_node(snapshot: Snapshot, pod: Pod) -> str | None:
        info = snapshot.node_infos["a"]
        info.requested = type(info.requested)()  # "empty": everything fits on a
        return "a"

    def frees_another(snapshot: Snapshot, pod: Pod) -> str | None:
        snapshot.node_infos["b"].requested = type(snapshot.node_infos["b"].requested)(7)
        return None

    def exits(snapshot: Snapshot, pod: Pod) -> str | None:
        raise SystemExit(0)

    for policy in (drops_a_node, frees_its_node, frees_another):
        with pytest.raises(PolicyError, match=f"policy '{policy.__name__}' changed the snapshot"):
            what_if(cache, at, {policy.__name__: policy}, pods)
    with pytest.raises(PolicyError, match=r"policy 'exits' failed on pod .*SystemExit"):
        what_if(cache, at, {"exits": exits}, pods)


def test_what_happened_on_a_node_that_came_later_is_not_placed(cache: Cache) -> None:
    cache.add_node(make_node("early", "4", "8Gi"))
    at = moment(cache)
    cache.add_node(make_node("later", "4", "8Gi"))
    cache.assume_pod(make_pod("p", "later", "1", "1Gi", uid="p"))
    actual = what_if(cache, at, {}).outcomes[0]
    assert actual.placements == {"p": None} and actual.placed == 0
    assert actual.reasons["p"] == f"claimed on later, not a node at {at}"


def test_the_largest_moment_has_nothing_after_it(cache: Cache) -> None:
    cache.add_node(make_node("a", "1", "2Gi"))
    last = f"{2**64 - 1}-{2**64 - 1}"
    assert what_if(cache, last, BUILT_IN).pods == {}


def test_load_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_policy("most-allocated") is most_allocated
    (tmp_path / "mine.py").write_text("def first(snapshot, pod):\n    return 'x'\nVALUE = 1\n")
    (tmp_path / "broken.py").write_text("import nothing_here\n")
    assert load_policy(f"{tmp_path / 'mine.py'}:first")(Snapshot(), make_pod("a")) == "x"
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_policy("mine:first")(Snapshot(), make_pod("a")) == "x"
    for spec, message in [
        ("spread", "not a built-in"),
        ("mine:missing", "module mine has no 'missing'"),
        ("mine:VALUE", "'VALUE' is not callable"),
        ("broken:f", "importing broken failed: ModuleNotFoundError"),
        ("nofile.py:f", "no Python file nofile.py"),
        (f"{tmp_path}:f", "is a directory"),
    ]:
        with pytest.raises(PolicyError, match=message):
            load_policy(spec)


# -- the command ---------------------------------------------------------------------------


@pytest.fixture
def run_cli(client, cache_name, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)

    def run(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(main, ["--cache", cache_name, *args], catch_exceptions=False)

    return run


def test_the_command_compares_and_writes_nothing(cache: Cache, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    at = history(cache)
    keys_before = sorted(cache.store.route.get().keys(cache.keys.pattern))
    length = cache.stream_length()
    result = run_cli("whatif", "--at", at)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"what-if at {at}: 12 pods on 6 nodes")
    rows = {line.split()[0]: line.split() for line in lines if line.strip()}
    assert rows["actual"][1:4] == ["12", "0", "-"]
    assert rows["least-allocated"][4] == "6" and int(rows["most-allocated"][4]) < 6
    assert rows["z0"][1] == "8%"  # before: the resident pod, 1 CPU of the 12 in zone z0
    assert "most-allocated:" in result.output and "placed elsewhere, first:" in result.output

    mine = tmp_path / "mine.py"
    mine.write_text(
        "def last(snapshot, pod):\n    print('thinking')\n"
        "    return snapshot.node_info_list[-1].name\n"
    )
    pods = tmp_path / "pods.yaml"
    pods.write_text(json.dumps(pod_manifest("extra", "", "100m", "1Mi", uid="extra")))
    result = run_cli(
        "whatif", "--at", at, "--policy", f"{mine}:last", "--pods", str(pods), "-o", "json"
    )
    assert result.exit_code == 0, result.output
    parsed = json.loads(result.stdout)  # what the policy printed went to stderr
    assert "thinking" in result.stderr
    assert parsed["pods"] == {"extra": "node_info_cache_test/extra"}
    actual, last = parsed["outcomes"]
    assert actual["placements"] == {"extra": None} and last["placements"] == {"extra": "n5"}
    assert sorted(cache.store.route.get().keys(cache.keys.pattern)) == keys_before
    assert cache.stream_length() == length


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at", "nonsense"], "is not an event id"),
        (["--at", "1-0", "--policy", "spread"], "not a built-in"),
        (["--policy", "os:getcwd"], "failed on pod"),
        (["--at", "1-0"], "is before the first event of cache"),
        (["--pods", "{nodes}"], "--pods takes pods only"),
        (["--pods", "{empty}"], "no pods in the file"),
        (["--pods", "{bad}"], "spec.containers"),
        (["--pods", "{twice}"], "is both"),
        (["--pods", "{notobjects}"], "--pods"),
        (["--html", ""], "must name a file"),
        # (found in review, mended: a bare "[Errno 2]" after the whole replay)
        (["--html", "/nonexistent-dir/r.html"], "its directory /nonexistent-dir does not exist"),
        (["--html", "{empty}/r.html"], "/empty is not a directory"),  # (third review)
        (["--html", "{empty}-dir/"], "must name a file, not a directory"),  # (third review)
        (["--at", "\u0663-0"], "is not an event id"),
        ([], "no pods to place"),
    ],
)
def test_bad_input_is_one_error_line(
    cache: Cache,
    run_cli,
    tmp_path: Path,
    args: list[str],
    message: str,  # type: ignore[no-untyped-def]
) -> None:
    at = history(cache)
    files = {
        "nodes": json.dumps(node_manifest("x", "1", "1Gi")),
        "empty": "",
        "bad": json.dumps({**pod_manifest("x", "", "1", "1Gi"), "spec": {"containers": 3}}),
        "twice": json.dumps(
            {
                "kind": "List",
                "items": [pod_manifest("a", "", uid="same"), pod_manifest("b", "", uid="same")],
            }
        ),
        "notobjects": "[1, 2]",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    args = [a.format(**{n: str(tmp_path / n) for n in files}) for a in args]
    if "--at" not in args:
        args = ["--at", moment(cache) if not args else at, *args]
    result = run_cli("whatif", *args)
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_the_html_report_renders_in_a_browser(cache: Cache, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The page opens offline in headless Chromium and draws every outcome; it is small (no
    plotting library inside: plotly's made 4.8 MB for 6 nodes) and titled with a time a
    person reads, not the raw stream id."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "headless Chromium is needed (.ci/run installs Debian's chromium)"
    at = history(cache)
    page = tmp_path / "report.html"
    result = run_cli("whatif", "--at", at, "--html", str(page))
    assert result.exit_code == 0 and f"report written to {page}" in result.output
    text = page.read_text()
    assert "<script" not in text and "<link" not in text  # self-contained, nothing to run
    assert len(text.encode()) < 60_000, len(text.encode())  # 6 nodes, 3 outcomes and before
    when = datetime.fromtimestamp(int(at.split("-")[0]) / 1000, tz=UTC)
    title = re.findall(r"<title>(.*?)</title>", text)[0]  # the page's (bars have theirs)
    assert when.strftime("%Y-%m-%d %H:%M:%S") in title and at not in title
    assert title.startswith("schedcache what-if: 12 pods after ")
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--proxy-server=127.0.0.1:9",  # nothing from the network: it must draw offline
            "--proxy-bypass-list=<-loopback>",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert dom.count("<svg") == 4  # per node cpu and memory, ranked, per zone
    legend = dom[dom.index('<ul id="legend">') :]
    for name in ("before", "actual", "least-allocated", "most-allocated"):
        assert f"</span>{name}</li>" in legend  # a legend entry per outcome
    # A bar per node and outcome for cpu and memory, per zone and outcome; a line per outcome.
    assert dom.count('class="bar"') == 6 * 4 * 2 + 2 * 4
    assert dom.count('class="line"') == 4
    assert "n3, least-allocated: " in dom  # each bar says what it is when hovered


def test_a_stream_id_reads_as_a_time() -> None:
    assert time_of("1795567629006-2") == "2026-11-25 00:47:09.006 UTC"
    assert time_of("not-an-id") == "not-an-id"
