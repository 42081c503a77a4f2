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

import pytest

from tests.apiserver import FakeApiServer
from tests.conftest import REAL_REDIS_URL
from tests.test_deploy import container, expand, render

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = json.loads((ROOT / "deploy/grafana/schedcache.json").read_text())
# Series that Prometheus makes itself, not the code.
PROMETHEUS_OWN = {"up"}
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


def test_every_metric_the_dashboard_queries_is_exported_by_a_component(tmp_path: Path) -> None:
    objects = render("deploy/overlays/redis-single")
    ports = {part: free_port() for part in ("extender", "sync", "expiry")}
    with FakeApiServer() as server:
        kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
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
        environment = {
            **os.environ,
            "SCHEDCACHE_REDIS_URL": REAL_REDIS_URL,
            "SCHEDCACHE_CACHE": f"deploy-{uuid.uuid4().hex[:8]}",
        }
        processes: dict[str, subprocess.Popen[str]] = {}
        try:
            for part, (spec, swaps) in runs.items():
                args = expand(spec["args"], spec["env"])
                for flag, value in swaps:
                    present = any(a == flag or a.startswith(f"{flag}=") for a in args)
                    args = swap(args, flag, value) if present else [*args, value]
                processes[part] = subprocess.Popen(
                    [sys.executable, "-m", "schedcache.cli", *args],
                    env=environment,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            pages = {
                part: scrape(f"http://127.0.0.1:{ports[part]}/metrics", processes[part])
                for part in runs
            }
            for process in processes.values():
                process.send_signal(signal.SIGTERM)
            for part, process in processes.items():
                _, err = process.communicate(timeout=30)
                assert process.returncode == 0 and "Traceback" not in err, f"{part}: {err}"
        finally:
            for process in processes.values():
                process.kill()
    names = set().union(*(exported(page) for page in pages.values()))
    # What each component is charted for is on its own page.
    assert "schedcache_extender_request_seconds_bucket" in exported(pages["extender"])
    assert "schedcache_sync_apply_seconds_bucket" in exported(pages["sync"])
    assert "schedcache_expired_pods_total" in exported(pages["expiry"])
    assert "schedcache_stream_length" in exported(pages["expiry"])
    queried = set().union(*(metric_names(expr) for expr in queries()))
    assert len(queried) >= 12
    assert queried - PROMETHEUS_OWN <= names, f"not exported: {queried - PROMETHEUS_OWN - names}"


@pytest.mark.parametrize("panel", [p for p in DASHBOARD["panels"] if p["type"] != "row"])
def test_every_panel_has_queries_on_the_chosen_namespace(panel: dict[str, object]) -> None:
    targets = panel["targets"]
    assert isinstance(targets, list) and targets, panel["title"]
    for target in targets:
        assert 'namespace="$namespace"' in target["expr"], panel["title"]
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
