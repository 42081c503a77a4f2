"""Where the library's Lua time goes: Lua VM instructions by line and function, per FCALL.

Redis embeds Lua 5.1, and under callgrind most of a placed pod's instructions are the
interpreter running this library's code (docs/performance.md, issue 40). This bench runs the
library in fakeredis' Lua 5.1 (``lupa.lua51``, the same bytecode as Redis' Lua), with a
``debug.sethook`` hook that counts

* every VM instruction (count hook, every instruction) by the library line running it and by
  the function it is in (self: the function's own lines; inclusive: the function and every
  library function it called, walking the stack);
* every call of a C function (``redis.call``/``pcall``, ``string.find``, ``table.concat``,
  ``tonumber``...) by its name and the library line calling it: their cost in Redis is C code
  that the count hook cannot see (a ``redis.call`` is ~3,000-4,000 instructions there).

The calls profiled are a pod's life in ``bench/e2e.py``'s shape, on a cache of ``--nodes``
nodes holding ``--initial`` placed pods: ``sync`` queueing the pending pods (``sc_batch`` of
``sc_sync_pod`` op "queue", ``--pop-batch`` a call), a replica's pop (``sc_queue_pop``,
``--pop-batch`` a call), its claim (``sc_timed_claim``: check "fit", the lease, the deadline
and its ``--candidates`` next best nodes, as the reference scheduler sends it), and ``sync``'s
confirmation of the Binding (``sc_batch`` of ``sc_sync_pod`` op "set", ``--confirm-batch`` a
call; 1 sends each as a single ``sc_sync_pod``). Only the library's own code is counted (not
fakeredis' function engine, nor the commands ``redis.call`` runs, which are fakeredis' Python).

Prints, per FCALL kind, the instructions a call and a pod, the top functions (self and
inclusive) and lines, and the C calls by name; writes ``bench/results/lua_profile.json`` (and
the same tables as text in ``bench/results/lua_profile.txt``). Machine-independent: the counts
are the same from run to run (but for the odd hash-table growth).

    python bench/lua_profile.py [--nodes 5000] [--initial 300] [--pods 100] [--top 25]
        [--tree /path/to/other/checkout]

``--tree``: profile another checkout's library (its ``lua/``; the commands are this tree's).
Needs ``fakeredis[lua]`` (lupa), as the tests do; no Redis server.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fakeredis

from bench.common import RESULTS, pod_manifest, positive, write_results
from schedcache import Pod
from schedcache.sim.demo import demo_node
from schedcache.store import commands
from schedcache.store.batch import derive_group_id, group_args
from schedcache.store.commands import Command

PREFIX = "{prof}:"
SCHEDULER = "default-scheduler"
REPLICA = "replica-0"
LEASE = 15.0
DEADLINE = 60.0 + 300.0  # the reference scheduler's: 60 s + the ttl

# The hook, installed in fakeredis' function runtime. `phase` is set from Python before each
# FCALL; counts go to tables per phase. Only the library's chunk ("@user_function") counts.
HOOK = r"""
local getinfo, sethook = debug.getinfo, debug.sethook
local P = { phase = 'none', lines = {}, selfs = {}, incl = {}, ccalls = {}, rcalls = {},
           bytes = {}, seen = {}, mark = 0 }
local function bucket(t, phase)
  local b = t[phase]
  if b == nil then b = {}; t[phase] = b end
  return b
end
local count = collectgarbage
local function hook(event)
  -- Bytes allocated since the hook last returned (the collector is stopped): what the
  -- instruction before this one allocated, its C calls' results included; the hook's own
  -- allocations are left out (P.mark is taken as it returns).
  local grown = count('count') - P.mark
  if grown > 0 and P.at ~= nil then
    local bytes = bucket(P.bytes, P.phase)
    bytes[P.at] = (bytes[P.at] or 0) + grown * 1024
  end
  local info = getinfo(2, 'Sl')
  P.at = nil
  if event == 'count' then
    if info == nil or info.source ~= '@user_function' then P.mark = count('count'); return end
    local phase = P.phase
    P.at = info.currentline
    local lines = bucket(P.lines, phase)
    lines[info.currentline] = (lines[info.currentline] or 0) + 1
    local selfs = bucket(P.selfs, phase)
    selfs[info.linedefined] = (selfs[info.linedefined] or 0) + 1
    -- inclusive: each library function on the stack once
    local incl, seen = bucket(P.incl, phase), P.seen
    local level, marks = 2, 0
    while true do
      local up = getinfo(level, 'S')
      if up == nil then break end
      if up.source == '@user_function' and seen[up.linedefined] == nil then
        seen[up.linedefined] = true
        marks = marks + 1
        incl[up.linedefined] = (incl[up.linedefined] or 0) + 1
      end
      level = level + 1
    end
    if marks > 0 then for k in pairs(seen) do seen[k] = nil end end
    P.mark = count('count')
  else  -- a call: C functions called from the library, by name and calling line
    if info == nil or info.what ~= 'C' then P.mark = count('count'); return end
    local caller = getinfo(3, 'Sl')
    if caller == nil or caller.source ~= '@user_function' then P.mark = count('count'); return end
    P.at = caller.currentline
    local name = getinfo(2, 'n').name or '?'
    local calls = bucket(P.ccalls, P.phase)
    local key = name .. ' ' .. caller.currentline
    calls[key] = (calls[key] or 0) + 1
    if name == 'call' or name == 'pcall' then  -- Redis commands: where from, 4 levels
      local stack, level = {}, 3
      while #stack < 4 do
        local up = getinfo(level, 'Sl')
        if up == nil then break end
        if up.source == '@user_function' then stack[#stack + 1] = up.currentline end
        level = level + 1
      end
      local rcalls = bucket(P.rcalls, P.phase)
      key = table.concat(stack, ' ')
      rcalls[key] = (rcalls[key] or 0) + 1
    end
    P.mark = count('count')
  end
end
function P.start(phase)
  P.phase = phase
  count('stop')
  P.at, P.mark = nil, count('count')
  sethook(hook, 'c', 1)
end
function P.stop()
  sethook()
  local grown = count('count') - P.mark  -- the last instruction's
  if grown > 0 and P.at ~= nil then
    local bytes = bucket(P.bytes, P.phase)
    bytes[P.at] = (bytes[P.at] or 0) + grown * 1024
  end
  count('restart')
end
return P
"""


def library_text(tree: str | None) -> str:
    """The library source of ``tree`` (this checkout when None), as its own loader builds it."""
    if tree is None:
        from schedcache.store.library import library_source

        return library_source()
    code = "from schedcache.store.library import library_source; print(library_source(), end='')"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env={"PYTHONPATH": tree, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def line_map(text: str) -> list[tuple[str, int, str]]:
    """Per line of the library chunk (1-based, index 0 unused): its file, line in the file, text.
    The loader marks each file with ``-- ==== <name> ====``; fakeredis compiles the code after
    the ``#!lua`` line with that line left empty, so chunk lines are the text's lines."""
    out: list[tuple[str, int, str]] = [("", 0, "")]
    name, first = "(header)", 1
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("-- ==== ") and line.endswith(" ===="):
            name, first = line[8:-5], number + 1
        out.append((name, number - first + 1, line.strip()))
    return out


def make_pod(i: int) -> Pod:
    """A pending pod as bench/e2e.py's: requests, a label, no inter-pod rules (the default
    scheduler's)."""
    return Pod.from_k8s(pod_manifest(f"p-{i}", f"uid-{i}"))


class Profiled:
    """A fakeredis server with the library loaded and the hook installed."""

    def __init__(self, text: str) -> None:
        self.server = fakeredis.FakeServer()
        self.client = fakeredis.FakeRedis(server=self.server)
        self.client.function_load(text, replace=True)
        suffix = text.split("local FUNCTION_SUFFIX = '", 1)[1].split("'", 1)[0]
        self.suffix = suffix
        runtime = self.server._lua_functions.runtime  # type: ignore[attr-defined]
        self.profile = runtime.execute(HOOK)
        self.calls: dict[str, int] = defaultdict(int)

    def fcall(self, phase: str | None, name: str, command_id: str, *args: Any) -> Any:
        if phase is not None:
            self.calls[phase] += 1
            self.profile.start(phase.encode())
        try:
            return self.client.fcall(
                f"sc_{name}{self.suffix}", 1, PREFIX, REPLICA, command_id, *args
            )
        finally:
            if phase is not None:
                self.profile.stop()

    def run(self, phase: str | None, command: Command) -> Any:
        return self.fcall(phase, command.name, command.id, *command.args)

    def batch(self, phase: str | None, group: list[Command]) -> Any:
        reply = self.fcall(phase, "batch", derive_group_id(group), *group_args(group))
        bad = [reply[k + 1] for k in range(0, len(reply), 2) if reply[k] != 1]
        assert not bad, bad[:3]
        return reply

    def table(self, field: str) -> dict[str, dict[Any, Any]]:
        out: dict[str, dict[Any, Any]] = {}
        for phase, counts in (self.profile[field.encode()] or {}).items():
            out[phase.decode() if isinstance(phase, bytes) else phase] = {
                (k.decode() if isinstance(k, bytes) else int(k)): v for k, v in counts.items()
            }
        return out


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def drive(prof: Profiled, args: argparse.Namespace) -> int:
    """The setup (unprofiled), then ``args.pods`` pods' lives (profiled). Returns the pods."""
    nodes = [demo_node(i, "640", "4096Gi") for i in range(args.nodes)]
    for group in chunks([commands.add_node(n) for n in nodes], 500):
        prof.batch(None, group)
    placed = [
        dataclasses.replace(make_pod(-1 - i), node_name=nodes[i % args.nodes].name)
        for i in range(args.initial)
    ]
    for group in chunks([commands.sync_pod(p, "1", True) for p in placed], 200):
        prof.batch(None, group)
    pending = [make_pod(i) for i in range(args.pods)]
    # A warm-up pod's life, unprofiled (the library's memos fill once per server).
    for n, pods in enumerate(chunks(pending, args.pop_batch)):
        phase = None if n == 0 else "queue"
        prof.batch(phase, [commands.sync_pod_pending(p, SCHEDULER, "1") for p in pods])
        phase = None if n == 0 else "queue_pop"
        popped = prof.run(
            phase, commands.queue_pop(SCHEDULER, REPLICA, 600.0, args.pop_batch, 60.0, None)
        )
        assert len(popped) >= len(pods), popped
        claimed = []
        for j, pod in enumerate(pods):
            k = (n * args.pop_batch + j) * 7919
            node = nodes[k % args.nodes].name
            others = [nodes[(k + 1 + c) % args.nodes].name for c in range(args.candidates)]
            placed_pod = pod.with_node(node)
            claim = commands.assume_pod(
                placed_pod,
                check_fit=True,
                lease_ttl=LEASE if n == 0 and j == 0 else 0.0,  # then the heartbeat holds it
                candidates=[(o, "", "") for o in others],
            )
            prof.run(None if n == 0 else "timed_claim", commands.timed_claim(claim, DEADLINE))
            bound = dataclasses.replace(placed_pod, resource_version="2")
            claimed.append(commands.sync_pod(bound, "2", True))
        for group in chunks(claimed, args.confirm_batch):
            phase = None if n == 0 else "confirm"
            if len(group) == 1:
                prof.run(phase, group[0])
            else:
                prof.batch(phase, group)
    return len(pending) - min(int(args.pop_batch), len(pending))


def report(prof: Profiled, text: str, pods: int, top: int) -> dict[str, Any]:
    where = line_map(text)
    lines, selfs, incl, ccalls = (prof.table(f) for f in ("lines", "selfs", "incl", "ccalls"))

    def at(line: int) -> str:
        name, number, _ = where[line]
        return f"{name}:{number}"

    def function(line: int) -> str:
        if line == 0:
            return "(main chunk)"
        text = where[line][2]
        for head in ("local function ", "function "):
            if head in text:
                text = text.split(head, 1)[1].split("(", 1)[0]
                break
        else:
            text = "(anonymous)"
        return f"{text} ({at(line)})"

    out: dict[str, Any] = {"pods": pods, "phases": {}}
    rendered: list[str] = []
    for phase in ("timed_claim", "confirm", "queue", "queue_pop"):
        if phase not in lines:
            continue
        calls = prof.calls[phase]
        total = sum(lines[phase].values())
        c_total = sum(ccalls.get(phase, {}).values())
        head = (
            f"== {phase}: {calls} calls, {total / calls:,.0f} VM instructions a call, "
            f"{total / pods:,.0f} a pod; {c_total / calls:,.1f} C calls a call =="
        )
        rendered.append(head)
        entry: dict[str, Any] = {
            "calls": calls,
            "instructions_per_call": total / calls,
            "instructions_per_pod": total / pods,
            "c_calls_per_call": c_total / calls,
        }
        fn_rows = sorted(incl[phase].items(), key=lambda kv: -kv[1])[:top]
        rendered.append(f"{'function':60} {'incl/call':>10} {'self/call':>10} {'self %':>7}")
        entry["functions"] = []
        for line, count in fn_rows:
            own = selfs[phase].get(line, 0)
            rendered.append(
                f"{function(line)[:60]:60} {count / calls:10,.0f} {own / calls:10,.0f} "
                f"{100 * own / total:6.1f}%"
            )
            entry["functions"].append(
                {"function": function(line), "inclusive": count / calls, "self": own / calls}
            )
        rendered.append("")
        rendered.append(f"{'line':24} {'instr/call':>10} {'%':>6}  text")
        entry["lines"] = []
        for line, count in sorted(lines[phase].items(), key=lambda kv: -kv[1])[:top]:
            rendered.append(
                f"{at(line):24} {count / calls:10,.1f} {100 * count / total:5.1f}%  "
                f"{where[line][2][:70]}"
            )
            entry["lines"].append(
                {"line": at(line), "per_call": count / calls, "text": where[line][2]}
            )
        by_name: dict[str, int] = defaultdict(int)
        for key, count in ccalls.get(phase, {}).items():
            by_name[key.rsplit(" ", 1)[0]] += count
        rendered.append("")
        rendered.append(
            "C calls a call: "
            + ", ".join(
                f"{k} {v / calls:.1f}" for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])
            )
        )
        rendered.append(f"{'C call at line':40} {'a call':>7}")
        entry["c_calls"] = {}
        for key, count in sorted(ccalls.get(phase, {}).items(), key=lambda kv: -kv[1])[:top]:
            name, line = key.rsplit(" ", 1)
            label = f"{name} @ {at(int(line))}"
            rendered.append(f"{label:40} {count / calls:7.2f}")
            entry["c_calls"][label] = count / calls
        rendered.append("")
        alloc = prof.table("bytes").get(phase, {})
        allocated = sum(alloc.values())
        rendered.append(
            f"Bytes allocated (Lua heap, the collector stopped): {allocated / calls:,.0f} a call"
        )
        rendered.append(f"{'line':24} {'bytes/call':>10}  text")
        entry["bytes_per_call"] = allocated / calls
        entry["bytes"] = {}
        for line, grown in sorted(alloc.items(), key=lambda kv: -kv[1])[:top]:
            rendered.append(f"{at(line):24} {grown / calls:10,.0f}  {where[line][2][:70]}")
            entry["bytes"][at(line)] = grown / calls
        rendered.append("")
        rendered.append(f"{'Redis command (redis.call/pcall) from':70} {'a call':>7}")
        entry["redis_calls"] = {}
        rcalls = prof.table("rcalls").get(phase, {})
        for key, count in sorted(rcalls.items(), key=lambda kv: -kv[1]):
            label = " < ".join(at(int(line)) for line in key.split())
            rendered.append(f"{label[:70]:70} {count / calls:7.2f}")
            entry["redis_calls"][label] = count / calls
        rendered.append("")
        out["phases"][phase] = entry
    print("\n".join(rendered))
    out["text"] = rendered
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=positive, default=5000)
    parser.add_argument("--initial", type=int, default=300, help="pods placed before")
    parser.add_argument("--pods", type=positive, default=100, help="pods profiled")
    parser.add_argument("--pop-batch", type=positive, default=8)
    parser.add_argument("--confirm-batch", type=positive, default=5)
    parser.add_argument("--candidates", type=int, default=7, choices=range(8))
    parser.add_argument("--top", type=positive, default=25)
    parser.add_argument("--tree", default=None, help="another checkout's library")
    parser.add_argument("--name", default="lua_profile")
    args = parser.parse_args()
    text = library_text(args.tree)
    prof = Profiled(text)
    pods = drive(prof, args)
    result = report(prof, text, pods, args.top)
    result["args"] = vars(args)
    path = write_results(args.name, result)
    (RESULTS / f"{args.name}.txt").write_text("\n".join(result["text"]) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
