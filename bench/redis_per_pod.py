"""Redis time per placed pod, by function: what a pod's life costs Redis end to end (issue 40).

Runs ``bench/e2e.py``'s shape (fake API server, one ``sync``, N reference schedulers, real
Redis) twice per (tree, nodes, replicas), measuring the steady state (from the moment the cache
holds 5 % of the measured pods until the last is bound):

* **plain**: Redis as it is configured in use (its slow log at the default 10 ms, which logs
  nothing here); Redis' own CPU (``INFO cpu``, user and system: every command, the network and
  the event loop) over the steady window, a placed pod: the ``Redis CPU us/pod`` column, the
  figure issue 40's target is about;
* **breakdown**: the same row with every command Redis ran recorded in its slow log at a
  threshold of 0 µs: each entry is one command's own execution time, as Redis measures it (no
  network, no parsing), with its arguments. The table groups them by function
  (``FCALL``/``FCALL_RO``'s function, version suffix dropped; ``snapshot_delta`` split into its
  head read and its catch-ups) or by command, and prints calls per placed pod, µs per call and
  µs per placed pod; the total is the steady Redis µs per placed pod by the slow log.

The two are separate runs because the slow log is not free: each entry copies up to 32 of the
command's arguments (those over 128 bytes, a pod's msgpack, cut with a formatted suffix) and
the bench keeps millions of them. On 2026-11-30, run back to back, it cost Redis 16-27 µs of
CPU a placed pod at 5,000 nodes (0-17 at 10,000): 9-14 % of what the breakdown's run measured
was the measuring (docs/performance.md, stop 57). ``--no-breakdown`` runs the plain row only.

By default every measured pod is pending before anything starts, and ``sync`` queues them all
during start-up: the window holds no queueing, which issue 40 counts in a pod's life.
``--arrival-rate R`` has the API server create them from the replicas' start on, ``R`` a second
(bench/e2e.py), so each pod's queueing falls in the window too (all but the first ones'); with
``R`` above what the replicas place, the queue never runs dry and pods/s is still theirs.

    python bench/redis_per_pod.py --nodes 1000 5000 10000 --replicas 1 4 --measured 3000 \
        [--tree /tmp/base-red40]

``--redis-core N`` runs each row's Redis on CPU ``N`` and every process the bench starts on the
other CPUs (other users of the machine may still run on ``N``).

``--tree DIR`` adds rows of another checkout (its ``schedcache`` and ``lua/``), alternating
with this tree's in one run (each row a process of its own). Writes
``bench/results/redis_per_pod.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    arrival_rate,
    arrivals_fit,
    print_table,
    start_server,
    write_results,
)

ROW_TIMEOUT = 900.0  # seconds a row may take (bench/e2e.py's --timeout)
STEADY_FROM = 0.05  # the share of measured pods in the cache when the steady state starts
SUFFIX = re.compile(r"_v\d+(_[0-9a-f]+)?$")


PLAIN_HEAD = "head (plain)"


def _name(args: list[bytes]) -> str:
    """The group of one slow log entry: the function (``snapshot_delta`` split in its head
    read, limit -1, and its catch-ups), else the command."""
    command = args[0].decode().upper()
    # The plain head's transaction (store/plain_head.py): MULTI, MGET of `gen` first, GET of
    # `nsgen` (EXEC itself is not logged; its XRANGE is, on its own row).
    if command == "MULTI":
        return PLAIN_HEAD
    if len(args) > 1 and (
        (command == "MGET" and args[1].endswith(b":gen"))
        or (command == "GET" and args[1].endswith(b":nsgen"))
    ):
        return PLAIN_HEAD + " " + command
    if command not in ("FCALL", "FCALL_RO") or len(args) < 2:
        return command
    name = SUFFIX.sub("", args[1].decode()).removeprefix("sc_")
    # FCALL_RO name 1 prefix replica id generation tree-generation limit
    if name == "snapshot_delta" and len(args) >= 9:
        return "snapshot_delta (head)" if args[8] == b"-1" else "snapshot_delta (catch-up)"
    return name


def _one_row(
    tree: str,
    nodes: int,
    replicas: int,
    measured: int,
    initial: int,
    url: str,
    grind: int,
    pop_batch: int | None = None,
    slowlog: bool = True,
    arrival_rate: float = 0.0,
) -> None:
    """One e2e row (this process), its steady slow log grouped (``slowlog``; else Redis' CPU
    only, the slow log left as it is): a JSON line on stdout."""
    if tree:
        sys.argv += ["--tree", tree]  # bench/e2e.py imports the tree's schedcache at import
    import redis

    import bench.e2e as e2e

    client = redis.Redis.from_url(url)
    marks: dict[str, Any] = {}
    done = threading.Event()

    def watch() -> None:
        """Reset the slow log once the cache holds 5 % of the measured pods (start-up done)."""
        key = "{" + e2e.CACHE + "}:pods"
        while not done.is_set():
            held = int(client.scard(key)) - initial
            if held >= STEADY_FROM * measured:
                client.slowlog_reset()
                if grind:
                    _callgrind("-i", grind)
                    _callgrind("-z", grind)
                marks["placed at mark"] = held
                marks["cpu at mark"] = cpu()
                marks["queued at mark"] = queued()
                threshold = client.config_get("slowlog-log-slower-than")
                marks["slow log us"] = int(str(threshold["slowlog-log-slower-than"]))
                return
            time.sleep(0.005)

    def cpu() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def queued() -> int:
        """Pods queued so far (the queue's arrival counter; none yet: 0)."""
        return int(client.get("{" + e2e.CACHE + "}:queueseq") or 0)

    def redis_cpu(url: str, moment: str = "") -> float:
        """e2e calls it right before the go, once the first 5 % are bound (its own steady
        mark: "warm") and right after the last pod is bound ("end"). (The cache's count of
        pods told the end before: with pops of 32, a small row's pods can all be claimed by
        the warm reading, which was then taken for the end.)"""
        del url  # (e2e's signature: the row reads through its own client)
        if moment == "warm":
            return cpu()  # e2e's steady mark, not the end
        if moment == "go":
            # Counting instructions, nothing else: the slow log's own work would be counted,
            # and under callgrind commands run ~30 times slower, past Redis' default 10 ms
            # (found in review), so it is turned off. A plain run leaves it as it is.
            if grind:
                client.config_set("slowlog-log-slower-than", -1)
            elif slowlog:
                client.config_set("slowlog-log-slower-than", 0)
                client.config_set("slowlog-max-len", 2_000_000)
                client.slowlog_reset()
            threading.Thread(target=watch, daemon=True).start()
        else:
            done.set()
            if grind:
                marks["instructions"] = _callgrind("-d", grind)
            marks["cpu at end"] = cpu()
            marks["queued at end"] = queued()
            if slowlog:
                marks["entries"] = client.execute_command("SLOWLOG", "GET", -1)
                client.config_set("slowlog-log-slower-than", 10_000)
        return cpu()

    e2e.redis_cpu = redis_cpu
    args = argparse.Namespace(
        nodes=nodes,
        initial=initial,
        measured=measured,
        capacity=100,
        capacity_clients=(1, 2),
        url=url,
        timeout=ROW_TIMEOUT,
        workers=None,
        profile="",
        api_profile="",
        # (bench/e2e.py's --shapes and --binding-process: their defaults; without them its
        # API server's process died on the missing attribute and the row waited for ever)
        shape="basic",
        shapes=["basic"],
        node_names="short",
        binding_process=False,
        pop_batch=pop_batch,
        arrival_rate=arrival_rate,
    )
    with tempfile.TemporaryDirectory() as directory:
        row = e2e.run(replicas, args, directory)
    usec: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    inner: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    pending: dict[str, int] = defaultdict(int)
    # Oldest first: the commands a script ran are logged (peer "?:0") before the script itself.
    for entry in reversed(marks.get("entries", [])):
        if entry[4] == b"?:0":  # (a script's own command: named as it is)
            pending[entry[3][0].decode().upper()] += 1
            continue
        name = _name(entry[3])
        if name in ("SLOWLOG", "CONFIG", "INFO", "SCARD", "FLUSHDB"):
            pending.clear()
            continue  # the bench's own
        if name.startswith(PLAIN_HEAD + " "):  # one call: its MULTI; its commands inside it
            usec[PLAIN_HEAD] += int(entry[2])
            inner[PLAIN_HEAD][name.removeprefix(PLAIN_HEAD + " ")] += 1
            continue
        usec[name] += int(entry[2])
        count[name] += 1
        for command, n in pending.items():
            inner[name][command] += n
        pending.clear()
    # (A row whose pods were all placed by the mark has no steady window: 1, as e2e counts.)
    pods = max(row["bound"] - marks.get("placed at mark", 0), 1)
    print(
        json.dumps(
            {
                "row": row,
                "steady pods": pods,
                "usec": usec,
                "calls": count,
                "inner": inner,
                "instructions/pod": round(marks.get("instructions", 0) / pods),
                # The slow log's threshold over the steady window (-1: off; 10,000: Redis'
                # default, which logs nothing here; 0: every command)
                "slow log us": marks.get("slow log us"),
                # Pods sync queued in the steady window: 0 unless --arrival-rate (its pods
                # then arrive while others are placed, as in a cluster whose pods keep coming).
                "queued in window": marks.get("queued at end", 0) - marks.get("queued at mark", 0),
                "redis cpu us/pod": round(
                    1e6 * (marks.get("cpu at end", 0) - marks.get("cpu at mark", 0)) / pods
                ),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--measured", type=int, default=3000)
    parser.add_argument("--initial", type=int, default=1000)
    parser.add_argument(
        "--arrival-rate",
        type=arrival_rate,
        default=0.0,
        help="measured pods created a second from the replicas' start on (bench/e2e.py), so "
        "that sync's queueing of them is in the steady window; default 0: all pending before",
    )
    parser.add_argument("--tree", default="", help="another checkout: its rows alternate")
    parser.add_argument("--name", default="redis_per_pod")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count Redis' instructions per placed pod under callgrind (no breakdown)",
    )
    parser.add_argument("--keep", default="", help="keep callgrind's dumps in this folder")
    parser.add_argument(
        "--no-breakdown",
        action="store_true",
        help="each row once, Redis' CPU only: no second run with the slow log at 0 µs",
    )
    parser.add_argument(
        "--redis-core",
        type=int,
        default=None,
        help="run each row's Redis on this CPU and every process the bench starts on the "
        "others, so the slow log's command times hold no wait for the bench's own processes "
        "(other users of the machine may still run there; the replicas then share fewer CPUs, "
        "so pods/s falls)",
    )
    parser.add_argument(
        "--pop-batch",
        type=int,
        nargs="+",
        default=[],
        help="this tree's rows once per value: pods a replica pops a call at most (the other "
        "tree's rows keep its default)",
    )
    parser.add_argument(
        "--batch-linger",
        type=float,
        nargs="+",
        default=[],
        help="this tree's rows once per value (with each --pop-batch): sync's batch_linger, s "
        "(the other tree's rows keep its default)",
    )
    # tree nodes replicas pid url pop-batch slowlog(0/1)
    parser.add_argument("--row", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    late = arrivals_fit(args.arrival_rate, args.measured, ROW_TIMEOUT)
    if late is not None:
        parser.error(late)
    if args.row:
        tree, nodes, replicas, pid, url, batch, slowlog = args.row
        tree = "" if tree == "-" else tree
        sys.argv = sys.argv[:1]
        pop_batch = None if batch == "-" else int(batch)
        _one_row(
            tree,
            int(nodes),
            int(replicas),
            args.measured,
            args.initial,
            url,
            int(pid),
            pop_batch,
            slowlog == "1",
            args.arrival_rate,
        )
        return
    redis_cores = _pin_apart(args.redis_core)
    # SIGTERM (timeout, kill, a CI's cancel) as an exception, so each row's `finally` stops
    # its Redis instead of leaving it running (pinned, with --redis-core) as init's orphan.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: list[dict[str, Any]] = []
    summary: list[list[Any]] = []
    with tempfile.TemporaryDirectory() as directory:
        for nodes in args.nodes:
            for replicas in args.replicas:
                # The other tree's row amid this tree's (alternating, as the load moves).
                runs: list[tuple[str, int | None, float | None]] = [
                    ("", b, linger)
                    for b in args.pop_batch or [None]
                    for linger in args.batch_linger or [None]
                ]
                if args.tree:
                    runs.insert((len(runs) + 1) // 2, (args.tree, None, None))
                for tree, batch, linger in runs:
                    # The plain run (Redis' CPU), then, unless counting instructions or told
                    # not to, the same row again with the slow log at 0 (the breakdown).
                    result = _on_own_server(
                        directory, redis_cores, args, tree, nodes, replicas, batch, linger, False
                    )
                    redis_cpus = result.pop("redis cpus")
                    if not args.instructions and not args.no_breakdown:
                        logged = _on_own_server(
                            directory, redis_cores, args, tree, nodes, replicas, batch, linger, True
                        )
                        for key in ("usec", "calls", "inner"):
                            result[key] = logged[key]
                        # Its own checks too, printed with its table (found in review: a
                        # breakdown run that bound a pod twice went unseen).
                        result["breakdown row"] = logged["row"]
                        result["breakdown pods"] = logged["steady pods"]
                        result["slow log us, breakdown"] = logged["slow log us"]
                        result["redis cpu us/pod, slow log on"] = logged["redis cpu us/pod"]
                    else:  # (the plain run logs nothing: no breakdown, not an empty one)
                        for key in ("usec", "calls", "inner"):
                            del result[key]
                    label = "this" if not tree else "before"
                    if batch is not None:
                        label += f" K={batch}"
                    if linger is not None:
                        label += f" linger={linger:g}"
                    result.update(tree=label, nodes=nodes, replicas=replicas, load=_load())
                    result["redis core"] = "-" if args.redis_core is None else args.redis_core
                    result["cpus"] = {"redis": redis_cpus, "bench": sorted(os.sched_getaffinity(0))}
                    results.append(result)
                    summary.append(_print(result))
                    write_results(args.name, {"args": vars(args), "rows": results})
    print_table(
        f"steady Redis per placed pod ({args.measured:,} measured{_arriving(args)}, "
        f"load {_load()})",
        [
            "tree",
            "nodes",
            "replicas",
            "pods/s",
            "queued in window",
            "calls/pod",
            "Redis us/pod (slow log)",
            "Redis CPU us/pod",
            "Redis CPU us/pod, slow log on",
            "instructions/pod",
            "Redis core",
        ],
        summary,
    )


def _on_own_server(
    directory: str,
    redis_cores: set[int] | None,
    args: argparse.Namespace,
    tree: str,
    nodes: int,
    replicas: int,
    batch: int | None,
    linger: float | None,
    slowlog: bool,
) -> Any:
    """One run of a row on a redis-server of its own (under callgrind, its counters are the
    row's alone), stopped after it; ``redis cpus``: the CPUs that server could run on."""
    port = _free_port()
    out = Path(args.keep or directory) / f"callgrind-{port}.out"
    # Instrumentation off until the steady state (the load and the list of thousands of nodes
    # then run a few times slower, not ~50 times).
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    wrapper += [f"--callgrind-out-file={out}"]
    server = start_server(directory, port, wrapper if args.instructions else None, redis_cores)
    redis_cpus = sorted(os.sched_getaffinity(server.pid))
    url = f"redis://127.0.0.1:{port}/0"
    grind = server.pid if args.instructions else 0
    try:
        result = _run_row(tree, nodes, replicas, args, url, grind, batch, linger, slowlog)
    finally:
        server.terminate()
        server.wait(60)
    result["redis cpus"] = redis_cpus
    return result


def _pin_apart(core: int | None) -> set[int] | None:
    """``--redis-core``: this process (and so every process a row starts) moves off ``core``,
    which is left to each row's Redis. On a machine where Redis shares its cores with the
    replicas, ``sync`` and the API server, a command that loses its core midway counts the
    wait in the slow log (seen with 4 replicas on 2 cores: ~200 µs a pod by the slow log,
    ~130 by Redis' own CPU; ~116 with Redis on a core of its own)."""
    if core is None:
        return None
    mine = os.sched_getaffinity(0)
    others = mine - {core}
    if core not in mine or not others:
        raise SystemExit(
            f"--redis-core {core}: this process may run on CPUs {sorted(mine)}; pick one of "
            "them, and leave at least one other"
        )
    os.sched_setaffinity(0, others)
    return {core}


def _run_row(
    tree: str,
    nodes: int,
    replicas: int,
    args: argparse.Namespace,
    url: str,
    grind: int,
    batch: int | None = None,
    linger: float | None = None,
    slowlog: bool = True,
) -> Any:
    command = [sys.executable, __file__, "--measured", str(args.measured)]
    command += ["--initial", str(args.initial), "--arrival-rate", str(args.arrival_rate)]
    command += ["--row", tree or "-", str(nodes)]
    command += [str(replicas), str(grind), url, "-" if batch is None else str(batch)]
    command += ["1" if slowlog else "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("E2E_BATCH_LINGER", None)
    if linger is not None:  # (read by bench/e2e.py's feeder process)
        env["E2E_BATCH_LINGER"] = str(linger)
    # The row's process and all it starts (API server, sync, replicas) in a group of their
    # own: the bench stopped midway (SIGTERM, Ctrl-C) ends the whole group, no orphans.
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    ) as row:
        try:
            stdout, stderr = row.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):  # (the group may be gone already)
                os.killpg(row.pid, signal.SIGKILL)
            raise
    lines = [line for line in stdout.splitlines() if line.startswith('{"row"')]
    if row.returncode or not lines:
        raise SystemExit(f"row {tree or 'this'} {nodes} {replicas} failed:\n{stderr[-3000:]}")
    return json.loads(lines[-1])


def _arriving(args: argparse.Namespace) -> str:
    """The title's words for ``--arrival-rate`` (nothing for the default)."""
    if not args.arrival_rate:
        return ", all pending before the start: no queueing in the window"
    return f", arriving {args.arrival_rate:g} a second: their queueing in the window"


def _print(result: dict[str, Any]) -> list[Any]:
    """The row's breakdown (when it has one) as a table; its line of the summary."""
    pods = result.get("breakdown pods", result["steady pods"])
    usecs = result.get("usec", {})
    rows = []
    for name, usec in sorted(usecs.items(), key=lambda item: -item[1]):
        calls = result["calls"][name]
        commands = result["inner"].get(name, {})
        top = sorted(commands.items(), key=lambda item: -item[1])[:6]
        within = " ".join(f"{c}:{n / calls:.1f}" for c, n in top)
        rows.append(
            [name, round(calls / pods, 2), round(usec / calls, 1), round(usec / pods, 1), within]
        )
    total = sum(usecs.values())
    calls = sum(result.get("calls", {}).values())
    per_call = round(total / calls, 1) if calls else "-"
    rows.append(["total", round(calls / pods, 2), per_call, round(total / pods, 1), ""])
    row = result["row"]
    title = (
        f"{result['tree']} tree, {result['nodes']:,} nodes, {result['replicas']} replicas: "
        f"{result['steady pods']:,} steady pods, {row['pods/s']} pods/s, over allocatable "
        f"{row.get('over allocatable', '?')}, bound twice {row.get('bound twice', '?')}"
    )
    logged = "breakdown pods" in result
    if logged:
        again = result["breakdown row"]
        title += (
            f"; its breakdown (a second run, slow log at 0 µs): {pods:,} steady pods, "
            f"{again['pods/s']} pods/s, over allocatable {again.get('over allocatable', '?')}, "
            f"bound twice {again.get('bound twice', '?')}"
        )
        print_table(
            title, ["function", "calls/pod", "us/call", "us/pod", "commands inside, per call"], rows
        )
    else:
        print(title)
    return [
        result["tree"],
        result["nodes"],
        result["replicas"],
        row["pods/s"],
        result.get("queued in window", "-"),
        round(calls / pods, 2) if logged else "-",
        round(total / pods, 1) if logged else "-",
        result["redis cpu us/pod"],
        result.get("redis cpu us/pod, slow log on", "-"),
        result["instructions/pod"] or "-",
        result.get("redis core", "-"),
    ]


def _callgrind(option: str, pid: int) -> int:
    """``callgrind_control -i`` (instrumentation on), ``-z`` (zero) or ``-d`` (dump: the
    instructions since the zero)."""
    command = ["callgrind_control", option, *(["on"] if option == "-i" else []), str(pid)]
    subprocess.run(command, check=True, capture_output=True)
    if option != "-d":
        return 0
    out = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    path = next(a for a in out if a.startswith(b"--callgrind-out-file="))
    dump = Path(path.split(b"=", 1)[1].decode() + ".1")
    for _ in range(1200):
        if dump.exists() and "totals:" in dump.read_text():
            break
        time.sleep(0.05)
    totals = next(line for line in dump.read_text().splitlines() if line.startswith("totals:"))
    return int(totals.split()[1])


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
