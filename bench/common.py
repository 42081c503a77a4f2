"""Shared helpers of the benchmarks: medians, tables, result files."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def import_schedcache_from(tree: str) -> None:
    """Import the ``schedcache`` package of another checkout before anything imports ours;
    its submodules (and its ``lua/``, found beside the package) follow from its __path__.
    (This module imports no ``schedcache``: a bench calls this before its own imports.)"""
    package = Path(tree).resolve() / "schedcache"
    spec = importlib.util.spec_from_file_location(
        "schedcache", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None or not package.is_dir():
        raise SystemExit(f"--tree {tree}: no schedcache package there")
    module = importlib.util.module_from_spec(spec)
    sys.modules["schedcache"] = module
    spec.loader.exec_module(module)


def pod_manifest(
    name: str,
    uid: str,
    node: str = "",
    *,
    namespace: str = "bench",
    labels: dict[str, str] | None = None,
    cpu: str = "100m",
    memory: str = "64Mi",
    host_port: int | None = None,
) -> dict[str, Any]:
    """The benches' pod: one container of ``cpu`` and ``memory`` requests (no image), labelled
    ``app: bench`` unless ``labels``; bound to ``node`` when given, and with one host port."""
    container: dict[str, Any] = {
        "name": "c",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    if host_port is not None:
        container["ports"] = [{"containerPort": 80, "hostPort": host_port}]
    spec: dict[str, Any] = {"containers": [container]}
    if node:
        spec["nodeName"] = node
    metadata = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "labels": {"app": "bench"} if labels is None else labels,
    }
    return {"metadata": metadata, "spec": spec}


def timed(run: Callable[[], int], repeats: int, setup: Callable[[], None] | None = None) -> dict:
    """Run ``run`` (returning how many operations it did) ``repeats`` times; rates per second."""
    rates = []
    for _ in range(repeats):
        if setup:
            setup()
        start = time.perf_counter()
        done = run()
        rates.append(done / (time.perf_counter() - start))
    return {"median": statistics.median(rates), "runs": rates}


def print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(columns)]
    print(f"\n{title}")
    print("  ".join(str(c).ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(v).rjust(w) for v, w in zip(row, widths, strict=True)))


def write_results(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"machine": platform.node(), "python": platform.python_version(), **payload}
    path.write_text(json.dumps(payload, indent=2))
    return path


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1 (argparse reports anything else in one line)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def arrival_rate(text: str) -> float:
    """An argparse type: pods a second, a finite number of at least 0 (0: all before the start;
    found in review: -5, nan and inf ran as arrivals that created every pod at once)."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(text)
    return value


def arrivals_fit(rate: float, measured: int, timeout: float) -> str | None:
    """Why ``measured`` pods arriving ``rate`` a second cannot all arrive within a row's
    ``timeout`` seconds, or None."""
    if rate and measured / rate >= timeout:
        return (
            f"--arrival-rate {rate:g}: {measured:,} pods take {measured / rate:,.0f} s to arrive, "
            f"past the row's {timeout:g} s (raise the rate or lower --measured)"
        )
    return None


def start_server(
    directory: str, port: int, wrapper: list[str] | None = None, cores: set[int] | None = None
) -> subprocess.Popen:
    """A throwaway redis-server on a loopback port (no persistence), answering PING; run under
    ``wrapper`` (e.g. valgrind's command line) when given, on ``cores`` only when given. A port
    some Redis already answers on is refused: the benchmark would write into that one (its own
    fails to bind)."""
    if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout:
        raise RuntimeError(f"a Redis already answers on port {port}: pick a free one (--port)")
    server = subprocess.Popen(
        [
            *(wrapper or []),
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
        ],
        stdout=subprocess.DEVNULL,
        # Pinned in the child before the exec, so every thread Redis starts is pinned and a
        # set of CPUs it may not use fails here, before any server runs.
        preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
    )
    for _ in range(600 if wrapper else 100):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout:
            return server
        subprocess.run(["sleep", "0.05"])
    raise RuntimeError("redis-server did not start")


# The function-name suffix of the library loaded on each server (by port): a tree's build tags
# its functions (``sc_add_pod_<tag>``, store/library.py), an older tree's has none.
SUFFIXES: dict[int, str] = {}


def load_library(client: Any, text: str) -> None:
    """Load the library ``text`` on ``client``'s server and remember its functions' suffix."""
    client.function_load(text, replace=True)
    found = re.search(r"^local FUNCTION_SUFFIX = '([^']*)'", text, re.M)
    SUFFIXES[client.connection_pool.connection_kwargs["port"]] = found[1] if found else ""


def function_name(client: Any, command: str) -> str:
    """``command``'s function on the server of ``client`` (a client or its pipeline), as the
    library :func:`load_library` loaded there names it."""
    return f"sc_{command}{SUFFIXES[client.connection_pool.connection_kwargs['port']]}"


@contextmanager
def tree_servers(
    trees: list[str], port: int, directory: str, load: Callable[[str], str]
) -> Iterator[dict[str, Any]]:
    """One throwaway redis-server per source tree (ports ``port``, ``port + 1``, ...), each with
    the library ``load(tree)`` answers loaded: ``{tree: client}``; the servers stop after."""
    import redis  # the benchmarks' own dependency, not every helper's

    servers, clients = [], {}
    try:
        for offset, tree in enumerate(trees):
            servers.append(start_server(directory, port + offset))
            client = redis.Redis(port=port + offset)
            load_library(client, load(tree))
            clients[tree] = client
        yield clients
    finally:
        for server in servers:
            server.terminate()
            server.wait()
