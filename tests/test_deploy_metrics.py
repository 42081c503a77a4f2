"""The Grafana dashboard (deploy/grafana/schedcache.json) queries only metrics that the
components export.

The exported names are read where Prometheus reads them: each component is started as its
container in deploy/ runs it (the manifest's own arguments, with the cluster-only ones swapped
for the test's: a fake API server's kubeconfig instead of --in-cluster, free ports), against
the test Redis, and its /metrics is scraped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from schedcache import Cache
from tests.apiserver import FakeApiServer
from tests.conftest import REAL_REDIS_URL, real_client
from tests.test_deploy import container, expand, render

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = json.loads((ROOT / "deploy/grafana/schedcache.json").read_text())
# Series that Prometheus makes itself, not the code.
PROMETHEUS_OWN = {"up"}
ENVIRONMENT = {
    **os.environ,
    "SCHEDCACHE_REDIS_URL": REAL_REDIS_URL,
    "SCHEDCACHE_CACHE": f"deploy-{uuid.uuid4().hex[:8]}",
}
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def queries() -> Iterator[str]:
    """Every PromQL expression of the dashboard: panel targets and template variables."""
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["definition"]


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: identifiers that are not functions, keywords,
    label names (inside ``{}`` or ``by (...)``), durations or Grafana variables."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\{?\w+\}?", "", expr)
    expr = re.sub(r"label_values\((\w+),\s*\w+\)", r"\1", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)\s*(\()?", expr):
        if match[2] is None and match[1].lower() not in PROMQL_WORDS:
            names.add(match[1])
    return names


def exported(text: str) -> set[str]:
    """The sample names a /metrics page can carry, read from its ``# TYPE`` lines (a labelled
    metric with no sample yet has only those)."""
    names = set()
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M):
        names.add(family)
        if kind == "histogram":
            names |= {f"{family}_bucket", f"{family}_sum", f"{family}_count"}
    return names


def test_the_metric_names_are_read_from_promql_as_prometheus_would() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, pod) (rate(a_seconds_bucket{ns="$ns", '
        'verb!="bind"}[$__rate_interval]))) / on (pod) group_left b_total offset 5m'
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total"}
    assert metric_names("label_values(c_size, namespace)") == {"c_size"}


def scrape(url: str, process: subprocess.Popen[str], timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return str(response.read().decode())
        except OSError:
            if process.poll() is not None:
                raise AssertionError(f"{process.args} exited: {process.communicate()}") from None
            assert time.monotonic() < deadline, f"{url} did not answer"
            time.sleep(0.1)


def swap(args: list[str], flag: str, value: str | None) -> list[str]:
    """``args`` with ``flag`` (``--flag`` or ``--flag=...``) replaced by ``value`` (dropped when
    None); the flag must be there."""
    out = [a for a in args if a != flag and not a.startswith(f"{flag}=")]
    assert len(out) == len(args) - 1, f"{flag} is not in {args}"
    return out if value is None else [*out, value]


def launch(
    spec: dict[str, Any], swaps: list[tuple[str, str]], environment: dict[str, str]
) -> subprocess.Popen[str]:
    """The container ``spec``'s command, its args expanded as the kubelet does and each
    ``(flag, value)`` of ``swaps`` put in place of ``flag`` (or added)."""
    args = expand(spec["args"], spec["env"])
    for flag, value in swaps:
        present = any(a == flag or a.startswith(f"{flag}=") for a in args)
        args = swap(args, flag, value) if present else [*args, value]
    return subprocess.Popen(
        [sys.executable, "-m", "schedcache.cli", *args],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


class Component(NamedTuple):
    container: dict[str, Any]  # as deploy/ runs it
    port: int  # where this test serves what the manifest serves on its own port
    process: subprocess.Popen[str]


@pytest.fixture(scope="module")
def components(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Component]]:
    """The extender, a feeder and the expiry worker, each started as its container in
    redis-single runs it (the manifest's args after the kubelet's expansion), with only what
    needs a cluster swapped for the test's: a fake API server's kubeconfig for --in-cluster,
    --no-api for the extender, free loopback ports."""
    objects = render("deploy/overlays/redis-single")
    ports = {part: free_port() for part in ("extender", "sync", "expiry")}
    with FakeApiServer() as server:
        kubeconfig = str(server.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig"))
        runs = {
            "extender": (
                container(objects, "schedcache-scheduler", "extender"),
                [
                    ("--in-cluster", "--no-api"),
                    ("--listen", f"--listen=127.0.0.1:{ports['extender']}"),
                ],
            ),
            "sync": (
                container(objects, "schedcache-sync", "sync"),
                [
                    ("--in-cluster", f"--kubeconfig={kubeconfig}"),
                    ("--metrics-port", f"--metrics-port={ports['sync']}"),
                    ("--metrics-address", "--metrics-address=127.0.0.1"),
                ],
            ),
            "expiry": (
                container(objects, "schedcache-worker", "expiry"),
                [
                    ("--metrics-port", f"--metrics-port={ports['expiry']}"),
                    ("--metrics-address", "--metrics-address=127.0.0.1"),
                ],
            ),
        }
        started: dict[str, Component] = {}
        try:
            for part, (spec, swaps) in runs.items():
                started[part] = Component(spec, ports[part], launch(spec, swaps, ENVIRONMENT))
            yield started
            for component in started.values():
                component.process.send_signal(signal.SIGTERM)
            for part, component in started.items():
                _, err = component.process.communicate(timeout=30)
                assert component.process.returncode == 0, f"{part}: {err}"
                assert "Traceback" not in err, f"{part}: {err}"
        finally:
            for component in started.values():
                component.process.kill()
            Cache(real_client(), ENVIRONMENT["SCHEDCACHE_CACHE"]).clear()


def page(component: Component) -> str:
    return scrape(f"http://127.0.0.1:{component.port}/metrics", component.process)


def test_every_metric_the_dashboard_queries_is_exported_by_a_component(
    components: dict[str, Component],
) -> None:
    pages = {part: page(component) for part, component in components.items()}
    names = set().union(*(exported(text) for text in pages.values()))
    # What each component is charted for is on its own page.
    assert "schedcache_extender_request_seconds_bucket" in exported(pages["extender"])
    assert "schedcache_sync_apply_seconds_bucket" in exported(pages["sync"])
    assert "schedcache_expired_pods_total" in exported(pages["expiry"])
    assert "schedcache_stream_length" in exported(pages["expiry"])
    queried = set().union(*(metric_names(expr) for expr in queries()))
    assert len(queried) >= 12
    assert queried - PROMETHEUS_OWN <= names, f"not exported: {queried - PROMETHEUS_OWN - names}"


def run_probe(command: list[str], environment: dict[str, str]) -> int:
    """An exec probe's exit status, run as the kubelet runs it in the container (the image's
    ``python`` is this test's interpreter)."""
    argv = [sys.executable if arg == "python" else arg for arg in command]
    return subprocess.run(argv, env=environment, capture_output=True, timeout=30).returncode


def test_the_probes_pass_on_running_components_and_fail_on_absent_ones(
    components: dict[str, Component],
) -> None:
    extender = components["extender"]
    page(extender)  # up
    for probe in ("livenessProbe", "readinessProbe"):
        command = extender.container[probe]["exec"]["command"]
        assert any("8888" in arg for arg in command)
        here = [arg.replace("8888", str(extender.port)) for arg in command]
        assert run_probe(here, ENVIRONMENT) == 0, probe
        nothing = [arg.replace("8888", str(free_port())) for arg in command]
        assert run_probe(nothing, ENVIRONMENT) != 0, probe
    for part in ("sync", "expiry"):
        component = components[part]
        page(component)
        spec = component.container
        assert spec["readinessProbe"]["httpGet"]["path"] == "/metrics"  # scraped above
        assert set(spec["livenessProbe"]) >= {"tcpSocket"}
        socket.create_connection(("127.0.0.1", component.port), timeout=5).close()
    compact = container(render("deploy/overlays/redis-single"), "schedcache-worker", "compact")
    command = compact["livenessProbe"]["exec"]["command"]
    assert compact["readinessProbe"]["exec"]["command"] == command
    assert run_probe(command, ENVIRONMENT) == 0
    away = {**ENVIRONMENT, "SCHEDCACHE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    assert run_probe(command, away) != 0


def test_the_extenders_readiness_follows_redis_and_its_liveness_does_not() -> None:
    """A Redis outage makes the extender unready (kube-scheduler's pod is then not ready
    either) but must not make the kubelet restart it."""
    redis_port, port = free_port(), free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    spec = container(render("deploy/overlays/redis-single"), "schedcache-scheduler", "extender")
    environment = {**ENVIRONMENT, "SCHEDCACHE_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}
    swaps = [("--in-cluster", "--no-api"), ("--listen", f"--listen=127.0.0.1:{port}")]
    process = None
    try:
        eventually_up = time.monotonic() + 10
        while (
            subprocess.run(["redis-cli", "-p", str(redis_port), "ping"], capture_output=True).stdout
            != b"PONG\n"
        ):
            assert time.monotonic() < eventually_up, "the test's redis-server did not start"
            time.sleep(0.05)
        process = launch(spec, swaps, environment)
        scrape(f"http://127.0.0.1:{port}/metrics", process)
        live, ready = (
            [arg.replace("8888", str(port)) for arg in spec[probe]["exec"]["command"]]
            for probe in ("livenessProbe", "readinessProbe")
        )
        assert run_probe(live, environment) == 0 and run_probe(ready, environment) == 0
        server.kill()
        server.wait(10)
        assert run_probe(ready, environment) != 0
        assert run_probe(live, environment) == 0
    finally:
        server.kill()
        if process is not None:
            process.kill()


@pytest.mark.parametrize("panel", [p for p in DASHBOARD["panels"] if p["type"] != "row"])
def test_every_panel_has_queries_on_the_chosen_namespace(panel: dict[str, object]) -> None:
    targets = panel["targets"]
    assert isinstance(targets, list) and targets, panel["title"]
    for target in targets:
        assert 'namespace="$namespace"' in target["expr"], panel["title"]
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_the_dashboards_panels_have_unique_ids_and_do_not_overlap() -> None:
    ids = [panel["id"] for panel in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in DASHBOARD["panels"]:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(box["x"], box["x"] + box["w"])
            for y in range(box["y"], box["y"] + box["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
