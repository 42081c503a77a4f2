"""A claim Redis did not answer (the retry policy spent: ``RetriesExhausted``) is settled by
sending it again with its command id once Redis answers: Redis answers a claim that landed as
it did, and judges one that did not now. Before, the scheduler read the pod's record, which
could not tell its own claim with a deadline (no claimer was named before stop 62) from
another replica's made after its lease lapsed: it bound the other's claim as its own (found
in review of the batched claims). Past the window in which Redis surely remembers ids, the
record still settles it, by the claimer it names. The batch and the per-pod path, on every
backend."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from schedcache import Cache
from schedcache.errors import RetriesExhausted
from schedcache.model.values import Pod
from schedcache.scheduler.loop import ReferenceScheduler
from schedcache.store.batch import CommandBatch, SentGroup
from schedcache.store.commands import Command
from tests.apiserver import FakeApiServer
from tests.scheduling import eventually, fed_scheduler, pending_on_big
from tests.test_reference_batches import bindings, bound

PODS = [f"p{i:02d}" for i in range(8)]
CLAIMS = ("assume_pod", "timed_claim")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with pending_on_big(PODS) as s:
        yield s


def claimed_name(command: Command) -> str:
    """The pod a claim names (its subject: "pod <namespace>/<name> (uid <uid>)")."""
    found = re.match(r"pod [^/]+/(\S+) ", command.subject)
    assert found, command.subject
    return found.group(1)


def steal(server: FakeApiServer, other: Cache, name: str) -> None:
    """Another replica claims ``name`` on node big, with a deadline, as a reference scheduler
    does: while this one's Redis was away, its lease on the pod lapsed."""
    (obj,) = [o for o in server.objects("Pod") if o["metadata"]["name"] == name]
    other.assume_pod(Pod.from_k8s(obj).with_node("big"), check_fit=True, deadline=30.0)


def unanswered_batch(
    scenario: str, server: FakeApiServer, other: Cache, events: list[str]
) -> Callable[[ReferenceScheduler], None]:
    """The scheduler's first batch of claims goes unanswered: ``landed`` (applied, the reply
    lost), ``stolen`` (never applied; another replica claims its first pod meanwhile),
    ``old`` (applied, and first sent longer ago than Redis surely remembers ids) or
    ``stolen-old`` (both: the records settle it)."""

    def prepare(scheduler: ReferenceScheduler) -> None:
        make = scheduler.cache.batch

        def batch(*args: Any, **options: Any) -> CommandBatch:
            made = make(*args, **options)
            execute = made.execute

            def unanswered() -> Any:
                claims = list(made.group)
                if events or not any(c.name in CLAIMS for c in claims):
                    return execute()
                first_sent = time.monotonic() - (1000 if scenario.endswith("old") else 0)
                if scenario.startswith("stolen"):
                    events.append(claimed_name(claims[0]))
                    steal(server, other, events[0])
                    made.close()
                else:
                    events.append(scenario)
                    execute()
                # What the batch raises once the retry policy is spent: every group sent.
                raise RetriesExhausted(
                    "no answer (test)", unsettled=[SentGroup(claims, first_sent)]
                )

            made.execute = unanswered  # type: ignore[method-assign]
            return made

        scheduler.cache.batch = batch  # type: ignore[method-assign]

    return prepare


def unanswered_claim(
    scenario: str, server: FakeApiServer, other: Cache, events: list[str]
) -> Callable[[ReferenceScheduler], None]:
    """The same for the scheduler's first claim of one pod (the per-pod path)."""

    def prepare(scheduler: ReferenceScheduler) -> None:
        run = scheduler.cache.run

        def unanswered(command: Command) -> Any:
            if events or command.name not in CLAIMS:
                return run(command)
            if scenario.startswith("stolen"):
                events.append(claimed_name(command))
                steal(server, other, events[0])
            else:
                events.append(scenario)
                run(command)
            if scenario.endswith("old"):
                command = dataclasses.replace(command, created=time.monotonic() - 1000)
            error = redis.ConnectionError("no answer (test)")
            raise scheduler.cache.store.gave_up(command, 3, time.monotonic(), error)

        scheduler.cache.run = unanswered  # type: ignore[method-assign]

    return prepare


PREPARE = {"batch": unanswered_batch, "alone": unanswered_claim}


def placed(
    make_cache: Callable[..., Cache],
    server: FakeApiServer,
    tmp_path: Path,
    path: str,
    scenario: str,
) -> tuple[ReferenceScheduler, list[str], Cache]:
    """Runs one replica whose first claims go unanswered (``scenario``) until every pod not
    stolen is bound; the replica, what happened, and the other replica's cache."""
    other = make_cache(replica="other")
    events: list[str] = []
    prepare = PREPARE[path](scenario, server, other, events)
    with fed_scheduler(
        make_cache(replica="a"),
        server,
        tmp_path,
        prepare,
        retry_delay=0.2,
        max_backoff=0.4,
        pop_batch=4,
        batch_claims=path == "batch",
    ) as scheduler:
        eventually(lambda: bool(events), timeout=20)
        stolen = {events[0]} if scenario.startswith("stolen") else set()
        eventually(lambda: set(bound(server)) == set(PODS) - stolen, timeout=20)
        if scenario == "stolen":
            eventually(lambda: scheduler.lost > 0, timeout=10)
            time.sleep(0.5)  # a Binding of the stolen pod, if one were coming, would be posted
    return scheduler, events, other


@pytest.mark.parametrize("path", ["batch", "alone"])
@pytest.mark.parametrize("scenario", ["landed", "old"])
def test_an_unanswered_claim_that_landed_is_bound_once(
    make_cache: Callable[..., Cache],
    server: FakeApiServer,
    tmp_path: Path,
    path: str,
    scenario: str,
) -> None:
    """Applied, its reply lost: bound once, where it was claimed (sent again within the
    window: Redis answers it from its id; past it: read from the record)."""
    placed(make_cache, server, tmp_path, path, scenario)
    assert bindings(server) == {name: 1 for name in PODS}
    assert set(bound(server).values()) == {"big"}


@pytest.mark.parametrize("path", ["batch", "alone"])
@pytest.mark.parametrize("scenario", ["stolen", "stolen-old"])
def test_an_unanswered_claim_that_never_landed_does_not_take_another_replicas_claim(
    make_cache: Callable[..., Cache],
    server: FakeApiServer,
    tmp_path: Path,
    path: str,
    scenario: str,
) -> None:
    """Never applied; meanwhile another replica claims the pod with a deadline. Sent again
    within the id window, the claim is refused; first sent longer ago than Redis surely
    remembers ids (stolen-old), the record settles it, and it names the other replica as the
    claimer. Either way the scheduler posts no Binding for that pod and the other replica's
    claim holds, counted on its node. (Before stop 62 a deadline claim's record named no
    claimer, and the record path bound the other's claim as this replica's own.)"""
    scheduler, events, other = placed(make_cache, server, tmp_path, path, scenario)
    (stolen,) = events
    if scenario == "stolen":
        assert scheduler.lost >= 1  # found claimed by another, not its own
    assert stolen not in bindings(server)
    assert bindings(server) == {name: 1 for name in PODS if name != stolen}
    (obj,) = [o for o in server.objects("Pod") if o["metadata"]["name"] == stolen]
    record = other.get_pod_record(Pod.from_k8s(obj))
    assert (record.state, record.node, record.claimer) == ("assumed", "big", "other")
    requested = other.get_node_info("big").requested.milli_cpu
    assert requested == 1000 * len(PODS)  # the stolen claim still counted with the bound pods
