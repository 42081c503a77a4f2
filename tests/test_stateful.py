"""Random command sequences against the cache and a plain in-memory model of the same rules.

The model is kube-scheduler's state machine written as directly as possible (dicts and sets, no
Redis): after every step the cache's dump must equal the model, and every command must succeed
or fail exactly when the model says so, with the same exception class.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import ClassVar

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from schedcache import Cache, Pod
from schedcache.errors import (
    InvalidTransition,
    NodeNotFound,
    PodAlreadyExists,
    PodNotAssumed,
    PodNotFound,
)
from tests.factories import make_node, make_pod, port

UIDS = st.sampled_from(["p0", "p1", "p2", "p3", "p4"])
NODES = st.sampled_from(["n0", "n1", "n2"])
CPU = st.sampled_from(["", "100m", "250m", "1"])
PORTS = st.sampled_from([None, 80, 8080])
TTL = 10.0


@dataclass
class PodRecord:
    pod: Pod
    state: str  # "assumed" | "added"
    finished: bool = False
    deadline: float | None = None


@dataclass
class Model:
    pods: dict[str, PodRecord] = field(default_factory=dict)
    live_nodes: set[str] = field(default_factory=set)

    def entries(self) -> set[str]:
        """Node entries: live nodes plus nodes that only pods keep (ghosts, placeholders)."""
        return self.live_nodes | {r.pod.node_name for r in self.pods.values()}


def build_pod(uid: str, node: str, cpu: str, host_port: int | None) -> Pod:
    return make_pod(
        uid, node, cpu, "1Mi" if cpu else "", ports=[port(host_port)] if host_port else None
    )


class CacheMachine(RuleBasedStateMachine):
    client = None  # set by the test
    prefixes: ClassVar[list[str]] = []  # every cache's key pattern, to check that nothing is left

    def __init__(self) -> None:
        super().__init__()
        self.cache = Cache(self.client, f"h-{uuid.uuid4().hex[:10]}", ttl=TTL, replica="hyp")
        self.model = Model()
        self.now = 1_700_000_000.0

    def teardown(self) -> None:
        # The whole random history replays to exactly the live state, invariants included.
        try:
            assert self.cache.verify() == []
        finally:
            self.cache.clear()  # stops the lease heartbeat too: no key is left behind
            CacheMachine.prefixes.append(self.cache.keys.pattern)

    def expect(self, error: type[Exception] | None, action) -> bool:
        """Run ``action``; it must raise ``error`` (or succeed when None). True if it succeeded."""
        if error is None:
            action()
            return True
        with pytest.raises(error):
            action()
        return False

    # -- pod rules ------------------------------------------------------------------------

    @rule(uid=UIDS, node=NODES, cpu=CPU, host_port=PORTS)
    def assume_pod(self, uid, node, cpu, host_port):
        pod = build_pod(uid, node, cpu, host_port)
        error = PodAlreadyExists if uid in self.model.pods else None
        if self.expect(error, lambda: self.cache.assume_pod(pod)):
            self.model.pods[uid] = PodRecord(pod, "assumed")

    @rule(uid=UIDS, advance=st.sampled_from([0.0, 1.0, 5.0]))
    def finish_binding(self, uid, advance):
        self.now += advance
        self.cache.finish_binding(make_pod(uid, ""), now=self.now)
        record = self.model.pods.get(uid)
        if record and record.state == "assumed":
            record.finished, record.deadline = True, self.now + TTL

    @rule(uid=UIDS, node=NODES)
    def forget_pod(self, uid, node):
        record = self.model.pods.get(uid)
        if record and record.pod.node_name != node:
            error = InvalidTransition
        elif record is None or record.state != "assumed":
            error = PodNotAssumed
        else:
            error = None
        if self.expect(error, lambda: self.cache.forget_pod(make_pod(uid, node))):
            del self.model.pods[uid]

    @rule(uid=UIDS, node=NODES, cpu=CPU, host_port=PORTS)
    def add_pod(self, uid, node, cpu, host_port):
        pod = build_pod(uid, node, cpu, host_port)
        record = self.model.pods.get(uid)
        error = PodAlreadyExists if record and record.state == "added" else None
        if self.expect(error, lambda: self.cache.add_pod(pod)):
            self.model.pods[uid] = PodRecord(pod, "added")

    @rule(uid=UIDS, node=NODES, cpu=CPU, host_port=PORTS)
    def update_pod(self, uid, node, cpu, host_port):
        new = build_pod(uid, node, cpu, host_port)
        record = self.model.pods.get(uid)
        if record is None:
            error = PodNotFound
        elif record.state == "assumed" or record.pod.node_name != node:
            error = InvalidTransition
        else:
            error = None
        if self.expect(error, lambda: self.cache.update_pod(new, new)):
            self.model.pods[uid] = PodRecord(new, "added")

    @rule(uid=UIDS, node=st.one_of(st.just(""), NODES))
    def remove_pod(self, uid, node):
        record = self.model.pods.get(uid)
        if record is None:
            error = PodNotFound
        elif node and record.pod.node_name != node:
            error = InvalidTransition
        else:
            error = None
        if self.expect(error, lambda: self.cache.remove_pod(make_pod(uid, node))):
            del self.model.pods[uid]

    @rule(advance=st.sampled_from([0.0, 5.0, 10.0, 20.0]))
    def cleanup_assumed_pods(self, advance):
        self.now += advance
        due = {
            uid
            for uid, r in self.model.pods.items()
            if r.state == "assumed"
            and r.finished
            and r.deadline is not None
            and r.deadline < self.now
        }
        assert set(self.cache.cleanup_assumed_pods(now=self.now)) == due
        for uid in due:
            del self.model.pods[uid]

    # -- node rules -----------------------------------------------------------------------

    @rule(name=NODES, cpu=st.sampled_from(["1", "2", "4"]))
    def add_node(self, name, cpu):
        self.cache.add_node(make_node(name, cpu, "1Gi"))
        self.model.live_nodes.add(name)

    @rule(name=NODES, cpu=st.sampled_from(["1", "8"]))
    def update_node(self, name, cpu):
        self.cache.update_node(None, make_node(name, cpu, "2Gi"))
        self.model.live_nodes.add(name)

    @rule(name=NODES)
    def remove_node(self, name):
        error = None if name in self.model.live_nodes else NodeNotFound
        if self.expect(error, lambda: self.cache.remove_node(name)):
            self.model.live_nodes.discard(name)

    # -- the comparison -------------------------------------------------------------------

    @invariant()
    def cache_equals_model(self):
        dump = self.cache.dump()
        model = self.model
        assert set(dump.nodes) == model.entries()
        assert dump.assumed_pods == {u for u, r in model.pods.items() if r.state == "assumed"}
        assert self.cache.pod_count() == len(model.pods)
        assert self.cache.node_count() == len(model.entries())
        for name, info in dump.nodes.items():
            records = [r for r in model.pods.values() if r.pod.node_name == name]
            assert (info.node is not None) == (name in model.live_nodes)
            assert {p.uid for p in info.pods} == {r.pod.uid for r in records}
            assert sorted(info.pods, key=lambda p: p.uid) == sorted(
                (r.pod for r in records), key=lambda p: p.uid
            )
            assert info.requested.milli_cpu == sum(r.pod.requests.milli_cpu for r in records)
            assert info.requested.memory == sum(r.pod.requests.memory for r in records)
            assert info.non_zero_requested.milli_cpu == sum(
                r.pod.non_zero_requests.milli_cpu for r in records
            )
            assert info.used_ports == {p for r in records for p in r.pod.host_ports}
            assert info.generation <= dump.generation
        for uid, record in model.pods.items():
            assert self.cache.get_pod(uid) == record.pod
            assert self.cache.is_assumed_pod(uid) == (record.state == "assumed")


def test_random_command_sequences_match_the_model(client):
    CacheMachine.client = client
    CacheMachine.prefixes = []
    run_state_machine_as_test(
        CacheMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
    assert CacheMachine.prefixes  # (a heartbeat outliving clear(): tests/test_leases.py)
    left = {p: list(client.scan_iter(match=p, count=1000)) for p in CacheMachine.prefixes}
    assert not any(left.values()), left
