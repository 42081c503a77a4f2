"""deploy/overlays/shared-extender works as its manifests say, without a cluster.

The certificates are made with docs/kubernetes.md's own ``openssl`` commands; the extender is
started as its container runs it (the manifest's arguments, with the mounted Secret's
directory, --listen and --in-cluster swapped for the test's), against the test Redis; its exec
probes are run as the kubelet runs them, and kube-scheduler's side of the handshake (its
client certificate, the CA, the Service's name) is played by Python's ``ssl``.
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import pytest

from tests.test_deploy import ROOT, container, render, scheduler_configuration
from tests.test_deploy_metrics import ENVIRONMENT, free_port, launch, run_probe

SHARED = "deploy/overlays/shared-extender"
MOUNT = "/etc/schedcache/extender-tls/"  # where the Secret schedcache-extender-tls is mounted
PORT = "8443"


def docs_openssl_commands() -> str:
    """The ``openssl`` (and ``printf``) lines of docs/kubernetes.md's shared-extender section."""
    docs = (ROOT / "docs/kubernetes.md").read_text()
    section = docs.split("## A shared extender (mutual TLS)", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    lines = block.replace("\\\n", " ").splitlines()
    return "\n".join(line for line in lines if line.startswith(("openssl ", "printf ")))


class Extender(NamedTuple):
    certificates: Path  # what the Secrets hold, as the docs make them
    port: int
    probes: dict[str, list[str]]  # the manifest's exec probes, pointed at this test's files


def probe_here(command: list[str], certificates: Path, port: int) -> list[str]:
    return [a.replace(MOUNT, f"{certificates}/").replace(PORT, str(port)) for a in command]


@pytest.fixture(scope="module")
def extender(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Extender]:
    certificates = tmp_path_factory.mktemp("certs")
    made = subprocess.run(
        ["bash", "-euc", docs_openssl_commands()],
        cwd=certificates,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    spec = container(render(SHARED), "schedcache-extender", "extender")
    port = free_port()
    spec["args"] = [a.replace(MOUNT, f"{certificates}/") for a in spec["args"]]
    swaps = [("--in-cluster", "--no-api"), ("--listen", f"--listen=127.0.0.1:{port}")]
    process = launch(spec, swaps, ENVIRONMENT)
    probes = {
        probe: probe_here(spec[probe]["exec"]["command"], certificates, port)
        for probe in ("livenessProbe", "readinessProbe")
    }
    try:
        deadline = time.monotonic() + 30
        while run_probe(probes["livenessProbe"], ENVIRONMENT) != 0:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the extender did not answer its probe"
            time.sleep(0.2)
        yield Extender(certificates, port, probes)
    finally:
        process.kill()
        process.wait(10)


def get(port: int, context: ssl.SSLContext, server_hostname: str, path: str) -> str:
    """The status line of ``GET path`` over TLS to 127.0.0.1:``port``, with SNI and the
    certificate check for ``server_hostname`` (the name kube-scheduler dials)."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_hostname) as tls,
    ):
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return tls.recv(4096).decode().split("\r\n", 1)[0]


def test_the_probes_pass_with_the_extenders_own_certificate(extender: Extender) -> None:
    for probe, command in extender.probes.items():
        assert run_probe(command, ENVIRONMENT) == 0, probe
        # Not a probe that passes whatever answers: nothing listening fails it.
        elsewhere = [a.replace(str(extender.port), str(free_port())) for a in command]
        assert run_probe(elsewhere, ENVIRONMENT) != 0, probe
    assert "/healthz" not in " ".join(extender.probes["readinessProbe"])


def test_a_server_only_certificate_fails_the_probes(extender: Extender, tmp_path: Path) -> None:
    """The docs ask for clientAuth in the extender's certificate: without it, the extender
    refuses its own probes (the reason the docs give)."""
    for file in ("ca.crt", "ca.key", "tls.key", "tls.csr"):
        shutil.copy(extender.certificates / file, tmp_path / file)
    (tmp_path / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    made = subprocess.run(
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            "tls.crt",
            "-extfile",
            "server.ext",
        ],
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
    )
    assert made.returncode == 0, made.stderr
    command = [
        a.replace(f"{extender.certificates}/", f"{tmp_path}/")
        for a in extender.probes["livenessProbe"]
    ]
    assert run_probe(command, ENVIRONMENT) != 0


def test_kube_schedulers_client_certificate_is_accepted_and_no_certificate_is_refused(
    extender: Extender,
) -> None:
    config = scheduler_configuration(render(SHARED))
    (extender_config,) = config["extenders"]
    service_host = urlsplit(extender_config["urlPrefix"]).hostname
    assert service_host is not None
    certificates = extender.certificates
    # kube-scheduler: its Secret holds client.crt/client.key as tls.crt/tls.key, and ca.crt.
    client = ssl.create_default_context(cafile=str(certificates / "ca.crt"))
    client.load_cert_chain(certificates / "client.crt", certificates / "client.key")
    assert get(extender.port, client, service_host, "/healthz").startswith("HTTP/1.1 200")
    # Anyone else: no client certificate, no answer (with TLS 1.3 the server's refusal
    # arrives after the client's side of the handshake: an alert or a closed connection).
    anonymous = ssl.create_default_context(cafile=str(certificates / "ca.crt"))
    try:
        answer = get(extender.port, anonymous, service_host, "/healthz")
    except (ssl.SSLError, ConnectionError):
        answer = ""
    assert answer == ""
