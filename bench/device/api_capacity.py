"""How many Bindings a second the fake API server (tests/apiserver.py) answers: the harness's
ceiling in bench/e2e.py, never to be mistaken for a scheduler's pods/s.

The server runs in a process of its own (its own GIL, as in bench/e2e.py), holding ``--pods``
pending pods; ``P`` client processes of ``T`` threads each bind them through
``pods/{name}/binding`` over kept-alive connections, every pod once. Two clients:

* ``raw``: ``http.client``, one connection a thread, the least client CPU a Binding can cost,
  so that with enough processes the server, not the clients, is what is measured;
* ``kubernetes``: the official client (``create_namespaced_pod_binding``), as the reference
  scheduler's binding threads send them.

``--profile FILE`` writes a cProfile of the server's request threads (merged), for its hot path.

    python bench/device/api_capacity.py --pods 4000 --clients 1x1 1x4 4x4 8x4 --client raw
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import json
import multiprocessing
import os
import pstats
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

NAMESPACE = "default"


def pending_pod(name: str) -> dict[str, Any]:
    """A pod no scheduler of the bench places (the e2e bench's feeder ignores its scheduler)."""
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "nobody",
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}],
        },
        "status": {"phase": "Pending"},
    }


# -- the server's process ----------------------------------------------------------------------


def serve(conn: Connection, directory: str, profile: bool, nodelay: bool) -> None:
    """Answer ("pods", prefix, n) -> names created, "cpu" -> CPU seconds of this process,
    "profile on" (3.12+: start the one profiler), ("profile", path) -> the merged profile
    written, "stop"."""
    from tests import apiserver
    from tests.apiserver import FakeApiServer

    if nodelay:  # what bench/e2e.py did before the server sent each answer in one write
        apiserver._Handler.disable_nagle_algorithm = True

    profiles = _profile_handlers() if profile else []
    with FakeApiServer() as server:
        conn.send(str(server.kubeconfig(Path(directory) / "kubeconfig")))
        while True:
            message = conn.recv()
            if message == "stop":
                return
            if message == "cpu":
                conn.send(sum(os.times()[:2]))
            elif message[0] == "pods":
                _, prefix, count = message
                names = [f"{prefix}-{i}" for i in range(count)]
                for name in names:
                    server.create(pending_pod(name))
                conn.send(names)
            elif message == "profile on":
                if sys.version_info >= (3, 12) and profiles:
                    profiles[0].enable()
                conn.send(True)
            elif message[0] == "profile":
                write_profile(profiles, message[1])
                conn.send(message[1])


def _profile_handlers() -> list[cProfile.Profile]:
    """Profile every request thread. Up to 3.11 cProfile sees the thread that enabled it only:
    one profiler a thread; from 3.12 (sys.monitoring) one profiler sees every thread, and no
    second one may start."""
    from tests import apiserver

    profiles: list[cProfile.Profile] = []
    if sys.version_info >= (3, 12):
        profiles.append(cProfile.Profile())  # enabled by "profile on", after the pods' creation
        return profiles
    handle = apiserver._Handler.handle

    def profiled(self: Any) -> None:
        profiler = cProfile.Profile()
        profiles.append(profiler)
        profiler.enable()
        try:
            handle(self)
        finally:
            profiler.disable()

    apiserver._Handler.handle = profiled  # type: ignore[method-assign]
    return profiles


def write_profile(profiles: list[cProfile.Profile], path: str) -> None:
    for p in profiles:
        p.disable()  # a no-op on the finished ones
    done = [p for p in profiles if p.getstats()]
    if done:
        stats = pstats.Stats(done[0])
        for p in done[1:]:
            stats.add(p)
        stats.dump_stats(path)


class Server:
    """The fake API server in a spawned process, driven over a pipe."""

    def __init__(self, directory: str, profile: bool = False, nodelay: bool = False) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self.process = context.Process(target=serve, args=(theirs, directory, profile, nodelay))
        self.process.daemon = True
        self.process.start()
        self.kubeconfig: str = self._conn.recv()

    def ask(self, message: Any) -> Any:
        self._conn.send(message)
        return self._conn.recv()

    def close(self) -> None:
        self._conn.send("stop")
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()


# -- the clients -------------------------------------------------------------------------------


def _server_of(kubeconfig: str) -> tuple[str, int, str]:
    config = json.loads(Path(kubeconfig).read_text())
    url = config["clusters"][0]["cluster"]["server"]
    host, port = url.removeprefix("http://").split(":")
    return host, int(port), config["users"][0]["user"].get("token", "")


def binding(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def _raw_binder(kubeconfig: str) -> Any:
    host, port, token = _server_of(kubeconfig)
    connection = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}

    def bind(name: str, node: str) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/binding"
        connection.request("POST", path, json.dumps(binding(name, node)), headers)
        response = connection.getresponse()
        response.read()
        if response.status != 201:
            raise RuntimeError(f"bind {name}: HTTP {response.status}")

    return bind


def _kubernetes_binder(kubeconfig: str) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    api = client.CoreV1Api(client.ApiClient(configuration))

    def bind(name: str, node: str) -> None:
        response = api.create_namespaced_pod_binding(
            name, NAMESPACE, binding(name, node), _preload_content=False
        )
        response.read()
        response.release_conn()

    return bind


def client_process(
    kubeconfig: str, names: list[str], threads: int, kind: str, ready: EventType, go: EventType
) -> None:
    """Bind ``names`` from ``threads`` threads, each over its own connection."""
    make = _raw_binder if kind == "raw" else _kubernetes_binder
    binders = [make(kubeconfig) for _ in range(threads)]
    failures: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(t, len(names), threads):
                binders[t](names[i], f"node-{i % 7}")
        except BaseException as error:
            failures.append(error)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    ready.set()
    go.wait()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise SystemExit(f"client failed: {failures[0]!r}")


def measure(kubeconfig: str, names: list[str], processes: int, threads: int, kind: str) -> float:
    """Binds/s of ``names`` bound by ``processes`` x ``threads`` clients (from the start signal
    to the last answer; the processes' start and imports are not counted)."""
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    ready = [context.Event() for _ in range(processes)]
    workers = [
        context.Process(
            target=client_process,
            args=(kubeconfig, names[p::processes], threads, kind, ready[p], go),
        )
        for p in range(processes)
    ]
    for worker in workers:
        worker.start()
    for event in ready:
        event.wait(60)
    start = time.perf_counter()
    go.set()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - start
    if any(worker.exitcode for worker in workers):
        raise RuntimeError("a client process failed")
    return len(names) / seconds


def shape(text: str) -> tuple[int, int]:
    """An argparse type: PxT, processes x threads."""
    processes, threads = (int(part) for part in text.lower().split("x"))
    if processes < 1 or threads < 1:
        raise ValueError(text)
    return processes, threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=3000, help="Bindings per measurement")
    parser.add_argument("--clients", type=shape, nargs="+", default=[(1, 4), (4, 4)])
    parser.add_argument("--client", choices=["raw", "kubernetes"], default="raw")
    parser.add_argument("--profile", default="", help="cProfile of the server's request threads")
    parser.add_argument("--nodelay", action="store_true", help="set TCP_NODELAY on the server")
    parser.add_argument("--json", default="", help="also write the rows here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        server = Server(directory, bool(args.profile), args.nodelay)
        try:
            for n, (processes, threads) in enumerate(args.clients):
                names = server.ask(("pods", f"cap{n}", args.pods))
                cpu = server.ask("cpu")
                if args.profile:
                    server.ask("profile on")
                rate = measure(server.kubeconfig, names, processes, threads, args.client)
                cpu = server.ask("cpu") - cpu
                row = {
                    "client": args.client,
                    "processes": processes,
                    "threads": threads,
                    "binds/s": round(rate),
                    "server cpu ms/bind": round(1000 * cpu / args.pods, 3),
                }
                rows.append(row)
                print(row, flush=True)
            if args.profile:
                server.ask(("profile", str(Path(args.profile).resolve())))
                print(f"server profile: {args.profile}")
        finally:
            server.close()
    if args.json:
        Path(args.json).write_text(json.dumps({"nproc": os.cpu_count(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
