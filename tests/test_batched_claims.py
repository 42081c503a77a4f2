"""The reference scheduler claims the pods of one pop together (issue 40): those the columns
judge alone are placed one after another on one catch-up of the snapshot, each counted on its
node before the next is placed (``Columns.reserve``), and their timed claims go to Redis in one
``sc_batch`` call. A claim refused there (another replica was first) is placed again alone and
bound; a pod the columns cannot judge alone (host ports, inter-pod rules, a pod group's member)
takes the per-pod path; Redis away mid-batch gives the pods back and the loop goes on; a stop
during a batch gives the rest of its pop back untried.

The cache runs on every backend; the API server is tests/apiserver.py through the official
client, fed into the cache by ``sync``. Calls are counted on the client side (every backend):
the groups ``CommandBatch`` sends and the single commands the store runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.model.values import Pod
from schedcache.scheduler.loop import ReferenceScheduler
from schedcache.store.batch import CommandBatch
from schedcache.store.commands import Command
from schedcache.views.snapshot import Snapshot
from tests.apiserver import FakeApiServer
from tests.factories import pod_manifest
from tests.racing import racing_schedulers
from tests.scheduling import eventually, fed_scheduler, node, pending
from tests.test_reference_batches import bindings, bound

CLAIMS = ("assume_pod", "timed_claim")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def pod_name(command: Command) -> str:
    """The pod a claim names (its subject: ``pod default/<name> (uid ...)``)."""
    return command.subject.split("/", 1)[1].split(" ", 1)[0]


@pytest.fixture
def sent_batches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The pods of every ``sc_batch`` group of claims sent (a feeder's ingest left out)."""
    groups: list[list[str]] = []
    send = CommandBatch._send

    def counted(self: CommandBatch, group_id: str, group: list[Command]) -> None:
        if any(command.name in CLAIMS for command in group):
            groups.append([pod_name(command) for command in group])
        send(self, group_id, group)

    monkeypatch.setattr(CommandBatch, "_send", counted)
    return groups


def claims_in(batch: CommandBatch) -> bool:
    """Whether ``batch``'s unsent commands are claims (a scheduler's, not the feeder's)."""
    return any(command.name in CLAIMS for command in batch.group)


def single_claims(claims: list[str]) -> Callable[[ReferenceScheduler], None]:
    """A ``prepare`` that records the pods claimed one call each (the per-pod path)."""

    def prepare(scheduler: ReferenceScheduler) -> None:
        run = scheduler.cache.store.run

        def counted(command: Command) -> Any:
            if command.name in CLAIMS:
                claims.append(pod_name(command))
            return run(command)

        scheduler.cache.store.run = counted  # type: ignore[method-assign]

    return prepare


def queued(server: FakeApiServer, count: int) -> list[str]:
    names = [f"p{i:02d}" for i in range(count)]
    for name in names:
        server.create(pending(name, "1"))
    return names


def cpu_per_node(server: FakeApiServer) -> Counter[str]:
    """Millicores requested per node by the bound pods."""
    used: Counter[str] = Counter()
    for o in server.objects("Pod"):
        where = o["spec"].get("nodeName")
        if where:
            pod = Pod.from_k8s(o)
            used[where] += pod.requests.milli_cpu
    return used


def test_the_pods_of_a_pop_are_claimed_in_one_call_on_one_catch_up_and_spread(
    cache: Cache, server: FakeApiServer, tmp_path: Path, sent_batches: list[list[str]]
) -> None:
    """Pops of 1, 2 and 4 pods: the pod alone claims as before; each other pop is one catch-up
    of the snapshot and one sc_batch of its claims (before: a catch-up and a claim call a pod),
    and its pods land on distinct nodes (without the reservations, every pod of a pop chose
    the same emptiest node of the same snapshot)."""
    for i in range(4):
        server.create(node(f"n{i}", "8"))
    names = queued(server, 7)
    singles: list[str] = []
    catch_ups: list[int] = []

    def prepare(scheduler: ReferenceScheduler) -> None:
        single_claims(singles)(scheduler)
        update = scheduler.cache.update_snapshot

        def counted(snapshot: Snapshot, *args: Any, **options: Any) -> Any:
            if snapshot is scheduler.snapshot:
                catch_ups.append(1)
            return update(snapshot, *args, **options)

        scheduler.cache.update_snapshot = counted  # type: ignore[method-assign]

    with fed_scheduler(cache, server, tmp_path, prepare=prepare, pop_batch=8) as scheduler:
        eventually(lambda: scheduler.bound == 7)
    assert [len(group) for group in sent_batches] == [2, 4]
    assert len(singles) == 1 and len(catch_ups) == 3
    assert sorted(singles + [n for group in sent_batches for n in group]) == names
    placed = bound(server)
    for group in sent_batches:
        assert len({placed[name] for name in group}) == len(group), placed
    assert bindings(server) == Counter(names) and scheduler.conflicts == 0
    assert cache.verify() == []


def test_without_batch_claims_each_pod_claims_alone(
    cache: Cache, server: FakeApiServer, tmp_path: Path, sent_batches: list[list[str]]
) -> None:
    server.create(node("big", "64"))
    names = queued(server, 7)
    singles: list[str] = []
    with fed_scheduler(
        cache, server, tmp_path, prepare=single_claims(singles), batch_claims=False
    ) as scheduler:
        eventually(lambda: scheduler.bound == 7)
    assert sent_batches == [] and sorted(singles) == names


def test_a_claim_refused_in_a_batch_is_placed_again_and_bound(
    cache: Cache, server: FakeApiServer, tmp_path: Path, sent_batches: list[list[str]]
) -> None:
    """Between the batch's decisions and its call, a pod bound elsewhere fills the node the
    batch's first claim chose: Redis refuses that claim (a fit conflict), the others land, and
    the refused pod is placed again on a fresh snapshot and bound; no node over its 4 CPUs."""
    for i in range(3):
        server.create(node(f"n{i}", "4"))
    names = queued(server, 3)
    filled: list[str] = []

    def prepare(scheduler: ReferenceScheduler) -> None:
        reserve, execute = scheduler.columns.reserve, scheduler.cache.batch
        chosen: list[str] = []

        def reserving(where: str, pod: Pod) -> None:
            chosen.append(where)
            reserve(where, pod)

        def batch(*args: Any, **options: Any) -> CommandBatch:
            made = execute(*args, **options)
            run = made.execute

            def fill_then_execute() -> Any:
                if not filled and claims_in(made):
                    target = chosen[-len(made)]  # the first claim's node
                    snap = Snapshot()
                    cache.update_snapshot(snap)
                    info = snap.node_infos[target]
                    free = info.allocatable.milli_cpu - info.requested.milli_cpu
                    manifest = pod_manifest(
                        "filler", target, f"{free}m", "1Mi", namespace="default", uid="uid-filler"
                    )
                    server.create({**manifest, "kind": "Pod"})
                    eventually(lambda: cache.pod_state("uid-filler") is not None)
                    filled.append(target)
                return run()

            made.execute = fill_then_execute  # type: ignore[method-assign]
            return made

        scheduler.columns.reserve = reserving  # type: ignore[method-assign]
        scheduler.cache.batch = batch  # type: ignore[method-assign]

    with fed_scheduler(cache, server, tmp_path, prepare=prepare) as scheduler:
        eventually(lambda: scheduler.bound == 3)
    assert filled and scheduler.conflicts == 1
    assert [len(group) for group in sent_batches] == [2]
    placed = bound(server)
    assert sorted(set(placed) - {"filler"}) == names and bindings(server) == Counter(names)
    assert placed["filler"] == filled[0]
    assert max(cpu_per_node(server).values()) <= 4000
    assert cache.verify() == []


def test_two_replicas_claiming_batches_fill_a_small_cluster_exactly(
    cache: Cache,
    make_cache: Callable[..., Cache],
    server: FakeApiServer,
    tmp_path: Path,
    sent_batches: list[list[str]],
) -> None:
    """Three nodes of 6 CPUs and 18 pods of one, two replicas claiming batches of up to 8:
    every pod bound once, no node over its allocatable (Redis checks each claim of a batch
    after the ones before it, and against the other replica's)."""
    for i in range(3):
        server.create(node(f"n{i}", "6"))
    names = queued(server, 18)
    kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
    with racing_schedulers(make_cache, kubeconfig, 2, pop_batch=8) as replicas:
        eventually(lambda: sum(r.bound for r in replicas) == 18, timeout=60)
        eventually(lambda: not cache.dump().assumed_pods, timeout=30)
    assert sent_batches  # claims went in batches
    placed = bound(server)
    assert sorted(placed) == names and bindings(server) == Counter(names)
    assert max(Counter(placed.values()).values()) <= 6
    assert cache.verify() == []


def test_pods_the_columns_cannot_judge_alone_take_the_per_pod_path(
    cache: Cache, server: FakeApiServer, tmp_path: Path, sent_batches: list[list[str]]
) -> None:
    """A pod with a host port, one with preferred pod affinity and a pod group's member never
    ride in a batch: each is attempted alone (the member waits for its group). They are queued
    after the plain pods (the queue's order among equals: the uid), so batches came before."""
    server.create(node("big", "64"))
    plain = [f"p{i:02d}" for i in range(8)]
    for name in plain:
        server.create(pending(name, "1"))
    special = {"z-ported", "z-affine", "z-member"}
    ported = pending("z-ported", "1")
    ported["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    affine = pending("z-affine", "1")
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    affine["spec"]["affinity"] = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term}
            ]
        }
    }
    member = pending("z-member", "1")
    member["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "absent"}
    for manifest in (ported, member, affine):
        server.create(manifest)
    singles: list[str] = []
    with fed_scheduler(
        cache, server, tmp_path, prepare=single_claims(singles), pop_batch=16
    ) as scheduler:
        eventually(lambda: scheduler.bound == 10)
        eventually(lambda: scheduler.gangs.waiting >= 1)
    batched = [name for group in sent_batches for name in group]
    assert batched and not special & set(batched)
    assert {"z-ported", "z-affine"} <= set(singles) and "z-member" not in singles + batched
    assert sorted(batched + singles) == sorted([*plain, "z-ported", "z-affine"])


@pytest.mark.parametrize("landed", [True, False])
def test_redis_away_mid_batch_settles_the_claims_and_the_loop_goes_on(
    cache: Cache, server: FakeApiServer, tmp_path: Path, landed: bool
) -> None:
    """The first batch's call gets no answer (its claims landed, or not): once Redis answers,
    a claim that landed is bound as this replica's own and one that did not goes back to the
    queue; each pod is bound once, none lost."""
    server.create(node("big", "64"))
    names = queued(server, 7)
    away: list[int] = []

    def prepare(scheduler: ReferenceScheduler) -> None:
        make = scheduler.cache.batch

        def batch(*args: Any, **options: Any) -> CommandBatch:
            made = make(*args, **options)
            run = made.execute

            def no_answer() -> Any:
                if away or not claims_in(made):  # (the feeder's ingest shares the cache)
                    return run()
                away.append(len(made))
                if landed:
                    run()
                else:
                    made.close()
                raise redis.ConnectionError("connection lost (test)")

            made.execute = no_answer  # type: ignore[method-assign]
            return made

        scheduler.cache.batch = batch  # type: ignore[method-assign]

    with fed_scheduler(
        cache, server, tmp_path, prepare=prepare, retry_delay=0.2, max_backoff=0.4
    ) as scheduler:
        eventually(lambda: scheduler.bound == 7, timeout=20)
    assert away == [2]  # the pop of two pods
    assert bindings(server) == Counter(names)
    assert scheduler.lost == 0
    eventually(lambda: not cache.dump().assumed_pods)
    assert cache.verify() == []


def test_a_stop_after_a_batch_gives_the_rest_of_its_pop_back_untried(
    cache: Cache, server: FakeApiServer, tmp_path: Path, sent_batches: list[list[str]]
) -> None:
    """The third pop (p03-p06) is a batch of p03 and p04, then p05 (a host port) alone, then
    p06: stopped during the batch, p05 and p06 go back to the queue untried (their lease of
    60 s holds), and the next replica places them at once."""
    server.create(node("big", "64"))
    names = queued(server, 3)
    for name in ("p03", "p04", "p05", "p06"):
        manifest = pending(name, "1")
        if name == "p05":
            manifest["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
        server.create(manifest)
    names += ["p03", "p04", "p05", "p06"]

    def prepare(scheduler: ReferenceScheduler) -> None:
        together = scheduler.claim_together

        def stopping(run: list[Any]) -> Any:
            if [q.pod.name for q in run] == ["p03", "p04"]:
                scheduler.stop.set()
            return together(run)

        scheduler.claim_together = stopping  # type: ignore[method-assign]

    with fed_scheduler(cache, server, tmp_path, prepare=prepare, lease=60.0) as first:
        eventually(lambda: first.stop.is_set())
    assert first.untried == 2 and sent_batches[-1] == ["p03", "p04"]
    eventually(lambda: first.bound == 5)
    with fed_scheduler(cache, server, tmp_path, lease=60.0) as second:
        eventually(lambda: second.bound == 2)
    assert bindings(server) == Counter(names)
    assert cache.verify() == []
