"""Review of stop 62 (5257f08: timed claims name their claimer in the pod record); found in
review, mended.

``ReferenceScheduler._own_claim`` took any assumed record naming this replica as its own
claim whose reply was lost, and bound it again. A timed claim keeps naming its claimer after
its Binding succeeded (the loop sends no ``finish_binding`` within ``BINDING_ALLOWANCE``),
until the feed confirms the pod. In that window the queue can hand the same pod to the same
replica again: its queue lease lapsed before the claim landed (a slow cycle), another
replica's pop brought it back to ``active``, and the claim landing later does not take it
out of the queue. The second attempt is refused as ``PodAlreadyExists``, and ``_own_claim``
(not in ``_binds`` any more, record naming this replica) posted a second Binding for the
bound pod: a needless Binding POST and pod GET, ``bound`` counted twice for one pod, and a
``finish_binding`` that moved the claim's deadline. Now a record of a claim with a deadline
is this replica's only while the pod's own claim went unanswered (``claimed is not None``),
as before 5257f08.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from schedcache import Cache
from schedcache.feed.sync import api_client
from schedcache.model.values import Node, Pod
from schedcache.ops.queue import SchedulingQueue
from schedcache.scheduler.loop import ReferenceScheduler
from schedcache.store import commands
from tests.apiserver import FakeApiServer
from tests.scheduling import eventually, node, pending
from tests.test_reference_batches import bindings, bound


def test_a_timed_claim_bound_and_popped_again_by_its_replica_is_not_bound_twice(
    make_cache: Callable[..., Cache], tmp_path: Path
) -> None:
    with FakeApiServer() as server:
        server.create(node("big", "64"))
        server.create(pending("p", "1"))
        (node_obj,) = server.objects("Node")
        (pod_obj,) = server.objects("Pod")
        pod = Pod.from_k8s(pod_obj)
        filler = Pod.from_k8s(pending("h", "1"))  # another pending pod, queued after p

        cache = make_cache(replica="a")  # ttl 10: the loop's claims carry a deadline
        cache.add_node(Node.from_k8s(node_obj))
        cache.run(commands.sync_pod_pending(pod, "ref", "1"))
        kubeconfig = str(server.kubeconfig(tmp_path / "kubeconfig"))
        scheduler = ReferenceScheduler(cache, api_client(kubeconfig), "ref", lease=30.0)
        try:
            # Replica a pops p; its cycle is slow, and its lease on p lapses before it claims.
            (first,) = scheduler.queue.pop(1)
            cache.run(commands.sync_pod_pending(filler, "ref", "2"))
            # Replica b's pop (past a's lease) brings p back to `active` and takes h (older).
            other = SchedulingQueue(make_cache(replica="b"), "ref", "b", lease=30.0)
            (taken,) = other.pop(1, now=time.time() + 60)
            assert taken.pod.uid == filler.uid
            # a claims p (a timed claim naming a) and binds it.
            assert scheduler.attempt(first)
            eventually(lambda: bound(server) == {"p": "big"})
            eventually(lambda: not scheduler._binds)
            assert cache.get_pod_record(pod).state == "assumed"  # (naming a since 5257f08)
            # The feed has not confirmed p yet: a's next pop hands p to a again.
            (again,) = scheduler.queue.pop(1, now=time.time() + 60)
            assert again.pod.uid == pod.uid
            scheduler.attempt(again)
            time.sleep(1.0)  # a second Binding and its failure path, if coming, have run
            eventually(lambda: not scheduler._binds)
            # Expected: this replica's claim was answered and its Binding done: nothing is
            # posted again, and the pod is counted bound once.
            assert bindings(server)["p"] == 1, "a second Binding was posted for a bound pod"
            assert scheduler.bound == 1
            record = cache.get_pod_record(pod)
            assert (record.state, record.node) == ("assumed", "big")
            assert cache.get_node_info("big").requested.milli_cpu == 1000
        finally:
            scheduler.stop.set()
            scheduler.binding.shutdown(wait=True)
