"""Pod.from_k8s keeps each requests shape's sums (schedcache/model/reading.py, ``_SUMS``): a pod
read through a kept sum is the pod read in full, and nothing a full read refuses is let
through by one."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from schedcache.errors import ValidationError
from schedcache.model import reading
from schedcache.model.values import Pod


def manifest(resources: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "i"}
    if resources is not None:
        container["resources"] = resources
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"containers": [container], **spec},
    }


SHAPES = [
    manifest({"requests": {"cpu": "100m", "memory": "500Mi"}}),
    manifest({"limits": {"cpu": "1", "memory": "1Gi"}}),  # requests default to limits
    manifest({"requests": {"cpu": "0.0001", "memory": "1.5"}}),  # rounded up, as upstream
    manifest({"requests": {"cpu": "100m", "example.com/gpu": "2"}}),  # a scalar resource
    manifest(),  # no resources: the non-zero defaults
    manifest(
        {"requests": {"cpu": "200m"}},
        initContainers=[
            {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "i", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
        ],
        overhead={"cpu": "10m"},
    ),
    manifest(
        {"requests": {"cpu": "200m"}},
        initContainers=[{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
    ),
]


@pytest.fixture(autouse=True)
def no_kept_sums() -> None:
    reading._SUMS.clear()


@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_a_pod_read_through_a_kept_sum_is_the_pod_read_in_full(shape: int) -> None:
    full = Pod.from_k8s(copy.deepcopy(SHAPES[shape]))
    assert reading._SUMS  # kept
    kept = Pod.from_k8s(copy.deepcopy(SHAPES[shape]))
    assert kept == full
    reading._SUMS.clear()
    assert Pod.from_k8s(copy.deepcopy(SHAPES[shape])) == full


def test_shapes_that_differ_only_in_a_sidecars_restart_policy_are_kept_apart() -> None:
    sidecar, plain = copy.deepcopy(SHAPES[5]), copy.deepcopy(SHAPES[5])
    del plain["spec"]["initContainers"][0]["restartPolicy"]
    assert Pod.from_k8s(sidecar).requests != Pod.from_k8s(plain).requests
    assert Pod.from_k8s(plain) == Pod.from_k8s(copy.deepcopy(plain))


def test_a_kept_sums_scalar_resources_are_each_pods_own() -> None:
    first = Pod.from_k8s(copy.deepcopy(SHAPES[3]))
    second = Pod.from_k8s(copy.deepcopy(SHAPES[3]))
    assert second.requests.scalar_resources == {"example.com/gpu": 2}
    assert second.requests.scalar_resources is not first.requests.scalar_resources


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"requests": {"cpu": "-1"}}, "must not be negative"),
        ({"requests": {"cpu": "lots"}}, "cpu"),
        ({"requests": {"cpu": 1}}, None),  # a number: read in full, whatever it gives
        ({"requests": {"cpu": True}}, "cpu"),
        ({"requests": ["cpu"]}, "requests"),
        ("resources", "resources"),
    ],
)
def test_a_shape_a_full_read_refuses_is_refused_however_often_it_comes(
    bad: Any, field: Any
) -> None:
    Pod.from_k8s(manifest({"requests": {"cpu": "1"}}))  # a kept sum beside it
    for _ in range(2):
        if field is None:
            reading._SUMS.clear()
            expected = Pod.from_k8s(manifest(bad))
            assert Pod.from_k8s(manifest(copy.deepcopy(bad))) == expected
            continue
        with pytest.raises(ValidationError, match=field):
            Pod.from_k8s(manifest(copy.deepcopy(bad)))


def test_a_pod_that_fails_elsewhere_is_refused_with_its_sum_kept() -> None:
    Pod.from_k8s(copy.deepcopy(SHAPES[0]))
    broken = copy.deepcopy(SHAPES[0])
    broken["spec"]["containers"][0]["ports"] = [{"hostPort": 70000}]
    with pytest.raises(ValidationError, match="hostPort"):
        Pod.from_k8s(broken)


def test_the_kept_sums_are_bounded() -> None:
    for j in range(reading.MAX_SUMS_KEPT + 10):
        Pod.from_k8s(manifest({"requests": {"cpu": f"{j + 1}m"}}))
    assert len(reading._SUMS) <= reading.MAX_SUMS_KEPT
