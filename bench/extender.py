"""``schedcache extender`` driven as kube-scheduler drives it: pods/s and per-verb latency.

Each row, on a Redis of its own (a free loopback port, flushed between rows) and a fresh fake
API server (tests/apiserver.py, a process of its own):

1. the API server holds ``--nodes`` nodes (bench/e2e.py's template: 4 cpu, 32Gi, 110 pods),
   ``--initial`` bound pods and ``--pods`` pending pods of scheduler ``bench`` (100m, 500Mi);
2. one ``schedcache sync --no-queue`` (as deploy/ runs it) lists and watches them into the
   cache;
3. ``--extenders`` N ``schedcache extender`` processes with the API server's kubeconfig (the
   sidecar deployment: one per kube-scheduler replica), and N clients (processes), client i
   talking to extender i over one kept-alive connection, one pod after another, as
   kube-scheduler's scheduling cycle does (``--binding``: ``serial`` binds each pod before the
   next pod's cycle, as every round before the eleventh measured; ``async`` binds on up to
   ``--bind-workers`` threads, each with a kept-alive connection of its own, while the next
   pods are filtered and scored, as kube-scheduler runs each binding cycle in a goroutine of
   its own: pkg/scheduler/schedule_one.go, "bind the pod to its host asynchronously");
4. per pod, profile ``full``: ``filter`` with ``--sample`` node names (kube-scheduler's sample:
   it sends the nodes its own filters passed, ``percentageOfNodesToScore`` of them, starting
   where the previous pod's search stopped), ``prioritize`` with those the filter kept, then
   ``bind`` to the best (each sends the pod as the API server holds it, its resourceVersion
   included, as kube-scheduler sends its informer's copy); profile ``bind-only``
   (deploy/overlays/bind-only): kube-scheduler filters and scores in process, so the client
   picks the node itself (round robin over the nodes) and calls ``bind`` alone (``async``
   then keeps ``--bind-workers`` binds in flight: its cycles take no time, where
   kube-scheduler's own take ~1.5 ms at 5,000 nodes). A bind answered with ``Error`` is
   retried (a new cycle), as kube-scheduler retries a pod whose bind failed;
5. the clock runs from the clients' start until every client has bound its pods: **pods/s**;
   then checks on the API server's own objects: nodes over allocatable, Bindings refused as
   already bound (a pod bound twice), pods left unbound. Redis CPU per pod is the server's
   own (``INFO cpu``) over the measured phase, so it includes ``sync`` confirming each binding.

``--bind-pod-from-filter`` adds full-profile rows of this tree's extenders with that option and
``--no-pending-watch`` (a bind claims the pod its filter call decoded, without reading it from
the API server; the watch's copy would come first). This tree's own rows bind from the pending
pods' watch (on by default); the pending pods exist before the extenders start, so their
decoding by the watch falls before the measured phase (docs/extender.md, fourth round).

``--node-names cloud`` names the nodes as EKS does (ip-10-0-0-17.eu-west-1.compute.internal,
~40 characters, against node-17's 7): what a cloud's kube-scheduler sends, five times the bytes
a name list holds.

``--before REV`` adds rows for the extender of a git revision (``git archive``), the rest of the
harness (sync, API server, clients) this tree's, interleaved with this tree's rows.

    python bench/extender.py --nodes 5000 --pods 1000 --sample 500 --extenders 1 4 \\
        --profiles full bind-only --before 54b1d0e [--binding serial async]

Prints a table and writes ``bench/results/extender.json``. Targets (issue 43), 5,000 nodes,
500 names a call, one client: >= 300 pods/s through filter, prioritize and bind, >= 600 pods/s
bind-only; four extenders and four clients >= 2x one.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import queue
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import positive, print_table, start_server, write_results
from bench.e2e import (
    API,
    NODE_NAMES,
    SCHEDULER,
    api_server,
    cpu_seconds,
    node_name,
    pod,
    received,
    redis_cpu,
    wait_for,
)

CACHE = "bench-extender"
ROOT = Path(__file__).resolve().parent.parent
VERBS = ("filter", "prioritize", "bind")
MAX_ATTEMPTS = 20  # scheduling cycles a pod may take; then it is left unbound (the checks)
MAX_BIND_WORKERS = 64  # with the cycles' own, well within an extender's --max-connections


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Client:
    """One kept-alive HTTP/1.1 connection to one extender, as kube-scheduler's extender client
    (Go's net/http): each request written in one send with TCP_NODELAY, of each answer only the
    status line and its framing read (``Content-Length`` or chunks; a new connection after an
    answer that closes it). ``http.client`` parsed every answer's headers with
    the ``email`` package and built its request line by line: ~0.1-0.2 ms of this client's CPU
    a request on the 2-core machine, three a pod, competing for the cores with what is measured
    (kube-scheduler's own HTTP is a few tens of µs). The JSON of bodies and answers is still
    written and read whole, as kube-scheduler does."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = self._connect()
        self.heads = {
            verb: (
                f"POST /scheduler/{verb} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nContent-Length: "
            ).encode()
            for verb in VERBS
        }
        self.unread = b""  # bytes received past the last answer (none with one in flight)
        self.seconds: dict[str, list[float]] = {verb: [] for verb in VERBS}

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def post(self, verb: str, body: Any) -> Any:
        data = json.dumps(body).encode()
        if self.sock is None:  # the last answer closed the connection: a new one, as Go's
            self.sock, self.unread = self._connect(), b""
        started = time.perf_counter()
        self.sock.sendall(b"%s%d\r\n\r\n%s" % (self.heads[verb], len(data), data))
        status, data, closing = self._answer(self.sock)
        # The wire's time: this client's own JSON work (Python's, slower than kube-scheduler's
        # Go) is left out on both sides.
        self.seconds[verb].append(time.perf_counter() - started)
        if closing:
            self.sock.close()
            self.sock = None
        if status != 200:  # (before decoding: aiohttp's own errors are text)
            raise RuntimeError(f"{verb}: {status} {data[:1000]!r}")
        return json.loads(data)

    def _answer(self, sock: socket.socket) -> tuple[int, bytes, bool]:
        """The next answer's status, body (framed by ``Content-Length`` or chunked) and whether
        it closes the connection."""
        received = self.unread
        while (end := received.find(b"\r\n\r\n")) < 0:
            received += self._more(sock)
        head, received = received[:end], received[end + 4 :]
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        closing = fields.get(b"connection") == b"close"
        if fields.get(b"transfer-encoding") == b"chunked":
            body, self.unread = self._chunked(sock, received)
            return status, body, closing
        if b"content-length" not in fields:
            raise RuntimeError(f"an answer without Content-Length nor chunks: {head!r}")
        length = int(fields[b"content-length"])
        while len(received) < length:
            received += self._more(sock)
        self.unread = received[length:]
        return status, received[:length], closing

    def _chunked(self, sock: socket.socket, received: bytes) -> tuple[bytes, bytes]:
        """A chunked body and the bytes past it (trailer fields, if any, skipped)."""
        chunks = []
        while True:
            while (end := received.find(b"\r\n")) < 0:
                received += self._more(sock)
            size = int(received[:end].split(b";")[0], 16)
            received = received[end + 2 :]
            if not size:
                while not received.startswith(b"\r\n") and b"\r\n\r\n" not in received:
                    received += self._more(sock)
                ended = 2 if received.startswith(b"\r\n") else received.index(b"\r\n\r\n") + 4
                return b"".join(chunks), received[ended:]
            while len(received) < size + 2:
                received += self._more(sock)
            chunks.append(received[:size])
            received = received[size + 2 :]

    @staticmethod
    def _more(sock: socket.socket) -> bytes:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the extender closed the connection")
        return chunk


def client(
    port: int,
    index: int,
    args: argparse.Namespace,
    profile: str,
    conn: Connection,
    go: Any,
    pending: dict[str, Any],
) -> None:
    """Places its share of the pending pods, one scheduling cycle after another; sends its
    timings back. Each filter and prioritize call sends the pod as the API server holds it
    (``pending``: its resourceVersion, uid and creationTimestamp included), as kube-scheduler
    sends its informer's copy. ``args.binding``: ``serial`` binds each pod before the next
    cycle; ``async`` hands each bind to one of ``--bind-workers`` threads, each on a
    kept-alive connection of its own, and goes on with the next pod, as kube-scheduler binds
    in a goroutine of its own (pkg/scheduler/schedule_one.go: "bind the pod to its host
    asynchronously"); a refused bind puts the pod back at the end of the cycles' queue."""
    names = [node_name(i, args.node_names) for i in range(args.nodes)]
    mine = [f"measured-{i}" for i in range(index, args.pods, args.clients)]
    http_client = Client(port)
    start = index * len(names) // args.clients  # each replica's search starts elsewhere
    refused = 0

    def schedule(name: str) -> str | None:
        """One scheduling cycle: the node to bind ``name`` to, or None when none passed."""
        nonlocal start
        manifest = pending.get(name) or pod(name)
        if profile != "full":
            chosen = names[start]
            start = (start + 1) % len(names)
            return chosen
        sample = [names[(start + k) % len(names)] for k in range(args.sample)]
        start = (start + args.sample) % len(names)
        kept = http_client.post("filter", {"Pod": manifest, "NodeNames": sample})
        feasible = kept["NodeNames"] or []
        if not feasible:
            return None
        ranked = http_client.post("prioritize", {"Pod": manifest, "NodeNames": feasible})
        return str(max(ranked, key=lambda entry: entry["Score"])["Host"])

    def binding(name: str, chosen: str) -> dict[str, str]:
        return {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-{name}", "Node": chosen}

    conn.send("ready")
    go.wait()
    began = time.perf_counter()
    if args.binding == "serial":
        for name in mine:
            for _attempt in range(MAX_ATTEMPTS):
                chosen = schedule(name)
                if (
                    chosen is not None
                    and not http_client.post("bind", binding(name, chosen))["Error"]
                ):
                    break
                refused += 1
        seconds = http_client.seconds
    else:
        jobs: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        ended: queue.SimpleQueue[tuple[str, bool | BaseException]] = queue.SimpleQueue()
        binders = [Client(port) for _ in range(args.bind_workers)]

        def bind_worker(bind_client: Client) -> None:
            while (job := jobs.get()) is not None:
                name, chosen = job
                try:
                    answer = bind_client.post("bind", binding(name, chosen))
                except BaseException as error:  # the cycles' loop raises it (never waits on)
                    ended.put((name, error))
                    return
                ended.put((name, not answer["Error"]))

        threads = [threading.Thread(target=bind_worker, args=(b,), daemon=True) for b in binders]
        for thread in threads:
            thread.start()
        cycles: collections.deque[str] = collections.deque(mine)
        attempts: collections.Counter[str] = collections.Counter()
        outstanding = len(mine)
        while outstanding:
            # Binds that ended; waited for only when no pod is left to schedule.
            while not ended.empty() or not cycles:
                name, done = ended.get()
                if isinstance(done, BaseException):
                    raise RuntimeError(f"{name}: its bind failed: {done!r}") from done
                if done:
                    outstanding -= 1
                else:
                    refused += 1
                    cycles.append(name)
                if not outstanding:
                    break
            if not outstanding:
                break
            name = cycles.popleft()
            attempts[name] += 1
            if attempts[name] > MAX_ATTEMPTS:  # given up, as serial does: the checks count it
                outstanding -= 1
                continue
            chosen = schedule(name)
            if chosen is None:
                refused += 1
                cycles.append(name)
                continue
            jobs.put((name, chosen))
        for _ in threads:
            jobs.put(None)
        for thread in threads:
            thread.join()
        seconds = http_client.seconds
        for bind_client in binders:
            seconds["bind"] += bind_client.seconds["bind"]
    conn.send((time.perf_counter() - began, seconds, refused))


def bind_workers(text: str) -> int:
    count = positive(text)
    if count > MAX_BIND_WORKERS:
        raise argparse.ArgumentTypeError(f"{count} is more than {MAX_BIND_WORKERS}")
    return count


def answer(pipe: Connection, worker: Any) -> Any:
    """A client's timings; a client that died says so (found in review: a failed client left
    the row waiting on its pipe for ever)."""
    while not pipe.poll(1.0):
        if not worker.is_alive():
            raise RuntimeError(f"a client ended without its timings (exit {worker.exitcode})")
    return pipe.recv()


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def cli(url: str, tree: Path, entry: str = "") -> tuple[list[str], dict[str, str]]:
    """The CLI's command line from ``tree``; ``entry``: a script run instead of ``-m
    schedcache.cli`` (``--wrap``: a profiler around the extender)."""
    start = [entry] if entry else ["-m", "schedcache.cli"]
    command = [sys.executable, *start, "--redis", url, "--cache", CACHE]
    return command, {**os.environ, "PYTHONPATH": str(tree)}


def row(
    args: argparse.Namespace,
    url: str,
    tree: Path,
    profile: str,
    extenders: int,
    directory: str,
    flags: tuple[str, ...] = (),
    binding: str = "serial",
) -> dict[str, Any]:
    """One configuration: its pods/s, per-verb latency, checks and CPU."""
    args.binding = binding  # (the clients read it)
    redis.Redis.from_url(url).flushdb()
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    setup = argparse.Namespace(
        nodes=args.nodes,
        initial=args.initial,
        measured=args.pods,
        shape="basic",
        node_names=args.node_names,
    )
    api = context.Process(target=api_server, args=(theirs, setup, directory, ""), daemon=True)
    api.start()
    kubeconfig = received(ours, api, API)
    command, env = cli(url, ROOT)
    processes = [
        subprocess.Popen(
            [*command, "sync", "--kubeconfig", kubeconfig, "--no-queue"],
            env=env,
            stderr=subprocess.DEVNULL,
        )
    ]
    cache = redis.Redis.from_url(url)
    try:
        wait_for(
            lambda: cache.scard(f"{{{CACHE}}}:nodes") >= args.nodes,
            300,
            "sync's first list",
        )
        command, env = cli(url, tree, args.wrap)
        ports = [free_port() for _ in range(extenders)]
        for i, port in enumerate(ports):
            processes.append(
                subprocess.Popen(
                    [
                        *command,
                        "extender",
                        "--kubeconfig",
                        kubeconfig,
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--url-prefix",
                        "/scheduler",
                        "--scheduler-name",
                        SCHEDULER,
                        "--replica",
                        f"extender-{i}",
                        *flags,
                    ],
                    env=env,
                    cwd=tree,
                    stderr=subprocess.DEVNULL,
                )
            )
        for port in ports:
            wait_for(lambda port=port: listening(port), 300, "the extender")
        warm(ports, args.nodes, args.node_names)
        ours.send("pods")
        pending = received(ours, api, API)
        go = context.Event()
        args.clients = extenders
        pipes = []
        workers = []
        for i, port in enumerate(ports):
            mine, its = context.Pipe()
            worker = context.Process(target=client, args=(port, i, args, profile, its, go, pending))
            worker.start()
            pipes.append(mine)
            workers.append(worker)
        for pipe in pipes:
            assert pipe.recv() == "ready"
        pids = [p.pid for p in processes] + [api.pid, *(w.pid for w in workers)]
        slowlog_on(cache)
        before = [cpu_seconds(pid) for pid in pids] + [redis_cpu(url)]
        started = time.perf_counter()
        go.set()
        answers = [answer(pipe, worker) for pipe, worker in zip(pipes, workers, strict=True)]
        seconds = time.perf_counter() - started
        after = [cpu_seconds(pid) for pid in pids] + [redis_cpu(url)]
        by_caller = slowlog_read(cache)
        for worker in workers:
            worker.join(30)
        ours.send("check")
        checks: dict[str, int] = received(ours, api, API)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        ours.send("stop")
        api.join(30)
    used = [b - a for a, b in zip(before, after, strict=True)]
    # sync, the extenders, the API server, the clients, Redis
    harness = used[len(processes) :]
    timings: dict[str, list[float]] = {verb: [] for verb in VERBS}
    for _, seconds_of, _ in answers:
        for verb in VERBS:
            timings[verb] += seconds_of[verb]
    result: dict[str, Any] = {
        "pods/s": round(args.pods / seconds, 1),
        "refused binds": sum(refused for _, _, refused in answers),
        **checks,
    }
    for verb in VERBS:
        if timings[verb]:
            result[f"{verb} p50 ms"] = round(percentile(timings[verb], 50) * 1000, 2)
            result[f"{verb} p99 ms"] = round(percentile(timings[verb], 99) * 1000, 2)
    per_pod = 1e6 / args.pods
    result["extender CPU us/pod"] = round(sum(used[1 : len(processes)]) * per_pod)
    result["sync CPU us/pod"] = round(used[0] * per_pod)
    result["API server CPU us/pod"] = round(harness[0] * per_pod)
    result["clients CPU us/pod"] = round(sum(harness[1:-1]) * per_pod)
    result["Redis CPU us/pod"] = round(used[-1] * per_pod)
    # Every process of the row together: what a pod costs the machine, and how many cores
    # that kept busy (pods/s x CPU a pod): the rate a shared machine's free cores allow.
    result["all CPU us/pod"] = round(sum(used) * per_pod)
    result["cores busy"] = round(sum(used) / seconds, 2)
    for caller, microseconds in by_caller.items():
        result[f"Redis us/pod {caller}"] = round(microseconds / args.pods)
    return result


# Which Redis calls a bind makes (its claim, its deadlines, a forget); the rest is the
# snapshot's reads (filter, prioritize) and sync's writes.
BIND_FUNCTIONS = {b"sc_assume_pod", b"sc_timed_claim", b"sc_finish_binding", b"sc_forget_pod"}
SLOWLOG_MAX = 1_000_000
TAG = re.compile(rb"_v[0-9]+_[0-9a-f]+$")


def slowlog_on(server: redis.Redis) -> None:
    """Every command into the slow log (its execution time, by the server): what each caller
    costs Redis, without the network and the client."""
    server.config_set("slowlog-max-len", SLOWLOG_MAX)
    server.config_set("slowlog-log-slower-than", 0)
    server.slowlog_reset()


def slowlog_read(server: redis.Redis) -> dict[str, float]:
    """Redis microseconds since :func:`slowlog_on`: the bind's functions, and the rest."""
    entries = server.slowlog_get(SLOWLOG_MAX)
    server.config_set("slowlog-log-slower-than", 10_000)
    totals = {"bind": 0.0, "other": 0.0}
    for entry in entries:
        words = entry["command"].split()
        # The functions' names carry the build's tag (sc_assume_pod_v5_...): this tree's or
        # the --before tree's.
        name = TAG.sub(b"", words[1]) if len(words) > 1 else b""
        bind = words[0].upper() == b"FCALL" and name in BIND_FUNCTIONS
        totals["bind" if bind else "other"] += entry["duration"]
        if bind:
            key = name.decode()
            totals[key] = totals.get(key, 0.0) + entry["duration"]
            totals[key + " calls"] = totals.get(key + " calls", 0.0) + 1
    return totals


def warm(ports: list[int], nodes: int, style: str) -> None:
    """One filter over every node per extender: its snapshot is built before the clock."""
    names = [node_name(i, style) for i in range(nodes)]
    for port in ports:
        Client(port).post("filter", {"Pod": pod("warm-up"), "NodeNames": names})


def percentile(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def extract(revision: str, directory: Path) -> Path:
    """The tree of ``revision`` (``git archive``), to run its extender from."""
    tree = directory / f"tree-{revision}"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "schedcache", "lua"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=positive, default=5000)
    parser.add_argument("--initial", type=int, default=1000, help="bound pods at the start")
    parser.add_argument("--pods", type=positive, default=1000, help="pending pods to place")
    parser.add_argument(
        "--sample", type=positive, default=500, help="node names per filter call (full profile)"
    )
    parser.add_argument("--extenders", type=positive, nargs="+", default=[1])
    parser.add_argument(
        "--profiles", nargs="+", choices=("full", "bind-only"), default=["full", "bind-only"]
    )
    parser.add_argument("--port", type=int, default=6497, help="the bench's own redis-server")
    parser.add_argument("--before", default="", help="git revision to compare with")
    parser.add_argument(
        "--wrap", default="", help="a Python script that runs schedcache.cli (a profiler)"
    )
    parser.add_argument("--rounds", type=positive, default=1, help="rows repeated; medians kept")
    parser.add_argument(
        "--bind-pod-from-filter",
        action="store_true",
        help="add rows of this tree's extenders with --bind-pod-from-filter (full profile)",
    )
    parser.add_argument(
        "--node-names", choices=NODE_NAMES, default="short", help="node-17, or as EKS names them"
    )
    parser.add_argument(
        "--binding",
        dest="bindings",
        nargs="+",
        choices=("serial", "async"),
        default=["serial"],
        help="serial: each bind before the next pod's cycle (earlier rounds' rows); async: "
        "binds on worker threads while the next pods are filtered, as kube-scheduler does",
    )
    parser.add_argument(
        "--bind-workers",
        type=bind_workers,
        default=8,
        metavar=f"1..{MAX_BIND_WORKERS}",
        help="async: binds in flight at most (each a connection of the extender's 256)",
    )
    parser.add_argument("--json", default="", help="results file (instead of the default)")
    args = parser.parse_args()
    if args.sample > args.nodes:
        parser.error("--sample is more than --nodes")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(directory, args.port)
        url = f"redis://127.0.0.1:{args.port}/0"
        trees: list[tuple[str, Path, tuple[str, ...]]] = [("this tree", ROOT, ())]
        if args.bind_pod_from_filter:
            # Without the pending pods' watch, whose copy a bind would take first.
            flags = ("--bind-pod-from-filter", "--no-pending-watch")
            trees.append(("this tree, --bind-pod-from-filter", ROOT, flags))
        if args.before:
            trees.insert(0, (args.before, extract(args.before, Path(directory)), ()))
        try:
            for profile in args.profiles:
                for count in args.extenders:
                    # The option changes nothing without filter calls: no such rows for bind-only.
                    kept = [t for t in trees if profile == "full" or not t[2]]
                    runs: dict[tuple[str, str], list[dict[str, Any]]] = {
                        (label, binding): [] for label, *_ in kept for binding in args.bindings
                    }
                    for _ in range(args.rounds):  # alternating: noise hits both alike
                        for binding in args.bindings:
                            for label, tree, flags in kept:
                                got = row(
                                    args, url, tree, profile, count, directory, flags, binding
                                )
                                print(label, profile, binding, count, got, flush=True)
                                runs[label, binding].append(got)
                    for (label, binding), got_rows in runs.items():
                        rows.append(
                            {
                                "extender": label,
                                "profile": profile,
                                "binding": binding,
                                "extenders": count,
                            }
                            | medians(got_rows)
                        )
        finally:
            server.terminate()
            server.wait()
    columns = list(dict.fromkeys(key for r in rows for key in r))
    print_table(
        f"extender as kube-scheduler drives it: {args.nodes:,} nodes, {args.pods:,} pods, "
        f"{args.sample} names a filter call ({args.node_names} node names)",
        columns,
        [[r.get(c, "") for c in columns] for r in rows],
    )
    payload = {"args": vars(args), "rows": rows}
    if args.json:
        path = Path(args.json)
        path.write_text(json.dumps(payload, indent=2))
    else:
        path = write_results("extender", payload)
    print(f"\nwritten to {path}")


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]}


if __name__ == "__main__":
    main()
