"""The queue's Lua cuts (issue 40: the confirmation's count of a scheduler's pods kept through a
batch, the push's HSETNX once a call, a batch's pushes in one SADD at its end, the drop's
smaller record) change no reply and no key: a seeded random workload of
pushes, pops, claims, confirmations, give-backs, forgets and deletes, single calls and
sc_batch calls, runs against this tree's library and the one of ``BASE`` (git), each on its
own cache of one server, and every reply and a dump of every key are compared (stream ids,
which come from the clock, are numbered in order of appearance)."""

from __future__ import annotations

import hashlib
import random
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from schedcache.model.values import Pod
from schedcache.store import commands
from schedcache.store.commandset import lua_commands, lua_table
from schedcache.store.connection import embedded_client
from schedcache.store.keys import SCHEMA_VERSION
from schedcache.store.library import FIRST_PARTS, LAST_PARTS, library_source, lua_dir
from tests.conftest import real_client
from tests.factories import keyspace, make_node, make_pod

BASE = "d5b6303"  # main before the cuts
REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000  # ms


def ordered(directory: Path) -> list[Path]:
    """store/library.py's load order, for another tree's files."""
    names = sorted(p.name for p in directory.glob("*.lua"))
    shared = [n for n in names if n.startswith("_") and n not in FIRST_PARTS + LAST_PARTS]
    commands_ = [n for n in names if not n.startswith("_")]
    return [directory / n for n in (*FIRST_PARTS, *shared, *commands_, *LAST_PARTS)]


def library_of(directory: Path) -> tuple[str, str]:
    """The library of the Lua files in ``directory`` (as library_source builds this tree's)
    and its functions' suffix."""
    files = ordered(directory)
    body = "".join(f"\n-- ==== {p.name} ====\n{p.read_text(encoding='utf-8')}" for p in files)
    digest = hashlib.sha1(body.encode()).hexdigest()[:12]
    tag = f"v{SCHEMA_VERSION}_{digest}"
    source = (
        f"#!lua name=schedcache_{tag}\n"
        f"local LIBRARY_VERSION = '{SCHEMA_VERSION} {digest}'\n"
        f"local FUNCTION_SUFFIX = '_{tag}'\n"
        f"local SCHEMA_VERSION = '{SCHEMA_VERSION}'\n"
        f"local LIBRARY_COMMANDS = {lua_table(lua_commands(files))}\n"
        f"{body}"
    )
    return source, tag


@pytest.fixture
def base_lua(tmp_path: Path) -> Path:
    """``BASE``'s lua/ from git (a checkout without that commit cannot compare: it fails)."""
    listing = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", f"{BASE}:lua"],
        capture_output=True,
        text=True,
        check=False,
    )
    if listing.returncode != 0:
        pytest.fail(f"commit {BASE} is not in this checkout: {listing.stderr}", pytrace=False)
    for name in listing.stdout.split():
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{BASE}:lua/{name}"],
            capture_output=True,
            check=True,
        ).stdout
        (tmp_path / name).write_bytes(text)
    return tmp_path


@pytest.fixture(params=["fakeredis", "redis"])
def server(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    client = embedded_client() if request.param == "fakeredis" else real_client()
    yield client
    client.close()


STREAM_ID = re.compile(rb"\b1\d{12}-\d+\b")


class Side:
    """One library on its own cache."""

    def __init__(self, client: redis.Redis, tag: str, name: str) -> None:
        self.client, self.tag, self.prefix = client, tag, "{" + name + "}:"
        self.ids: dict[bytes, bytes] = {}

    def norm(self, value: Any) -> Any:
        """Stream ids numbered in order of appearance, the prefix taken out."""
        if isinstance(value, bytes):
            value = value.replace(self.prefix.encode(), b"P:")
            return STREAM_ID.sub(lambda m: self.ids.setdefault(m[0], b"#%d" % len(self.ids)), value)
        if isinstance(value, (list, tuple)):
            return [self.norm(v) for v in value]
        if isinstance(value, dict):
            return {self.norm(k): self.norm(v) for k, v in value.items()}
        if isinstance(value, set):
            return sorted(self.norm(v) for v in value)
        return value

    def call(self, name: str, cid: str, *args: Any) -> Any:
        try:
            reply = self.client.fcall(f"sc_{name}_{self.tag}", 1, self.prefix, "r", cid, *args)
        except redis.ResponseError as error:
            return ("error", self.norm(str(error).encode()))
        return self.norm(reply)

    def dump(self) -> Any:
        state = keyspace(self.client, self.prefix + "*")
        state.pop((self.prefix + "incarnation").encode())  # the clock's, when the cache began
        # (stream ids first in key order, so both sides number them alike)
        return self.norm(dict(sorted(state.items())))


def workload(seed: int, steps: int) -> Iterator[tuple[str, str, list[Any]]]:
    """(function, command id, args): a random mix over two schedulers, 10 pods, 3 nodes."""
    rng = random.Random(seed)
    version = iter(range(1000, 10**9))
    schedulers = ["ref", "other"]
    pods = {f"p{j}": make_pod(f"p{j}", "", "100m", "10Mi") for j in range(10)}
    nodes = ["n1", "n2", "n3"]
    now = T0
    for step in range(steps):
        cid = f"c{step}" if rng.random() < 0.5 else ""
        now += rng.choice([0, 1, 500, 5_000, 20_000])
        kind = rng.choices(
            ["push", "pop", "retry", "claim", "batch", "single", "forget"],
            [4, 3, 2, 2, 4, 2, 1],
        )[0]
        pod: Pod = pods[rng.choice(sorted(pods))]
        if kind == "push":
            if rng.random() < 0.3:
                pod = Pod.from_dict({**pod.to_dict(), "priority": rng.choice([0, 5, 100])})
            cmd = commands.sync_pod_pending(pod, rng.choice(schedulers), str(next(version)))
            yield "sync_pod", cid, list(cmd.args)
        elif kind == "pop":
            scheduler = rng.choice(schedulers)
            holder = rng.choice(["a", "b"])
            lease = rng.choice([1.0, 10.0])
            cmd = commands.queue_pop(scheduler, holder, lease, rng.randint(1, 5), 300.0, now / 1e3)
            yield "queue_pop", "", list(cmd.args)
        elif kind == "retry":
            scheduler, holder = rng.choice(schedulers), rng.choice(["a", "b"])
            how = rng.choice(["unschedulable", "error", "untried", "unreadable"])
            if how in ("untried", "unreadable"):
                cmd = commands._queue_give_back(how, scheduler, holder, pod.uid)
            else:
                attempt = rng.choice(["", "0-1", "9999999999999-0"])
                cmd = commands.queue_retry(
                    scheduler,
                    holder,
                    pod.uid,
                    how == "unschedulable",
                    attempt,
                    (1.0, 10.0),
                    rng.choice([1.0, 300.0]),
                    now / 1e3,
                )
            yield "queue_retry", cid, list(cmd.args)
        elif kind == "claim":
            cmd = commands.assume_pod(pod.with_node(rng.choice(nodes)))
            yield "assume_pod", cid, list(cmd.args)
        elif kind == "forget":
            yield "forget_pod", cid, list(commands.forget_pod(pod).args)
        else:
            batch: list[Any] = []
            for _ in range(1 if kind == "single" else rng.randint(2, 8)):
                pod = pods[rng.choice(sorted(pods))]
                what = rng.choices(["set", "delete", "queue"], [4, 1, 3])[0]
                if what == "queue":
                    cmd = commands.sync_pod_pending(pod, rng.choice(schedulers), str(next(version)))
                else:
                    cmd = commands.sync_pod(
                        pod.with_node(rng.choice(nodes)), str(next(version)), what == "set"
                    )
                batch += ["sync_pod", str(len(cmd.args)), *cmd.args]
            if kind == "single":
                yield "sync_pod", cid, batch[2:]
            else:
                yield "batch", cid, batch


def scripted() -> Iterator[tuple[str, str, list[Any]]]:
    """Sequences the memos must get right, one call each: a batch that confirms a pod of a
    scheduler (its pods counted), moves another to a second scheduler (a removal the count
    must forget) and confirms the last (the scheduler's field goes); pushes to a scheduler
    whose last pod left in the same call (listed again); a pop in a batch between two
    confirmations."""
    version = iter(range(10**6, 10**9))
    pods = [make_pod(f"s{j}", "", "100m", "10Mi") for j in range(9)]

    def push(pod: Pod, scheduler: str = "ref") -> list[Any]:
        cmd = commands.sync_pod_pending(pod, scheduler, str(next(version)))
        return ["sync_pod", str(len(cmd.args)), *cmd.args]

    def bound(pod: Pod) -> list[Any]:
        cmd = commands.sync_pod(pod.with_node("n1"), str(next(version)), True)
        return ["sync_pod", str(len(cmd.args)), *cmd.args]

    def pop(count: int) -> list[Any]:
        cmd = commands.queue_pop("ref", "a", 10.0, count, 300.0, T0 / 1e3)
        return ["queue_pop", str(len(cmd.args)), *cmd.args]

    a, b, c, d, e, f, g, h, i = pods
    yield "batch", "x1", push(a) + push(b) + push(c)
    yield "batch", "x2", bound(a) + push(b, "other") + bound(c)
    yield "batch", "x3", push(d) + bound(d) + push(e) + push(f) + bound(e) + push(g)
    yield "batch", "x4", pop(1) + bound(f) + pop(2) + bound(g) + push(h) + bound(b)
    yield "batch", "x5", push(i) + pop(1) + bound(h) + push(b, "ref") + bound(i)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_the_queue_cuts_answer_and_write_exactly_as_before(
    server: redis.Redis, base_lua: Path, seed: int
) -> None:
    base_source, base_tag = library_of(base_lua)
    ours_source, ours_tag = library_of(lua_dir())
    assert ours_source == library_source()  # the same builder as this tree's loader
    assert base_tag != ours_tag
    server.function_load(base_source, replace=True)
    server.function_load(ours_source, replace=True)
    name = f"d{seed}-{random.Random().randrange(10**9)}"
    base, ours = Side(server, base_tag, name + "a"), Side(server, ours_tag, name + "b")
    try:
        for side in (base, ours):
            for node in ("n1", "n2", "n3"):
                cmd = commands.add_node(make_node(node, "1000m", "1Gi"))
                assert not isinstance(side.call("add_node", "", *cmd.args), tuple)
        compared = 0
        steps = scripted() if seed == 0 else workload(seed, 600)
        for step, (function, cid, args) in enumerate(steps):
            expected = base.call(function, cid, *args)
            got = ours.call(function, cid, *args)
            assert got == expected, (step, function, args[:4])
            if step % 25 == 0 or seed == 0:
                assert ours.dump() == base.dump(), step
                compared += 1
        assert ours.dump() == base.dump()
        assert compared >= (5 if seed == 0 else 24)
    finally:
        for side in (base, ours):
            keys = list(server.scan_iter(match=side.prefix + "*"))
            if keys:
                for key in keys:
                    server.delete(key)
