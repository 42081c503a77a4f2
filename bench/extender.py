"""``schedcache extender`` latency and throughput, as kube-scheduler would meet them.

A redis-server of its own (free loopback port) holds a cache of ``--nodes`` nodes (a tenth
tainted, half with a zone label) and a few pods each; ``schedcache extender --no-api`` serves it
in a process of its own (the bind's cache part only: the API call is excluded, as the target
says). Clients keep one HTTP connection each, as kube-scheduler does.

1. latency, one client: filter and prioritize over all ``--nodes`` node names, and bind, p50/p99
   (after one filter that builds the extender's snapshot: later calls catch it up
   incrementally);
2. binds/s with 1, 4 and 8 concurrent clients (processes), each binding its own pods (filtered
   once beforehand over one node, so the extender knows them).

Each is measured for several variants in one run, on the same Redis and cache: ``before``
(the extender of ``--before``, a git revision, extracted with ``git archive`` and run from
there), ``after`` (this tree, plain HTTP on loopback) and ``after+mTLS`` (this tree serving
HTTPS and requiring client certificates, certificates made with ``openssl``; clients keep their
TLS connection, as kube-scheduler's does).

Prints a table and writes ``bench/results/extender.json``.

    python bench/extender.py [--nodes 1000 --requests 300 --binds 2000 --before 9b39770]
    python bench/extender.py --nodes 5000 --requests 200 --latency-only --before main

(``--latency-only``: filter and prioritize on a large cluster, no binds/s and no mTLS variant;
issue 34's columns are measured so, 5,000 nodes against the revision before them.)

Targets (issue 17): filter over 1,000 node names p99 <= 20 ms; bind p99 <= 5 ms; binds/s grows
from 1 to 4 clients.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import print_table, start_server, write_results
from schedcache import Cache, Node, Pod

CACHE = "bench-extender"


def node(i: int) -> Node:
    spec: dict[str, Any] = {}
    if i % 10 == 0:
        spec["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
    labels = {"topology.kubernetes.io/zone": f"z{i % 3}"} if i % 2 else {}
    return Node.from_k8s(
        {
            "kind": "Node",
            "metadata": {"name": f"node-{i:04}", "labels": labels},
            "spec": spec,
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
        }
    )


def pod(name: str, node_name: str = "") -> dict[str, Any]:
    requests = {"cpu": "10m", "memory": "16Mi"}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "app:1", "resources": {"requests": requests}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": spec,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TLS: dict[str, str] = {}  # ca, cert, key: set for the mTLS variant (forked clients inherit it)


class Client:
    """One kept-alive HTTP (or mutual-TLS) connection to the extender."""

    def __init__(self, port: int) -> None:
        if TLS:
            context = ssl.create_default_context(cafile=TLS["ca"])
            context.load_cert_chain(TLS["cert"], TLS["key"])
            self.connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                "127.0.0.1", port, timeout=30, context=context
            )
        else:
            self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(self, verb: str, body: Any) -> tuple[float, Any]:
        data = json.dumps(body)
        started = time.perf_counter()
        self.connection.request(
            "POST", f"/scheduler/{verb}", data, {"Content-Type": "application/json"}
        )
        response = self.connection.getresponse()
        answer = json.loads(response.read())
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"{verb}: {response.status} {answer}")
        return elapsed, answer


def percentile(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def latency(port: int, nodes: list[str], requests: int, tag: str) -> dict[str, dict[str, float]]:
    client = Client(port)
    client.post("filter", {"Pod": pod("warm-up"), "NodeNames": nodes})  # builds the snapshot
    timings: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": []}
    for i in range(requests):
        manifest = pod(f"{tag}lat-{i}")
        args = {"Pod": manifest, "NodeNames": nodes}
        seconds, answer = client.post("filter", args)
        timings["filter"].append(seconds)
        feasible = answer["NodeNames"]
        seconds, ranked = client.post("prioritize", {"Pod": manifest, "NodeNames": feasible})
        timings["prioritize"].append(seconds)
        best = max(ranked, key=lambda entry: entry["Score"])["Host"]
        name = f"{tag}lat-{i}"
        binding = {"PodName": name, "PodNamespace": "bench", "PodUID": f"uid-{name}"}
        seconds, result = client.post("bind", {**binding, "Node": best})
        assert not result["Error"], result
        timings["bind"].append(seconds)
    return {
        verb: {"p50 ms": percentile(v, 50) * 1000, "p99 ms": percentile(v, 99) * 1000}
        for verb, v in timings.items()
    }


def binder(port: int, names: list[str], nodes: list[str], out: Any, go: Any) -> None:
    client = Client(port)
    for index, name in enumerate(names):  # known to the extender before the clock starts
        client.post("filter", {"Pod": pod(name), "NodeNames": [nodes[index % len(nodes)]]})
    out.put("ready")
    go.wait()
    started = time.perf_counter()
    for index, name in enumerate(names):
        body = {"PodName": name, "PodNamespace": "bench", "PodUID": f"uid-{name}"}
        _, result = client.post("bind", {**body, "Node": nodes[index % len(nodes)]})
        assert not result["Error"], result
    out.put(time.perf_counter() - started)


def throughput(port: int, nodes: list[str], clients: int, binds: int, tag: str) -> float:
    context = multiprocessing.get_context("fork")
    queues = [context.Queue() for _ in range(clients)]
    go = context.Event()
    share = binds // clients
    processes = [
        context.Process(
            target=binder,
            args=(port, [f"{tag}-{c}-{i}" for i in range(share)], nodes[c::clients], queues[c], go),
        )
        for c in range(clients)
    ]
    for process in processes:
        process.start()
    for q in queues:
        assert q.get(timeout=300) == "ready"
    started = time.perf_counter()
    go.set()
    for q in queues:
        q.get(timeout=300)
    elapsed = time.perf_counter() - started
    for process in processes:
        process.join()
    return share * clients / elapsed


def make_pki(directory: Path) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=bench ca")
    for name, usage in (("server", "serverAuth"), ("client", "clientAuth")):
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        ext = f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n"
        (directory / f"{name}.ext").write_text(ext)
        run(
            *("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key"),
            *("-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext"),
        )
    return {
        name: str(directory / name)
        for name in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")
    }


def extract(revision: str, directory: Path) -> Path:
    """The tree of ``revision`` (``git archive``), to run the earlier extender from."""
    root = Path(__file__).resolve().parent.parent
    tree = directory / "before"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", revision, "schedcache", "lua"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def measure(
    args: argparse.Namespace, url: str, names: list[str], tree: Path, tag: str, extra: list[str]
) -> tuple[dict[str, dict[str, float]], dict[int, float]]:
    """Latency and binds/s of one extender, run from ``tree``."""
    port = free_port()
    cli = [sys.executable, "-m", "schedcache.cli", "--redis", url, "--cache", CACHE]
    extender = subprocess.Popen(
        [
            *cli,
            "extender",
            "--no-api",
            "--listen",
            f"127.0.0.1:{port}",
            "--url-prefix",
            "/scheduler",
            *extra,
        ],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        started = cpu_seconds(extender.pid)
        lat = latency(port, names, args.requests, tag)
        # Nodes the latency round did not fill (its binds go to the best-scored ones), and
        # not tainted.
        spare = [x for i, x in enumerate(names) if i % 10 and i >= args.nodes // 10]
        clients = [] if args.latency_only else args.clients
        rates = {n: throughput(port, spare, n, args.binds, f"{tag}{n}") for n in clients}
        served = 1 + 3 * args.requests + sum(2 * (args.binds // n) * n for n in clients)
        # CPU per request: what a shared machine's noise barely moves.
        lat["cpu per request"] = {"us": (cpu_seconds(extender.pid) - started) / served * 1e6}
    finally:
        extender.terminate()
        extender.wait(10)
    return lat, rates


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Measured = tuple[dict[str, dict[str, float]], dict[int, float]]


def best(old: Measured | None, new: Measured) -> Measured:
    """The lower latencies and the higher rates of two rounds."""
    if old is None:
        return new
    latency = {
        verb: {key: min(value, new[0][verb][key]) for key, value in timings.items()}
        for verb, timings in old[0].items()
    }
    return latency, {n: max(rate, new[1][n]) for n, rate in old[1].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--binds", type=int, default=2000, help="per client count")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--port", type=int, default=6495)
    parser.add_argument("--before", default="", help="git revision to compare with")
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="latency alone (no binds/s, no mTLS variant): filter/prioritize on large clusters",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="variants interleaved this many times; best kept"
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(directory, args.port)
        url = f"redis://127.0.0.1:{args.port}/0"
        cache = Cache(redis.Redis.from_url(url), CACHE)
        names = [f"node-{i:04}" for i in range(args.nodes)]
        with cache.batch() as batch:
            for i in range(args.nodes):
                batch.add_node(node(i))
            for i in range(args.nodes * 5):
                batch.add_pod(Pod.from_k8s(pod(f"running-{i}", names[i % args.nodes])))
        here = Path(__file__).resolve().parent.parent
        pki = make_pki(Path(directory))
        variants: list[tuple[str, Path, list[str]]] = []
        if args.before:
            variants.append((f"before ({args.before})", extract(args.before, Path(directory)), []))
        variants.append(("after", here, []))
        tls = ["--tls-cert-file", pki["server.crt"], "--tls-private-key-file", pki["server.key"]]
        if not args.latency_only:
            variants.append(("after+mTLS", here, [*tls, "--client-ca-file", pki["ca.crt"]]))
        try:
            # Interleaved rounds, the best of each kept: a shared machine's noise hits every
            # variant alike rather than the one that ran while something else did.
            for round_ in range(args.rounds):
                for index, (label, tree, extra) in enumerate(variants):
                    TLS.clear()
                    if extra:
                        TLS.update(ca=pki["ca.crt"], cert=pki["client.crt"], key=pki["client.key"])
                    got = measure(args, url, names, tree, f"r{round_}v{index}-", extra)
                    results[label] = best(results.get(label), got)
        finally:
            server.terminate()
            server.wait()
    print_table(
        f"extender latency over {args.nodes:,} node names ({args.requests} requests, 1 client)",
        ["variant", "verb", "p50 ms", "p99 ms"],
        [
            [label, verb, f"{v['p50 ms']:.2f}", f"{v['p99 ms']:.2f}"]
            for label, (lat, _) in results.items()
            for verb, v in lat.items()
            if "p50 ms" in v
        ],
    )
    print_table(
        "extender CPU per request (all verbs, both phases; the least of the rounds)",
        ["variant", "CPU us"],
        [[label, f"{lat['cpu per request']['us']:.0f}"] for label, (lat, _) in results.items()],
    )
    first = next(iter(results.values()))[1]
    if not args.latency_only:
        print_table(
            "binds/s (cache part; the API call excluded)",
            ["variant", "clients", "binds/s", "vs first variant"],
            [
                [label, n, f"{rate:.0f}", f"{rate / first[n]:.2f}x"]
                for label, (_, rates) in results.items()
                for n, rate in rates.items()
            ],
        )
    path = write_results(
        "extender",
        {
            "args": vars(args),
            "variants": {
                label: {"latency": lat, "binds_per_s": rates}
                for label, (lat, rates) in results.items()
            },
        },
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
