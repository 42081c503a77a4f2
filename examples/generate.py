"""Writes the sample inputs of ``schedcache load`` (deterministic; run from the repo root):

* ``examples/kubectl-cluster.json``: what ``kubectl get nodes,pods -o json`` prints for a small
  cluster: 20 nodes over 3 zones (one GPU node, one tainted) and 320 pods of many shapes
  (requests and limits, init containers, a sidecar, host ports, PVCs, affinity, overhead,
  pending and finished pods).
* ``examples/kubectl-watch-with-an-invalid-object.json``: a ``kubectl get pods --watch -o
  json`` stream touching some of those pods, with one deliberately invalid object (a cpu request
  of ``lots``): ``schedcache load`` applies the rest, lists that one and exits with status 1.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
rng = random.Random(7)
ZONES = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
APPS = ["web", "api", "worker", "cache", "db", "ingest", "metrics"]


def node(i: int) -> dict[str, Any]:
    gpu = i == 7
    allocatable = {
        "cpu": "15890m" if not gpu else "31850m",
        "memory": "61255520Ki" if not gpu else "126345812Ki",
        "pods": "110",
        "ephemeral-storage": "95491281146",
        "hugepages-2Mi": "0",
    }
    if gpu:
        allocatable["nvidia.com/gpu"] = "4"
    capacity = {**allocatable, "cpu": "16" if not gpu else "32"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"ip-10-0-{i // 8}-{10 + i}.eu-west-1.compute.internal",
            "uid": f"5b1c{i:04d}-7f3a-4c2e-9d1b-0a8e6f2c{i:04d}",
            "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-10-01T08:00:00Z",
            "labels": {
                "kubernetes.io/hostname": f"ip-10-0-{i // 8}-{10 + i}",
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m6i.4xlarge" if not gpu else "g5.8xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": ZONES[i % 3],
            },
        },
        "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
        if gpu
        else {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "images": [
                {"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 321520},
                {
                    "names": [
                        f"ghcr.io/example/{APPS[i % 7]}@sha256:{i:064x}",
                        f"ghcr.io/example/{APPS[i % 7]}:1.{i % 4}",
                    ],
                    "sizeBytes": 50_000_000 + i * 1_000_000,
                },
            ],
        },
    }


def container(app: str, k: int) -> dict[str, Any]:
    cpu = rng.choice(["50m", "100m", "250m", "500m", "1"])
    mem = rng.choice(["64Mi", "128Mi", "256Mi", "512Mi", "1Gi"])
    spec: dict[str, Any] = {
        "name": f"{app}-{k}",
        "image": f"ghcr.io/example/{app}:1.2",
        "resources": {"requests": {"cpu": cpu, "memory": mem}, "limits": {"memory": mem}},
    }
    if rng.random() < 0.1:
        spec["resources"] = {"limits": {"cpu": cpu, "memory": mem}}  # requests from limits
    return spec


def pod(j: int, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    app = APPS[j % len(APPS)]
    name = f"{app}-{j:04d}"
    spec: dict[str, Any] = {"containers": [container(app, 0)]}
    if j % 5 == 0:
        spec["containers"].append(container(app, 1))
    if j % 9 == 0:
        spec["initContainers"] = [
            {
                "name": "migrate",
                "image": "ghcr.io/example/migrate:1",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
            }
        ]
    if j % 13 == 0:
        spec.setdefault("initContainers", []).append(
            {
                "name": "log-shipper",
                "image": "fluent-bit:3",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}},
            }
        )
    if app == "ingest" and j % 2 == 0:
        spec["containers"][0]["ports"] = [{"containerPort": 8443, "hostPort": 8443}]
    if app == "db":
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}}]
    if app == "web":
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    if j % 17 == 0:
        spec["overhead"] = {"cpu": "250m", "memory": "120Mi"}
        spec["runtimeClassName"] = "kata"
    phase, conditions = "Running", [{"type": "Ready", "status": "True"}]
    if j % 40 == 39:
        phase, conditions = "Pending", [{"type": "PodScheduled", "status": "False"}]
    else:
        spec["nodeName"] = nodes[(j * 7) % len(nodes)]["metadata"]["name"]
        if j % 31 == 30:
            phase = "Succeeded"
    if app == "worker" and j % 3 == 0 and "nodeName" in spec:
        spec["nodeName"] = nodes[7]["metadata"]["name"]
        resources = spec["containers"][0]["resources"]
        resources["limits"]["nvidia.com/gpu"] = "1"
        resources.setdefault("requests", {})["nvidia.com/gpu"] = "1"
        spec["tolerations"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": rng.choice(["default", "shop", "data"]),
            "uid": f"0c7e{j:04d}-2b9d-4f1a-8e3c-5d6a7b8c{j:04d}",
            "resourceVersion": str(200000 + j),
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": {"app": app, "pod-template-hash": f"{j % 97:05x}"},
        },
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions},
    }


def main() -> None:
    nodes = [node(i) for i in range(20)]
    pods = [pod(j, nodes) for j in range(320)]
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": nodes + pods,
    }
    (HERE / "kubectl-cluster.json").write_text(json.dumps(listing, indent=4) + "\n")

    events = []
    modified = json.loads(json.dumps(pods[3]))
    modified["metadata"]["labels"]["release"] = "canary"
    modified["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = "2"
    events.append({"type": "MODIFIED", "object": modified})
    events.append({"type": "DELETED", "object": pods[4]})
    newly_bound = json.loads(json.dumps(pods[39]))  # was pending
    newly_bound["spec"]["nodeName"] = nodes[2]["metadata"]["name"]
    newly_bound["status"]["phase"] = "Running"
    events.append({"type": "MODIFIED", "object": newly_bound})
    fresh = pod(1000, nodes)
    events.append({"type": "ADDED", "object": fresh})
    finished = json.loads(json.dumps(pods[5]))
    finished["status"]["phase"] = "Succeeded"
    events.append({"type": "MODIFIED", "object": finished})
    broken = json.loads(json.dumps(pods[6]))
    broken["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = "lots"
    events.append({"type": "MODIFIED", "object": broken})
    for k in range(10, 24):
        events.append({"type": "MODIFIED", "object": pods[k]})
    (HERE / "kubectl-watch-with-an-invalid-object.json").write_text(
        "".join(json.dumps(e, indent=4) + "\n" for e in events)
    )


if __name__ == "__main__":
    main()
