"""Pod/Node/Resource models built from manifests under kube-scheduler's rules (pure, no Redis)."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcache.errors import ValidationError
from schedcache.model.manifests import load_k8s_file, objects_from_k8s
from schedcache.model.reading import resource_from_list
from schedcache.model.resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    Resource,
    is_scalar_resource_name,
)
from schedcache.model.values import Node, Pod

G = 10**9
MI = 2**20


def container(requests=None, limits=None, ports=None, **extra) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "busybox", **extra}
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        c["resources"] = resources
    if ports is not None:
        c["ports"] = ports
    return c


def pod_doc(
    containers=(), init=(), name="web-0", namespace=None, uid="uid-1", **spec
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": list(containers), "initContainers": list(init), **spec},
    }


def node_doc(name="n1", labels=None, status=None, spec=None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels or {}},
        "spec": spec or {},
        "status": status or {},
    }


def cm(cpu, mem) -> dict[str, Any]:
    return {"cpu": cpu, "memory": mem}


# --------------------------------------------------------------------------------------------
# Resource


def test_resource_from_resource_list_rules():
    r = resource_from_list(
        {
            "cpu": "1500m",
            "memory": "1Gi",
            "ephemeral-storage": "100m",  # bytes, rounded up
            "pods": "110",
            "example.com/foo": "3",
            "nvidia.com/gpu": 1,
            "hugepages-2Mi": "4Mi",
            "attachable-volumes-aws-ebs": "39",
            "kubernetes.io/batch-cpu": "2",  # prefixed native resource: scalar upstream
            "random-invalid-extended-key": "100",  # unqualified unknown: ignored
            "requests.example.com/foo": "1",  # quota-style name: not an extended resource
        },
        obj="node n1",
        field="status.allocatable",
    )
    assert r == Resource(
        milli_cpu=1500,
        memory=2**30,
        ephemeral_storage=1,
        allowed_pod_number=110,
        scalar_resources={
            "example.com/foo": 3,
            "nvidia.com/gpu": 1,
            "hugepages-2Mi": 4 * MI,
            "attachable-volumes-aws-ebs": 39,
            "kubernetes.io/batch-cpu": 2,
        },
    )


def test_resource_scalar_values_round_up():
    r = resource_from_list({"example.com/foo": "1500m"}, obj="o", field="f")
    assert r.scalar_resources == {"example.com/foo": 2}


def test_resource_negative_rejected_unless_allowed():
    with pytest.raises(ValidationError) as info:
        resource_from_list({"memory": "-1"}, obj="node n1", field="status.allocatable")
    assert str(info.value) == "node n1: status.allocatable.memory: must not be negative"
    r = resource_from_list({"memory": "-1"}, obj="o", field="f", allow_negative=True)
    assert r.memory == -1


@pytest.mark.parametrize(
    ("name", "scalar"),
    [
        ("example.com/foo", True),
        ("nvidia.com/gpu", True),
        ("hugepages-1Gi", True),
        ("attachable-volumes-csi-x", True),
        ("kubernetes.io/foo", True),
        ("random-invalid-extended-key", False),
        ("cpu", False),
        ("requests.example.com/foo", False),
        ("Example.com/foo", False),  # prefix must be a lowercase DNS subdomain
        ("example.com/-foo", False),
    ],
)
def test_is_scalar_resource_name(name, scalar):
    assert is_scalar_resource_name(name) is scalar


def test_resource_add_sub():
    a = Resource(1000, 10, 5, 3, {"x/a": 2, "x/b": 1})
    b = Resource(500, 4, 5, 1, {"x/a": 2, "x/c": 7})
    assert a.add(b) == Resource(1500, 14, 10, 4, {"x/a": 4, "x/b": 1, "x/c": 7})
    assert a.sub(b) == Resource(500, 6, 0, 2, {"x/b": 1, "x/c": -7})  # x/a reached 0: dropped
    assert a.add(b).sub(b) == a
    assert Resource().add(Resource()) == Resource()


def test_resource_is_frozen():
    with pytest.raises(AttributeError):
        Resource().milli_cpu = 1  # type: ignore[misc]


def test_resource_dict_round_trip():
    r = Resource(1, 2, 3, 4, {"b/x": 1, "a/y": 2})
    assert r.to_dict() == {
        "milli_cpu": 1,
        "memory": 2,
        "ephemeral_storage": 3,
        "allowed_pod_number": 4,
        "scalar_resources": {"a/y": 2, "b/x": 1},
    }
    assert Resource.from_dict(r.to_dict()) == r
    assert Resource.from_dict({}) == Resource()


# --------------------------------------------------------------------------------------------
# Pod requests


def test_upstream_init_container_example():
    """init 2 CPU/1G and 2 CPU/3G; containers 2 CPU/1G + 1 CPU/1G -> 3 CPU / 3G."""
    pod = Pod.from_k8s(
        pod_doc(
            containers=[container(cm("2", "1G")), container(cm("1", "1G"))],
            init=[container(cm("2", "1G")), container(cm("2", "3G"))],
        )
    )
    assert pod.requests == Resource(milli_cpu=3000, memory=3 * G)
    assert pod.non_zero_requests == Resource(milli_cpu=3000, memory=3 * G)


def test_requests_sum_containers_and_ephemeral_storage():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[
                container({"cpu": "100m", "memory": "500", "ephemeral-storage": "1Ki"}),
                container({"cpu": "200m", "memory": "1k", "example.com/foo": "2"}),
            ]
        )
    )
    assert pod.requests == Resource(300, 1500, 1024, 0, {"example.com/foo": 2})


def test_requests_are_summed_exactly_before_rounding():
    # Go adds the Quantities, then calls MilliValue once: 0.5m + 0.5m = 1m, not 2m.
    pod = Pod.from_k8s(pod_doc(containers=[container({"cpu": "0.5m"}), container({"cpu": "0.5m"})]))
    assert pod.requests.milli_cpu == 1


def test_sidecars_add_to_the_sum():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[container(cm("1", "1G"))],
            init=[container(cm("500m", "2G"), restartPolicy="Always")],
        )
    )
    assert pod.requests == Resource(milli_cpu=1500, memory=3 * G)


def test_regular_init_runs_beside_sidecars_started_before_it():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[container(cm("1", "1G"))],
            init=[
                container(cm("1", "1G"), restartPolicy="Always"),  # sidecar A
                container(cm("3", "1G")),  # runs beside A: 4 CPU / 2G
                container(cm("1", "1G"), restartPolicy="Always"),  # sidecar B
                container(cm("100m", "4G")),  # runs beside A and B: 2.1 CPU / 6G
            ],
        )
    )
    # steady state: 1 + A + B = 3 CPU / 3G; max with the init phases -> 4 CPU / 6G
    assert pod.requests == Resource(milli_cpu=4000, memory=6 * G)


def test_init_before_any_sidecar_does_not_stack_with_later_sidecars():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[container({"cpu": "1"})],
            init=[container({"cpu": "5"}), container({"cpu": "1"}, restartPolicy="Always")],
        )
    )
    assert pod.requests.milli_cpu == 5000  # max(1 + 1, 5), not 5 + 1


def test_restart_policy_other_than_always_is_a_regular_init():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[container({"cpu": "1"})],
            init=[container({"cpu": "500m"}, restartPolicy="OnFailure")],
        )
    )
    assert pod.requests.milli_cpu == 1000


def test_overhead_is_added():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[container(cm("1", "1G"))],
            init=[container(cm("2", "1G"))],
            overhead={"cpu": "250m", "memory": "120Mi", "example.com/foo": "1"},
        )
    )
    assert pod.requests == Resource(2250, G + 120 * MI, 0, 0, {"example.com/foo": 1})
    assert pod.non_zero_requests == Resource(2250, G + 120 * MI)


def test_overhead_only_cpu_counts_only_cpu_in_non_zero():
    pod = Pod.from_k8s(pod_doc(containers=[container()], overhead={"cpu": "10m"}))
    assert pod.requests == Resource(milli_cpu=10)
    assert pod.non_zero_requests == Resource(110, DEFAULT_MEMORY_REQUEST)


def test_non_zero_defaults_for_container_without_requests():
    pod = Pod.from_k8s(pod_doc(containers=[container()]))
    assert pod.requests == Resource()
    assert pod.non_zero_requests == Resource(milli_cpu=100, memory=209715200)
    assert (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST) == (100, 200 * MI)


def test_non_zero_explicit_zero_stays_zero():
    pod = Pod.from_k8s(pod_doc(containers=[container({"cpu": "0", "memory": "0"})]))
    assert pod.non_zero_requests == Resource(milli_cpu=0, memory=0)
    pod = Pod.from_k8s(pod_doc(containers=[container({"cpu": "0"})]))
    assert pod.non_zero_requests == Resource(milli_cpu=0, memory=DEFAULT_MEMORY_REQUEST)


def test_non_zero_is_per_container():
    pod = Pod.from_k8s(
        pod_doc(containers=[container({"cpu": "1"}), container({"memory": "1Gi"}), container()])
    )
    assert pod.requests == Resource(milli_cpu=1000, memory=2**30)
    assert pod.non_zero_requests == Resource(milli_cpu=1200, memory=2**30 + 2 * 200 * MI)


def test_non_zero_applies_to_init_containers_too():
    pod = Pod.from_k8s(
        pod_doc(containers=[container({"cpu": "50m", "memory": "1Mi"})], init=[container()])
    )
    # the init container counts as 100m / 200Mi for the non-zero max
    assert pod.non_zero_requests == Resource(milli_cpu=100, memory=200 * MI)
    assert pod.requests == Resource(milli_cpu=50, memory=MI)


def test_non_zero_ignores_other_resources():
    pod = Pod.from_k8s(pod_doc(containers=[container({"example.com/foo": "1"})]))
    assert pod.non_zero_requests == Resource(100, DEFAULT_MEMORY_REQUEST)


def test_requests_default_to_limits_per_key():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[
                container(limits=cm("2", "1Gi")),  # no requests: both from limits
                container(requests={"cpu": "100m"}, limits=cm("1", "1Gi")),  # memory from limit
            ]
        )
    )
    assert pod.requests == Resource(milli_cpu=2100, memory=2 * 2**30)
    assert pod.non_zero_requests == Resource(milli_cpu=2100, memory=2 * 2**30)


def test_extended_resources_in_pod_requests():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[
                container(
                    {
                        "cpu": "1",
                        "example.com/foo": "3",
                        "random-invalid-extended-key": "100",
                        "hugepages-2Mi": "4Mi",
                    }
                )
            ]
        )
    )
    assert pod.requests == Resource(
        milli_cpu=1000, scalar_resources={"example.com/foo": 3, "hugepages-2Mi": 4 * MI}
    )


def test_extended_resources_max_with_init():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[container({"example.com/foo": "1"})],
            init=[container({"example.com/foo": "5", "example.com/bar": "1"})],
        )
    )
    assert pod.requests.scalar_resources == {"example.com/foo": 5, "example.com/bar": 1}


# --------------------------------------------------------------------------------------------
# Other pod fields


def test_pod_fields():
    doc = pod_doc(
        containers=[container()],
        namespace="ns1",
        nodeName="node-a",
        priority=1000,
        volumes=[
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "logs", "persistentVolumeClaim": {"claimName": "logs"}},
        ],
    )
    doc["metadata"].update(labels={"app": "web"}, resourceVersion="42")
    doc["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "x"},
        ],
    }
    pod = Pod.from_k8s(doc)
    assert pod.uid == pod.key == "uid-1"
    assert pod.name == "web-0"
    assert pod.namespace == "ns1"
    assert pod.full_name == "ns1/web-0"
    assert pod.node_name == "node-a"
    assert pod.priority == 1000
    assert pod.labels == {"app": "web"}
    assert pod.resource_version == "42"
    assert pod.phase == "Running"
    assert pod.conditions == (("PodScheduled", "True"), ("Ready", "False"))
    assert pod.pvc_claims == ("ns1/data-web-0", "ns1/logs")


def test_pod_defaults():
    pod = Pod.from_k8s({"metadata": {"name": "p", "uid": "u"}})  # kind is optional
    assert pod == Pod(uid="u", name="p")
    assert pod.namespace == "default"
    assert pod.node_name == "" and pod.priority == 0 and pod.phase == ""


def test_with_node():
    pod = Pod.from_k8s(pod_doc(containers=[container()]))
    bound = pod.with_node("n2")
    assert bound.node_name == "n2"
    assert pod.node_name == ""
    assert bound == Pod.from_dict({**pod.to_dict(), "node_name": "n2"})


def test_host_ports():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[
                container(
                    ports=[
                        {"containerPort": 80, "hostPort": 8080},
                        {
                            "containerPort": 53,
                            "hostPort": 53,
                            "protocol": "UDP",
                            "hostIP": "10.0.0.1",
                        },
                        {"containerPort": 9090},  # no hostPort
                        {"containerPort": 9091, "hostPort": 0},  # 0 means none
                    ]
                ),
                container(ports=[{"containerPort": 80, "hostPort": 8080}]),  # duplicates kept
            ],
            init=[container(ports=[{"containerPort": 1, "hostPort": 1}], restartPolicy="Always")],
        )
    )
    assert pod.host_ports == (
        ("0.0.0.0", "TCP", 8080),
        ("10.0.0.1", "UDP", 53),
        ("0.0.0.0", "TCP", 8080),
    )


@pytest.mark.parametrize(
    ("affinity", "has_affinity", "required_anti"),
    [
        (None, False, False),
        ({}, False, False),
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}, False, False),
        (
            {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}
                    ]
                }
            },
            True,
            False,
        ),
        (
            {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}
                    ]
                }
            },
            True,
            False,
        ),
        (
            {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname"}
                    ]
                }
            },
            True,
            True,
        ),
        ({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}, True, False),
    ],
)
def test_affinity_flags(affinity, has_affinity, required_anti):
    pod = Pod.from_k8s(pod_doc(containers=[container()], affinity=affinity))
    assert pod.has_affinity is has_affinity
    assert pod.has_required_anti_affinity is required_anti


# --------------------------------------------------------------------------------------------
# Pod validation errors


def err(doc: Any) -> str:
    with pytest.raises(ValidationError) as info:
        Pod.from_k8s(doc)
    return str(info.value)


def test_bad_quantity_message_is_exact():
    doc = pod_doc(containers=[container({"cpu": "1"}), container({"cpu": "lots"})])
    with pytest.raises(ValidationError) as info:
        Pod.from_k8s(doc)
    assert str(info.value) == (
        'pod default/web-0: spec.containers[1].resources.requests.cpu: "lots" is not a quantity'
    )
    assert info.value.obj == "pod default/web-0"
    assert info.value.field == "spec.containers[1].resources.requests.cpu"
    assert info.value.reason == '"lots" is not a quantity'


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "pod <unnamed>: must be a mapping"),
        (
            {"kind": "Node", "metadata": {"name": "x", "uid": "u"}},
            'pod default/x: kind: must be "Pod", not "Node"',
        ),
        ({"metadata": {"uid": "u"}}, "pod <unnamed>: metadata.name: is required"),
        ({"metadata": {"name": "", "uid": "u"}}, "pod <unnamed>: metadata.name: is required"),
        ({"metadata": {"name": 5, "uid": "u"}}, "pod <unnamed>: metadata.name: must be a string"),
        ({"metadata": "x"}, "pod <unnamed>: metadata: must be a mapping"),
        ({"metadata": {"name": "p"}}, "pod default/p: metadata.uid: is required"),
        ({"metadata": {"name": "p", "uid": ""}}, "pod default/p: metadata.uid: is required"),
        (
            {"metadata": {"name": "p", "namespace": "ns", "uid": 1}},
            "pod ns/p: metadata.uid: must be a string",
        ),
        (
            {"metadata": {"name": "p", "uid": "u", "labels": ["a"]}},
            "pod default/p: metadata.labels: must be a mapping",
        ),
        (
            {"metadata": {"name": "p", "uid": "u", "labels": {"a": 1}}},
            "pod default/p: metadata.labels.a: must be a string",
        ),
        (
            {"metadata": {"name": "p", "uid": "u"}, "spec": []},
            "pod default/p: spec: must be a mapping",
        ),
        (
            {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": {}}},
            "pod default/p: spec.containers: must be a list",
        ),
        (
            {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": ["c"]}},
            "pod default/p: spec.containers[0]: must be a mapping",
        ),
        (
            pod_doc([container(), {"resources": []}]),
            "pod default/web-0: spec.containers[1].resources: must be a mapping",
        ),
        (
            pod_doc([{"resources": {"requests": "1"}}]),
            "pod default/web-0: spec.containers[0].resources.requests: must be a mapping",
        ),
        (
            pod_doc([container({"cpu": "-1"})]),
            "pod default/web-0: spec.containers[0].resources.requests.cpu: must not be negative",
        ),
        (
            pod_doc([container(limits={"memory": "-1Gi"})]),
            "pod default/web-0: spec.containers[0].resources.limits.memory: must not be negative",
        ),
        (
            pod_doc([container({"memory": True})]),
            "pod default/web-0: spec.containers[0].resources.requests.memory: "
            "true is not a quantity",
        ),
        (
            pod_doc(init=[container({"cpu": "1x"})]),
            "pod default/web-0: spec.initContainers[0].resources.requests.cpu: "
            '"1x" is not a quantity',
        ),
        (
            pod_doc(init=[container(restartPolicy=1)]),
            "pod default/web-0: spec.initContainers[0].restartPolicy: must be a string",
        ),
        (
            pod_doc(overhead={"cpu": "lots"}),
            'pod default/web-0: spec.overhead.cpu: "lots" is not a quantity',
        ),
        (
            pod_doc([container(ports={})]),
            "pod default/web-0: spec.containers[0].ports: must be a list",
        ),
        (
            pod_doc([container(ports=[1])]),
            "pod default/web-0: spec.containers[0].ports[0]: must be a mapping",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 80, "hostPort": 70000}])]),
            "pod default/web-0: spec.containers[0].ports[0].hostPort: "
            "port 70000 out of range 1-65535",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 80, "hostPort": -1}])]),
            "pod default/web-0: spec.containers[0].ports[0].hostPort: port -1 out of range 1-65535",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 80, "hostPort": "80"}])]),
            "pod default/web-0: spec.containers[0].ports[0].hostPort: must be an integer",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 80, "hostPort": True}])]),
            "pod default/web-0: spec.containers[0].ports[0].hostPort: must be an integer",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 80, "hostPort": 80.0}])]),
            "pod default/web-0: spec.containers[0].ports[0].hostPort: must be an integer",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 0}])]),
            "pod default/web-0: spec.containers[0].ports[0].containerPort: "
            "port 0 out of range 1-65535",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 65536}])]),
            "pod default/web-0: spec.containers[0].ports[0].containerPort: "
            "port 65536 out of range 1-65535",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 80, "hostPort": 80, "hostIP": 1}])]),
            "pod default/web-0: spec.containers[0].ports[0].hostIP: must be a string",
        ),
        (
            pod_doc([container(ports=[{"containerPort": 80, "protocol": "HTTP"}])]),
            "pod default/web-0: spec.containers[0].ports[0].protocol: "
            'must be one of "TCP", "UDP", "SCTP"',
        ),
        (pod_doc(affinity=[]), "pod default/web-0: spec.affinity: must be a mapping"),
        (
            pod_doc(affinity={"podAffinity": 1}),
            "pod default/web-0: spec.affinity.podAffinity: must be a mapping",
        ),
        (
            pod_doc(
                affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
            ),
            "pod default/web-0: spec.affinity.podAntiAffinity."
            "requiredDuringSchedulingIgnoredDuringExecution: must be a list",
        ),
        (pod_doc(volumes={}), "pod default/web-0: spec.volumes: must be a list"),
        (
            pod_doc(volumes=[{"name": "v", "persistentVolumeClaim": {}}]),
            "pod default/web-0: spec.volumes[0].persistentVolumeClaim.claimName: is required",
        ),
        (
            pod_doc(volumes=[{"name": "v", "persistentVolumeClaim": "c"}]),
            "pod default/web-0: spec.volumes[0].persistentVolumeClaim: must be a mapping",
        ),
        (pod_doc(priority="high"), "pod default/web-0: spec.priority: must be an integer"),
        (pod_doc(priority=True), "pod default/web-0: spec.priority: must be an integer"),
        (pod_doc(nodeName=1), "pod default/web-0: spec.nodeName: must be a string"),
        (
            {**pod_doc(), "status": {"conditions": [{"status": "True"}]}},
            "pod default/web-0: status.conditions[0].type: is required",
        ),
        (
            {**pod_doc(), "status": {"phase": 3}},
            "pod default/web-0: status.phase: must be a string",
        ),
    ],
)
def test_pod_validation_errors(doc, message):
    assert err(doc) == message


# --------------------------------------------------------------------------------------------
# Node


def test_node_from_k8s():
    node = Node.from_k8s(
        node_doc(
            labels={"kubernetes.io/hostname": "n1"},
            spec={
                "unschedulable": True,
                "taints": [
                    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                ],
            },
            status={
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {
                    "cpu": "7800m",
                    "memory": "30Gi",
                    "pods": "110",
                    "ephemeral-storage": "100Gi",
                    "example.com/foo": "4",
                },
                "images": [
                    {"names": ["gcr.io/80:latest", "gcr.io/80@sha256:abc"], "sizeBytes": 80 * MI},
                    {"names": ["gcr.io/300:latest"], "sizeBytes": 300 * MI},
                    {"sizeBytes": 1},
                ],
            },
        )
    )
    assert node.name == "n1" and node.uid == "uid-n1"
    assert node.allocatable == Resource(7800, 30 * 2**30, 100 * 2**30, 110, {"example.com/foo": 4})
    assert node.images == (
        (("gcr.io/80:latest", "gcr.io/80@sha256:abc"), 80 * MI),
        (("gcr.io/300:latest",), 300 * MI),
        ((), 1),
    )
    assert node.taints == (
        ("dedicated", "gpu", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "", "NoExecute"),
    )
    assert node.unschedulable is True


def test_node_allocatable_falls_back_to_capacity():
    node = Node.from_k8s(node_doc(status={"capacity": {"cpu": "2", "memory": "1Gi", "pods": 10}}))
    assert node.allocatable == Resource(2000, 2**30, 0, 10)
    assert Node.from_k8s(node_doc()).allocatable == Resource()


def test_node_minimal():
    assert Node.from_k8s({"metadata": {"name": "n"}}) == Node(name="n")


@pytest.mark.parametrize(
    ("labels", "key"),
    [
        (
            {"topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": "zone-2"},
            "region-1:\x00:zone-2",
        ),
        ({"topology.kubernetes.io/region": "region-1"}, "region-1:\x00:"),
        ({"topology.kubernetes.io/zone": "zone-2"}, ":\x00:zone-2"),
        ({}, ""),
        ({"kubernetes.io/hostname": "n1"}, ""),
        (
            {
                "failure-domain.beta.kubernetes.io/region": "beta-r",
                "failure-domain.beta.kubernetes.io/zone": "beta-z",
                "topology.kubernetes.io/region": "ga-r",
                "topology.kubernetes.io/zone": "ga-z",
            },
            "beta-r:\x00:beta-z",
        ),
        (
            {
                "failure-domain.beta.kubernetes.io/zone": "beta-z",
                "topology.kubernetes.io/region": "ga-r",
            },
            "ga-r:\x00:beta-z",
        ),
    ],
)
def test_zone_key(labels, key):
    assert Node(name="n", labels=labels).zone_key == key
    assert Node.from_k8s(node_doc(labels=labels)).zone_key == key


def node_err(doc: Any) -> str:
    with pytest.raises(ValidationError) as info:
        Node.from_k8s(doc)
    return str(info.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("n", "node <unnamed>: must be a mapping"),
        ({"kind": "Pod", "metadata": {"name": "n1"}}, 'node n1: kind: must be "Node", not "Pod"'),
        ({"metadata": {}}, "node <unnamed>: metadata.name: is required"),
        (
            node_doc(status={"allocatable": {"cpu": "-1"}}),
            "node n1: status.allocatable.cpu: must not be negative",
        ),
        (
            node_doc(status={"capacity": {"memory": "lots"}}),
            'node n1: status.capacity.memory: "lots" is not a quantity',
        ),
        (node_doc(status={"allocatable": []}), "node n1: status.allocatable: must be a mapping"),
        (node_doc(status={"images": {}}), "node n1: status.images: must be a list"),
        (
            node_doc(status={"images": [{"names": "x"}]}),
            "node n1: status.images[0].names: must be a list",
        ),
        (
            node_doc(status={"images": [{"names": [1]}]}),
            "node n1: status.images[0].names[0]: must be a string",
        ),
        (
            node_doc(status={"images": [{"sizeBytes": -1}]}),
            "node n1: status.images[0].sizeBytes: must not be negative",
        ),
        (
            node_doc(status={"images": [{"sizeBytes": "1"}]}),
            "node n1: status.images[0].sizeBytes: must be an integer",
        ),
        (node_doc(spec={"unschedulable": "yes"}), "node n1: spec.unschedulable: must be a boolean"),
        (
            node_doc(spec={"taints": [{"effect": "NoSchedule"}]}),
            "node n1: spec.taints[0].key: is required",
        ),
        (node_doc(spec={"taints": [{"key": "k"}]}), "node n1: spec.taints[0].effect: is required"),
        (
            node_doc(spec={"taints": [{"key": "k", "effect": "Sometimes"}]}),
            'node n1: spec.taints[0].effect: "Sometimes" is not one of '
            "['NoSchedule', 'PreferNoSchedule', 'NoExecute']",
        ),
        (
            node_doc(labels=None) | {"metadata": {"name": "n1", "labels": {"a": None, "b": 2}}},
            "node n1: metadata.labels.b: must be a string",
        ),
    ],
)
def test_node_validation_errors(doc, message):
    assert node_err(doc) == message


# --------------------------------------------------------------------------------------------
# Round trips

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
resources = st.builds(
    Resource,
    milli_cpu=st.integers(0, 2**62),
    memory=st.integers(0, 2**62),
    ephemeral_storage=st.integers(0, 2**62),
    allowed_pod_number=st.integers(0, 10**6),
    scalar_resources=st.dictionaries(names, st.integers(-(2**62), 2**62), max_size=3),
)
pods = st.builds(
    Pod,
    uid=names,
    name=names,
    namespace=names,
    node_name=names,
    labels=st.dictionaries(names, names, max_size=4),
    requests=resources,
    non_zero_requests=resources,
    host_ports=st.lists(
        st.tuples(names, st.sampled_from(["TCP", "UDP", "SCTP"]), st.integers(1, 65535)), max_size=4
    ).map(tuple),
    has_affinity=st.booleans(),
    has_required_anti_affinity=st.booleans(),
    pvc_claims=st.lists(names, max_size=3).map(tuple),
    priority=st.integers(-(2**31), 2**31),
    phase=names,
    resource_version=names,
    conditions=st.lists(st.tuples(names, names), max_size=3).map(tuple),
)
nodes = st.builds(
    Node,
    name=names,
    uid=names,
    labels=st.dictionaries(names, names, max_size=4),
    allocatable=resources,
    images=st.lists(
        st.tuples(st.lists(names, max_size=3).map(tuple), st.integers(0, 2**62)), max_size=3
    ).map(tuple),
    taints=st.lists(st.tuples(names, names, names), max_size=3).map(tuple),
    unschedulable=st.booleans(),
    resource_version=names,
)

PLAIN = (str, int, bool, list, dict)


def assert_plain(value: Any) -> None:
    assert isinstance(value, PLAIN), type(value)
    if isinstance(value, list):
        for v in value:
            assert_plain(v)
    if isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, str)
            assert_plain(v)


@given(pods)
def test_pod_round_trip(pod):
    d = pod.to_dict()
    assert_plain(d)
    assert Pod.from_dict(d) == pod
    packed = msgpack.unpackb(msgpack.packb(d), raw=False)
    assert Pod.from_dict(packed) == pod
    assert Pod.from_dict(msgpack.unpackb(msgpack.packb(d), raw=False, use_list=False)) == pod


@given(nodes)
def test_node_round_trip(node):
    d = node.to_dict()
    assert_plain(d)
    assert Node.from_dict(d) == node
    assert Node.from_dict(msgpack.unpackb(msgpack.packb(d), raw=False)) == node


@given(resources)
def test_resource_round_trip_and_add_sub_inverse(r):
    assert Resource.from_dict(r.to_dict()) == r
    assert Resource().add(r) == r
    assert r.sub(r) == Resource()


def test_manifest_pod_round_trip():
    pod = Pod.from_k8s(
        pod_doc(
            containers=[container(cm("1", "1Gi"), ports=[{"containerPort": 80, "hostPort": 80}])],
            affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}},
            volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}],
        )
    )
    assert Pod.from_dict(json.loads(json.dumps(pod.to_dict()))) == pod


# --------------------------------------------------------------------------------------------
# Documents and files


def kubectl_list() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [
            pod_doc([container(cm("1", "1Gi"))], name="web-0", uid="u0"),
            node_doc("n1", status={"allocatable": cm("4", "8Gi")}),
            pod_doc([container(cm("2", "1Gi"))], name="web-1", uid="u1", nodeName="n1"),
            node_doc("n2"),
        ],
    }


def test_objects_from_single_and_list():
    assert objects_from_k8s(pod_doc(uid="x")) == [Pod.from_k8s(pod_doc(uid="x"))]
    assert objects_from_k8s(node_doc()) == [Node.from_k8s(node_doc())]
    objs = objects_from_k8s(kubectl_list())
    assert [type(o).__name__ for o in objs] == ["Pod", "Node", "Pod", "Node"]
    assert [o.name for o in objs] == ["web-0", "n1", "web-1", "n2"]
    assert objs[1].allocatable == Resource(milli_cpu=4000, memory=8 * 2**30)
    assert objs[2].node_name == "n1"
    assert objects_from_k8s({"kind": "List", "items": []}) == []
    assert objects_from_k8s({"kind": "List"}) == []


def test_typed_lists_imply_item_kind():
    pods_list = {"kind": "PodList", "items": [{"metadata": {"name": "p", "uid": "u"}}]}
    assert objects_from_k8s(pods_list) == [Pod(uid="u", name="p")]
    nodes_list = {"kind": "NodeList", "items": [{"metadata": {"name": "n"}}]}
    assert objects_from_k8s(nodes_list) == [Node(name="n")]


def test_list_error_prefixes_items_index():
    doc = kubectl_list()
    doc["items"].append(
        pod_doc([container({"cpu": "1"}), container({"cpu": "lots"})], name="web-0", uid="u9")
    )
    with pytest.raises(ValidationError) as info:
        objects_from_k8s(doc)
    assert str(info.value) == (
        "pod default/web-0: items[4].spec.containers[1].resources.requests.cpu: "
        '"lots" is not a quantity'
    )
    assert info.value.obj == "pod default/web-0"
    assert info.value.field == "items[4].spec.containers[1].resources.requests.cpu"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "object: must be a mapping"),
        ({}, "object: kind: is required"),
        ({"kind": "Service"}, 'object: kind: unsupported kind "Service"'),
        ({"kind": "List", "items": {}}, "List: items: must be a list"),
        ({"kind": "List", "items": [1]}, "List: items[0]: must be a mapping"),
        ({"kind": "List", "items": [{"metadata": {}}]}, "List: items[0].kind: is required"),
        (
            {"kind": "List", "items": [{"kind": "Service"}]},
            'List: items[0].kind: unsupported kind "Service"',
        ),
        (
            {"kind": "PodList", "items": [{"kind": "Node"}]},
            'PodList: items[0].kind: unsupported kind "Node"',
        ),
        ({"kind": "NodeList", "items": ["x"]}, "NodeList: items[0]: must be a mapping"),
        ({"kind": "List", "items": [[]]}, "List: items[0]: must be a mapping"),
        (
            {"kind": "NodeList", "items": [{}]},
            "node <unnamed>: items[0].metadata.name: is required",
        ),
    ],
)
def test_document_errors(doc, message):
    with pytest.raises(ValidationError) as info:
        objects_from_k8s(doc)
    assert str(info.value) == message


def test_load_json_file_and_text(tmp_path):
    path = tmp_path / "all.json"
    path.write_text(json.dumps(kubectl_list()))
    expected = objects_from_k8s(kubectl_list())
    assert load_k8s_file(path) == expected
    assert load_k8s_file(str(path)) == expected
    assert load_k8s_file(json.dumps(kubectl_list())) == expected


MULTI_YAML = """\
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels:
    topology.kubernetes.io/zone: zone-a
status:
  allocatable: {cpu: 4, memory: 8Gi, pods: 110}
---
# an empty document is skipped
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: prod, uid: abc}
spec:
  nodeName: n1
  containers:
  - name: app
    image: nginx
    resources:
      requests: {cpu: 0.5, memory: 128Mi}
    ports:
    - {containerPort: 80, hostPort: 8080}
"""


def test_load_multi_document_yaml(tmp_path):
    path = tmp_path / "objs.yaml"
    path.write_text(MULTI_YAML)
    node, pod = load_k8s_file(path)
    assert isinstance(node, Node) and isinstance(pod, Pod)
    assert node.zone_key == ":\x00:zone-a"
    assert node.allocatable == Resource(4000, 8 * 2**30, 0, 110)
    assert pod.full_name == "prod/web-0"
    assert pod.requests == Resource(milli_cpu=500, memory=128 * MI)
    assert pod.host_ports == (("0.0.0.0", "TCP", 8080),)
    assert load_k8s_file(MULTI_YAML) == [node, pod]


def test_load_errors(tmp_path):
    with pytest.raises(ValidationError, match=r"^<text>: not valid JSON or YAML"):
        load_k8s_file("kind: Pod\n  bad: [indent")
    with pytest.raises(FileNotFoundError):
        load_k8s_file(str(tmp_path / "missing.yaml"))
    with pytest.raises(
        ValidationError, match=r"^pod default/p: metadata\.labels\.v: must be a string$"
    ):
        load_k8s_file("kind: Pod\nmetadata: {name: p, uid: u, labels: {v: 1.0}}\n")
    with pytest.raises(ValidationError, match=r"^object: must be a mapping$"):
        load_k8s_file("- a\n- b\n")
