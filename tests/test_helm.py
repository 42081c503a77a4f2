"""The Helm chart (deploy/helm/schedcache) installs what deploy/'s overlays install.

The chart is generated from deploy/ by ``deploy/helm/generate.py``; here it is rendered with
Helm's own template engine (Helm v4's Go SDK through ``helm-python-sdk``, in the ``[test]``
extra: no ``helm`` binary needed), once per overlay with that overlay's switches from
``deploy/helm/overlays.yaml``, and compared object by object with ``kubectl kustomize`` of the
overlay. A change under deploy/ without a rerun of the generator fails here.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import helm_python
import pytest
import yaml

from tests.test_deploy import DEPLOY, ROOT, kubectl_with_kustomize_v5, pod_specs, render

CHART = DEPLOY / "helm" / "schedcache"
TABLE = yaml.safe_load((DEPLOY / "helm" / "overlays.yaml").read_text())
OVERLAYS = sorted(p.parent.name for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))

Obj = dict[str, Any]


def nested(flat: dict[str, Any]) -> Obj:
    """``{"redis.mode": "x"}`` -> ``{"redis": {"mode": "x"}}``, as ``--set`` reads it."""
    out: Obj = {}
    for dotted, value in flat.items():
        *heads, leaf = dotted.split(".")
        place = out
        for head in heads:
            place = place.setdefault(head, {})
        place[leaf] = value
    return out


def helm_template(values: Obj) -> list[Obj]:
    """The objects ``helm template`` would print for ``values``."""
    with helm_python.Chart.load(CHART) as chart:
        rendered = chart.render(values, name="schedcache", namespace="schedcache")
    return [
        obj
        for name, text in sorted(rendered.items())
        if not name.endswith(".tpl")
        for obj in yaml.safe_load_all(text)
        if obj
    ]


def keyed(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    out = {}
    for obj in objects:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in out, f"{key} twice"
        out[key] = obj
    return out


def test_every_overlay_has_its_switches():
    """ext43's bind-only overlay, or any new one, must be given values that select it."""
    assert sorted(TABLE["overlays"]) == OVERLAYS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_chart_renders_each_overlay_object_for_object(overlay: str) -> None:
    chart = keyed(helm_template(nested(TABLE["overlays"][overlay] or {})))
    kustomized = keyed(render(f"deploy/overlays/{overlay}"))
    assert sorted(chart) == sorted(kustomized)
    for key, obj in kustomized.items():
        assert chart[key] == obj, key


def test_the_default_values_are_redis_single():
    assert keyed(helm_template({})) == keyed(render("deploy/overlays/redis-single"))


def test_the_migrate_job_is_a_pre_upgrade_hook_of_deploys_job():
    chart = keyed(helm_template({"migrate": {"enabled": True}}))
    (job,) = render("deploy/jobs/migrate")
    key = ("Job", job["metadata"].get("namespace", ""), job["metadata"]["name"])
    hooked = chart[key]
    annotations = hooked["metadata"].pop("annotations")
    assert annotations == {
        "helm.sh/hook": "pre-upgrade",
        "helm.sh/hook-delete-policy": "before-hook-creation",
    }
    assert hooked == job
    assert key not in keyed(helm_template({}))


def test_one_value_sets_the_image_of_every_schedcache_container():
    values = {
        "image": {"repository": "registry.example/sc", "tag": "9.9"},
        "migrate": {"enabled": True},
    }
    for overlay in OVERLAYS:
        objects = helm_template({**nested(TABLE["overlays"][overlay] or {}), **values})
        images = [c["image"] for _, spec in pod_specs(objects) for c in spec["containers"]]
        assert "registry.example/sc:9.9" in images
        assert not [i for i in images if i.startswith("schedcache")], overlay


def test_a_combination_no_overlay_renders_is_refused_naming_the_choices():
    with pytest.raises(helm_python.HelmRenderError) as refused:
        helm_template({"redis": {"mode": "sentinel"}, "prometheus": {"enabled": True}})
    message = str(refused.value)
    assert "redis.mode=sentinel" in message and "prometheus.enabled=true" in message
    assert "redis-sentinel: redis.mode=sentinel" in message


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_chart_lints_strictly_for_every_overlay(overlay: str) -> None:
    """``helm lint --strict``: warnings count; only the missing icon (information) is left."""
    values = nested(TABLE["overlays"][overlay] or {})
    report = helm_python.lint(str(CHART), values, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_generated_chart_is_what_the_generator_writes_now():
    """``generate.py --check`` after any change to deploy/ tells whether to rerun it."""
    kubectl_with_kustomize_v5()
    done = subprocess.run(
        [sys.executable, "deploy/helm/generate.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
