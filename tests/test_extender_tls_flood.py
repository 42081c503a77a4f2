"""Issue 39 item 4 and issue 42's refused TLS client, on real sockets (loopback only).

With mutual TLS, a connection in its handshake counts against ``--max-connections`` (asyncio's
TLS server handed connections to the guard only after their handshake, so connections that
never send a ClientHello were bounded by nothing: 4,000 took the extender from 68 to about
1,200 MiB, kept after they closed). The memory a flood costs is bounded by the connection
limit and comes back when the sockets close; a client refused for its certificate is counted
and logged in one rate-limited line."""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from schedcache import Cache, connect
from schedcache.extender.limits import CONNECTION_BYTES, MIB, Limits
from schedcache.extender.service import Extender
from schedcache.extender.tls import Refusals, ReloadingContext, TlsFiles
from schedcache.extender.trim import MIN_PEAK, Trimmer
from tests.conftest import real_client
from tests.extender_server import RunningExtender, extender_process
from tests.factories import make_node
from tests.test_security import _certificate, two_cas_and_a_server

FLOOD = 2000  # connections that never send a ClientHello
LIMIT = 64  # --max-connections of the flooded extender
SLACK = 24 * MIB  # the interpreter's own churn while the flood is served


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls-flood-pki")
    two_cas_and_a_server(directory, "IP:127.0.0.1")
    _certificate(directory, "client", "ca", "extendedKeyUsage=clientAuth")
    _certificate(directory, "stranger", "other-ca", "extendedKeyUsage=clientAuth")
    return directory


def memory(pid: int, field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of a process, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def tls_get(port: int, pki: Path, name: str | None, path: str = "/healthz") -> tuple[int, str]:
    """GET over TLS with client certificate ``name`` (None: none), as kube-scheduler would."""
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if name is not None:
        context.load_cert_chain(str(pki / f"{name}.crt"), str(pki / f"{name}.key"))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.fixture
def flooded(pki: Path) -> Iterator[tuple[int, int]]:
    """``schedcache extender`` serving mutual TLS on the real Redis: (pid, port)."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    cache = Cache(real_client(), name)
    cache.add_node(make_node("n1", "4", "8Gi"))
    tls = ["--tls-cert-file", str(pki / "server.crt"), "--tls-private-key-file"]
    tls += [str(pki / "server.key"), "--client-ca-file", str(pki / "ca.crt")]
    process, port = extender_process(
        name, "--no-api", *tls, "--max-connections", str(LIMIT), "--read-timeout", "20"
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert tls_get(port, pki, "client")[0] == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "the extender did not come up"
                time.sleep(0.2)
        yield process.pid, port
    finally:
        process.kill()
        process.wait(10)
        cache.clear()


def test_handshakes_count_against_the_limit_and_their_memory_comes_back(
    flooded: tuple[int, int], pki: Path
) -> None:
    pid, port = flooded
    time.sleep(0.5)
    before = memory(pid, "VmRSS")
    silent: list[socket.socket] = []
    try:
        for _ in range(FLOOD):  # bounded: TCP connections that never send a ClientHello
            silent.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(1.0)
        # kube-scheduler is not locked out: the oldest silent connection makes room.
        status, text = tls_get(port, pki, "client", "/metrics")
        assert status == 200
        assert metric(text, "schedcache_extender_connections") <= LIMIT
        held = len(list(Path(f"/proc/{pid}/fd").iterdir()))
        assert held < LIMIT + 40, f"{held} descriptors open for a limit of {LIMIT}"
        peak = memory(pid, "VmHWM") - before
        print(f"flood of {FLOOD}: +{peak / MIB:.0f} MiB at the peak")
        assert peak < LIMIT * CONNECTION_BYTES + SLACK
    finally:
        for sock in silent:
            sock.close()
    deadline = time.monotonic() + 10
    while (left := memory(pid, "VmRSS") - before) >= SLACK:  # given back once closed
        assert time.monotonic() < deadline, f"+{left / MIB:.0f} MiB kept after every close"
        time.sleep(0.2)
    assert tls_get(port, pki, "client")[0] == 200


def refused(reason: str) -> float:
    value = REGISTRY.get_sample_value("schedcache_extender_tls_refused_total", {"reason": reason})
    return value or 0.0


def test_refused_clients_are_counted_and_logged_one_line_per_reason(
    pki: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = TlsFiles(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    context = ReloadingContext(files).server
    start = {reason: refused(reason) for reason in ("no_certificate", "bad_certificate")}
    extender = Extender(Cache(connect(), "tls-refusals"))
    with (
        caplog.at_level(logging.WARNING, logger="schedcache.extender.tls"),
        RunningExtender(extender, limits=Limits(), ssl_context=context) as server,
    ):
        for name in [None] * 5 + ["stranger"] * 3:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                tls_get(server.port, pki, name)
        assert tls_get(server.port, pki, "client")[0] == 200
        deadline = time.monotonic() + 5
        while refused("bad_certificate") - start["bad_certificate"] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert refused("no_certificate") - start["no_certificate"] == 5
    assert refused("bad_certificate") - start["bad_certificate"] == 3
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len([line for line in lines if "no client certificate" in line]) == 1
    assert len([line for line in lines if "not accepted" in line]) == 1
    assert all("TLS client 127.0.0.1:" in line for line in lines)


def test_the_refusal_log_says_how_many_lines_it_stands_for() -> None:
    now = [100.0]
    refusals = Refusals(interval=10.0, clock=lambda: now[0])
    error = ssl.SSLError(1, "no certificate")
    error.reason = "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("schedcache.extender.tls")
    log.addHandler(handler)
    try:
        for _ in range(4):
            assert refusals.refused(error, ("10.0.0.7", 4242)) == "no_certificate"
        now[0] += 10.0
        refusals.refused(error, ("10.0.0.8", 4343))
    finally:
        log.removeHandler(handler)
    assert len(logged) == 2
    assert "10.0.0.7:4242" in logged[0] and "more" not in logged[0]
    assert "10.0.0.8:4343" in logged[1] and "(3 more such since the last line)" in logged[1]


def test_a_client_gone_during_its_handshake_is_counted_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """TCP probes (a load balancer's, the kubelet's ``tcpSocket``) connect and close every few
    seconds: counted as ``closed``, never a warning."""
    with caplog.at_level(logging.WARNING, logger="schedcache.extender.tls"):
        reason = Refusals().refused(ConnectionResetError("closed"), ("10.0.0.9", 80))
    assert reason == "closed"
    assert not caplog.records


def test_a_handshake_that_does_not_end_within_the_read_timeout_is_cut_and_counted(
    pki: Path,
) -> None:
    files = TlsFiles(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    limits = Limits(header_timeout=0.5)
    start = refused("handshake_timeout")
    extender = Extender(Cache(connect(), "tls-timeout"))
    with RunningExtender(extender, limits=limits, ssl_context=ReloadingContext(files).server) as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as silent:
            silent.sendall(b"\x16\x03\x01")  # the start of a ClientHello, never finished
            assert silent.recv(1) == b""  # cut by the guard, within the timeout
        assert tls_get(s.port, pki, "client")[0] == 200
    assert refused("handshake_timeout") - start == 1


def test_freed_memory_is_given_back_once_connections_fall_to_half_their_peak() -> None:
    """The trim policy: nothing for small peaks or small falls, at most one trim a second, and
    a fall within that second trimmed a second later rather than never."""
    open_now = [0]
    trims: list[int] = []

    async def scenario() -> None:
        trimmer = Trimmer(lambda: open_now[0], trim=lambda: trims.append(open_now[0]), interval=0.2)
        for count in range(1, 101):  # a burst of 100 connections
            open_now[0] = count
            trimmer.opened()
        for count in (99, 70, 51):  # not yet half of the peak
            open_now[0] = count
            trimmer.closed()
        assert trims == []
        open_now[0] = 50
        trimmer.closed()
        assert trims == [50]  # at once
        open_now[0] = 4
        trimmer.closed()  # half of 50, within the interval: a little later
        assert trims == [50]
        await asyncio.sleep(0.3)
        assert trims == [50, 4]

    asyncio.run(scenario())
    small = Trimmer(lambda: 0, trim=lambda: trims.append(-1))
    small.peak = MIN_PEAK - 1
    small.closed()
    assert -1 not in trims
