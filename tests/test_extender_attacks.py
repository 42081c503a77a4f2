"""Issue 29's attacks on the extender, each reproduced and refused (docs/security.md lists the
promises with these tests). Every attack runs on the backends of ``tests/conftest.py`` where
the cache takes part; TLS uses certificates made here with ``openssl``; everything listens on
loopback, with short timeouts, so each attack takes seconds."""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from click.testing import CliRunner
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from schedcache import Cache, connect
from schedcache.cli import main
from schedcache.errors import CorruptRecord, RetriesExhausted
from schedcache.extender.forgetter import Forgetter
from schedcache.extender.limits import Limits
from schedcache.extender.service import Extender
from schedcache.extender.tls import ReloadingContext, TlsFiles
from schedcache.feed.sync import api_client
from schedcache.ops.expiry import ExpiryWorker
from schedcache.ops.leases import default_replica
from schedcache.scheduler.binder import ApiBinder
from schedcache.store.retry import RetryPolicy
from tests.apiserver import FakeApiServer
from tests.conftest import REAL_REDIS_URL, real_client
from tests.extender_server import RunningExtender, extender_process
from tests.factories import keyspace, make_node, pod_manifest
from tests.tcp_proxy import FaultyProxy
from tests.test_lua_bounds import command_calls
from tests.test_security import _certificate, two_cas_and_a_server

NS = "team"


def pending(name: str, cpu: str = "500m", **spec: Any) -> dict[str, Any]:
    manifest = pod_manifest(name, "", cpu, "100Mi", namespace=NS, uid=f"uid-{name}")
    manifest["spec"].update(spec)
    return manifest


def binding(name: str, node: str, uid: str | None = None) -> dict[str, str]:
    return {"PodName": name, "PodNamespace": NS, "PodUID": uid or f"uid-{name}", "Node": node}


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def api_binder(server: FakeApiServer, tmp_path: Path, timeout: float = 10.0) -> ApiBinder:
    return ApiBinder(api_client(str(server.kubeconfig(tmp_path / "kubeconfig"))), timeout)


# -- 1. authentication: mutual TLS ----------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("extender-pki")
    two_cas_and_a_server(directory, "IP:127.0.0.1,DNS:localhost")
    server_ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"
    _certificate(directory, "client", "ca", "extendedKeyUsage=clientAuth")
    _certificate(directory, "stranger", "other-ca", "extendedKeyUsage=clientAuth")
    _certificate(directory, "server2", "other-ca", server_ext)
    return directory


def tls_get(port: int, ca: Path, cert: Path | None, key: Path | None) -> int:
    """GET /healthz over TLS as kube-scheduler's tlsConfig does (caFile, certFile, keyFile)."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        context.load_cert_chain(str(cert), str(key))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status
    finally:
        connection.close()


def test_mtls_serves_only_clients_with_a_certificate_from_the_ca(
    cache: Cache, pki: Path, tmp_path: Path
) -> None:
    files = TlsFiles(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    context = ReloadingContext(files).server
    with RunningExtender(Extender(cache), ssl_context=context) as server:
        ca = pki / "ca.crt"
        assert tls_get(server.port, ca, pki / "client.crt", pki / "client.key") == 200
        for cert in (None, "stranger"):  # no certificate; one from another CA
            with pytest.raises((ssl.SSLError, ConnectionError)):
                path = pki / f"{cert}.crt" if cert else None
                tls_get(server.port, ca, path, pki / f"{cert}.key" if cert else None)
        with pytest.raises(OSError):  # plain HTTP on the TLS port
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5)


def test_certificates_are_reloaded_when_their_files_change(
    cache: Cache, pki: Path, tmp_path: Path
) -> None:
    """Rotation to another CA without a restart: the new server certificate is served and only
    clients of the new CA are let in."""
    live = tmp_path / "live"
    live.mkdir()
    for name in ("server.crt", "server.key", "ca.crt"):
        (live / name).write_bytes((pki / name).read_bytes())
    reloading = ReloadingContext(
        TlsFiles(str(live / "server.crt"), str(live / "server.key"), str(live / "ca.crt"))
    )
    with RunningExtender(Extender(cache), ssl_context=reloading.server) as server:
        assert tls_get(server.port, pki / "ca.crt", pki / "client.crt", pki / "client.key") == 200
        (live / "server.crt").write_bytes((pki / "server2.crt").read_bytes())
        (live / "server.key").write_bytes((pki / "server2.key").read_bytes())
        (live / "ca.crt").write_bytes((pki / "other-ca.crt").read_bytes())
        other = pki / "other-ca.crt"
        assert tls_get(server.port, other, pki / "stranger.crt", pki / "stranger.key") == 200
        with pytest.raises((ssl.SSLError, ConnectionError)):
            tls_get(server.port, other, pki / "client.crt", pki / "client.key")
    assert reloading.reloads == 1


def test_the_extender_command_serves_mtls_end_to_end(pki: Path) -> None:
    """``schedcache extender`` with the three flags, as an operator runs it (real Redis)."""
    tls = ["--tls-cert-file", str(pki / "server.crt"), "--tls-private-key-file"]
    tls += [str(pki / "server.key"), "--client-ca-file", str(pki / "ca.crt")]
    name = f"t-{uuid.uuid4().hex[:12]}"
    process, port = extender_process(name, "--no-api", *tls)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status = tls_get(port, pki / "ca.crt", pki / "client.crt", pki / "client.key")
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the extender did not come up"
                time.sleep(0.1)
        assert status == 200
        with pytest.raises((ssl.SSLError, ConnectionError)):
            tls_get(port, pki / "ca.crt", None, None)
        process.terminate()
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0 and f"https://127.0.0.1:{port}" in err
        assert "Traceback" not in err
    finally:
        process.kill()
        Cache(real_client(), name).clear()


@pytest.mark.parametrize("listen", ["0.0.0.0:18888", "[::]:18888", "10.0.0.1:18888", ":18888"])
def test_listening_beyond_loopback_without_mtls_refuses_to_start(listen: str) -> None:
    result = CliRunner().invoke(
        main, ["--redis", REAL_REDIS_URL, "extender", "--no-api", "--listen", listen]
    )
    assert result.exit_code == 1
    for flag in ("--tls-cert-file", "--tls-private-key-file", "--client-ca-file"):
        assert flag in result.output
    assert "--insecure-allow-unauthenticated" in result.output
    assert "Traceback" not in result.output


def test_partial_tls_flags_are_refused_by_name(pki: Path) -> None:
    args = ["extender", "--no-api", "--tls-cert-file", str(pki / "server.crt")]
    result = CliRunner().invoke(main, ["--redis", REAL_REDIS_URL, *args])
    assert result.exit_code == 1 and "--client-ca-file" in result.output


# -- 1, 2. authoritative binds ------------------------------------------------------------


def test_bind_claims_the_api_servers_pod_not_what_filter_was_sent(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """The attack: /filter with the victim's uid and no requests, then /bind. The 8-cpu pod
    must not land on a 4-cpu node."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("victim", "8"))
    with RunningExtender(Extender(cache, api_binder(api_server, tmp_path))) as server:
        harmless = pending("victim", "1m")
        server.post("filter", {"Pod": harmless, "NodeNames": ["n1"]})
        before = keyspace(cache.client, cache.keys.pattern)
        status, answer = server.post("bind", binding("victim", "n1"))
        assert status == 200 and "no longer has room: cpu short" in answer["Error"]
        assert keyspace(cache.client, cache.keys.pattern) == before
    assert api_server.get("Pod", "victim", NS)["spec"].get("nodeName") is None
    assert cache.get_node_info("n1").requested.milli_cpu == 0


@pytest.mark.parametrize(
    "args",
    [
        binding("victim", "n1", uid="uid-small"),  # another pod's uid under the victim's name
        binding("small", "n1", uid="uid-victim"),  # the victim's uid under another name
        {**binding("victim", "n1"), "PodNamespace": "other"},
        binding("victim", "n1", uid="guessed"),
    ],
)
def test_bind_needs_name_namespace_and_uid_of_one_pod_and_reveals_none(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, args: dict[str, str]
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("victim", "1"))
    api_server.create(pending("small", "1"))
    with RunningExtender(Extender(cache, api_binder(api_server, tmp_path))) as server:
        server.post("filter", {"Pod": pending("small", "1"), "NodeNames": ["n1"]})
        before = keyspace(cache.client, cache.keys.pattern)
        status, answer = server.post("bind", args)
        assert status == 200 and answer["Error"]
        assert keyspace(cache.client, cache.keys.pattern) == before
    sent = set(args.values())
    for uid in ("uid-victim", "uid-small"):  # no uid the caller did not send
        assert uid in sent or uid not in answer["Error"]
    assert all(obj["spec"].get("nodeName") is None for obj in api_server.objects("Pod"))


def test_scheduler_names_limit_the_pods_bound(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("mine", "1", schedulerName="schedcache"))
    api_server.create(pending("theirs", "1"))  # default-scheduler
    extender = Extender(
        cache, api_binder(api_server, tmp_path), scheduler_names=frozenset({"schedcache"})
    )
    with RunningExtender(extender) as server:
        status, answer = server.post("bind", binding("theirs", "n1"))
        assert status == 200 and "schedulerName" in answer["Error"]
        assert server.post("bind", binding("mine", "n1")) == (200, {"Error": ""})
    assert cache.pod_state("uid-theirs") is None and cache.pod_state("uid-mine") == "assumed"


def test_a_pod_bound_already_is_refused_before_any_claim(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1", nodeName="n9"))
    with RunningExtender(Extender(cache, api_binder(api_server, tmp_path))) as server:
        before = keyspace(cache.client, cache.keys.pattern)
        status, answer = server.post("bind", binding("a", "n1"))
        assert status == 200 and "already bound" in answer["Error"]
        assert keyspace(cache.client, cache.keys.pattern) == before


# -- 2. filter memory -----------------------------------------------------------------------


def labelled(name: str, labels: int) -> dict[str, Any]:
    manifest = pending(name, "1m")
    manifest["metadata"]["labels"] = {f"l{i:05}": "v" * 8 for i in range(labels)}
    return manifest


def test_filters_with_an_api_server_remember_nothing(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    extender = Extender(cache, api_binder(api_server, tmp_path))
    with RunningExtender(extender) as server:
        for i in range(20):
            assert server.post("filter", {"Pod": labelled(f"p{i}", 5000), "NodeNames": ["n1"]})[0]
    assert extender.pods_bytes == 0 and not extender.pods


def test_no_api_filters_remember_pods_within_a_byte_bound(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    extender = Extender(cache, remember_bytes=1024 * 1024)
    with RunningExtender(extender) as server:
        for i in range(20):  # ~230 KB of JSON each
            server.post("filter", {"Pod": labelled(f"p{i}", 10_000), "NodeNames": ["n1"]})
        assert 0 < extender.pods_bytes <= 1024 * 1024
        assert extender.pods_bytes == sum(len(blob) for blob in extender.pods.values())
        assert server.post("bind", binding("p19", "n1")) == (200, {"Error": ""})  # the newest
        _, answer = server.post("bind", binding("p0", "n1"))  # pushed out by the bound
        assert "not seen in a filter call" in answer["Error"]


# -- 3, 7. bounded bodies, workers and liveness ----------------------------------------------


def healthz_seconds(server: RunningExtender) -> float:
    started = time.perf_counter()
    assert server.get("/healthz") == (200, "ok\n")
    return time.perf_counter() - started


def test_a_body_over_the_limit_is_413_json_and_counted(cache: Cache) -> None:
    limits = Limits(max_body_bytes=64 * 1024)
    with RunningExtender(Extender(cache), limits=limits) as server:
        big = {"Pod": pending("x"), "NodeNames": ["n" * 60] * 2000}
        status, answer = server.post("filter", big)
        assert status == 413 and "over 65536 bytes" in answer["Error"]
        raw = json.dumps(big).encode()
        chunked = _post_chunked(server.port, "/filter", raw)  # no Content-Length
        assert chunked[0] == 413 and "over" in json.loads(chunked[1])["Error"]
        assert 'result="too_large",verb="filter"' in server.get("/metrics")[1]


def test_a_body_that_arrived_whole_with_its_headers_is_still_bounded(cache: Cache) -> None:
    """A body already received when its handler runs is taken without waiting, and still
    refused past the limit: chunked (no Content-Length to refuse it by) or not."""
    limits = Limits(max_body_bytes=8 * 1024)
    with RunningExtender(Extender(cache), limits=limits) as server:
        raw = json.dumps({"Pod": pending("x"), "NodeNames": ["n" * 60] * 200}).encode()
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(raw[i : i + 4096]), raw[i : i + 4096])
            for i in range(0, len(raw), 4096)
        )
        request = b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(request + chunks + b"0\r\n\r\n")  # one write: all of it at once
            reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 413") and b"over 8192 bytes" in reply
        small = json.dumps({"Pod": pending("y"), "NodeNames": ["roomy"]}).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(
                b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                % (len(small), small)
            )
            reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200") and b'"NodeNames"' in reply
        assert healthz_seconds(server) < 1.0


def _post_chunked(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(
            "POST",
            path,
            body=iter([body[i : i + 8192] for i in range(0, len(body), 8192)]),
            encode_chunked=True,
        )
        response = connection.getresponse()
        return response.status, response.read()
    except (ConnectionError, BrokenPipeError):
        return 413, b'{"Error": "connection closed over the limit"}'
    finally:
        connection.close()


class SlowBinder:
    """An API server that takes ``delay`` seconds per Binding (the pod read is quick)."""

    def __init__(self, inner: ApiBinder, delay: float) -> None:
        self.inner = inner
        self.delay = delay

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        time.sleep(self.delay)
        self.inner.bind(namespace, name, uid, node)

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        return self.inner.read_pod(namespace, name)


def test_healthz_and_filter_answer_while_binds_wait_on_a_slow_api_server(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """Attack 7: 20 binds waiting 2 s each on the API server; liveness and filter answer at
    once, and the binds all land."""
    cache.add_node(make_node("n1", "64", "64Gi"))
    for i in range(20):
        api_server.create(pending(f"p{i}", "100m"))
    extender = Extender(cache, SlowBinder(api_binder(api_server, tmp_path), 2.0))
    with RunningExtender(extender) as server, concurrent.futures.ThreadPoolExecutor(20) as pool:
        binds = [pool.submit(server.post, "bind", binding(f"p{i}", "n1")) for i in range(20)]
        time.sleep(0.3)
        assert healthz_seconds(server) < 1.0
        started = time.perf_counter()
        assert server.post("filter", {"Pod": pending("q"), "NodeNames": ["n1"]})[0] == 200
        assert time.perf_counter() - started < 1.0
        assert all(future.result(30) == (200, {"Error": ""}) for future in binds)


def test_healthz_answers_while_large_bodies_are_decoded(cache: Cache) -> None:
    """Attack 3: concurrent large prioritize bodies are decoded in the verb's pool, never on
    the event loop; a request past the verb's slots waits, then gets 503 JSON."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    limits = Limits(prioritize_concurrency=2, queue_timeout=0.5)
    body = {"Pod": pending("x"), "NodeNames": [f"node-{i:07}" for i in range(150_000)]}
    raw = json.dumps(body).encode()  # ~2.3 MB, 150,000 names to score
    with RunningExtender(Extender(cache), limits=limits) as server:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            calls = [pool.submit(server.post, "prioritize", None, raw) for _ in range(6)]
            worst = max(healthz_seconds(server) for _ in range(10))
            statuses = sorted(future.result(60)[0] for future in calls)
        assert worst < 1.0
        assert 200 in statuses and set(statuses) <= {200, 503}
        if 503 in statuses:
            assert 'result="busy",verb="prioritize"' in server.get("/metrics")[1]


# -- 4. connections ---------------------------------------------------------------------


def test_slow_clients_cannot_hold_connections_or_lock_out_probes(cache: Cache) -> None:
    """Attack 4: 60 connections that never finish their headers, with room for 20: each new
    connection evicts the oldest idle one, /healthz and filter still get in at once, and the
    last ones are cut after the header timeout."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    limits = Limits(max_connections=20, header_timeout=1.0)
    with RunningExtender(Extender(cache), limits=limits) as server:
        slow_clients_are_evicted_then_cut(server, 60)


def slow_clients_are_evicted_then_cut(server: RunningExtender, count: int) -> None:
    """``count`` connections that never finish their headers (more than the server's
    ``max_connections``, its header timeout 1 s): probes and filter get in at once, every slow
    one is evicted or cut within 4 s, and the metrics say both."""
    slow = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        slow.append(sock)
    assert healthz_seconds(server) < 1.0
    assert server.post("filter", {"Pod": pending("a"), "NodeNames": ["n1"]})[0] == 200
    deadline = time.monotonic() + 4
    for sock in slow:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1) == b""
        sock.close()
    metrics = server.get("/metrics")[1]
    assert 'schedcache_extender_connections_cut_total{reason="evicted"}' in metrics
    assert 'schedcache_extender_connections_cut_total{reason="header_timeout"}' in metrics
    assert healthz_seconds(server) < 1.0


def test_a_body_that_does_not_arrive_is_cut_with_408(cache: Cache) -> None:
    limits = Limits(header_timeout=5, body_timeout=0.5)
    with RunningExtender(Extender(cache), limits=limits) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive" in reply


# -- 5, 13. no dangling claims ----------------------------------------------------------------


class Refusing:
    """An API server that answers 403 to the Binding."""

    def __init__(self, inner: ApiBinder) -> None:
        self.inner = inner

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise ApiException(status=403, reason="Forbidden")

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        return self.inner.read_pod(namespace, name)


def test_a_forget_that_fails_is_retried_until_it_lands(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack 5: the Binding fails and Redis does not answer the forget that follows (for 3
    tries); the claim is given back all the same."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))
    real_forget = cache.forget_pod
    failures = [0]

    def flaky(pod: Any) -> None:
        if failures[0] < 3:
            failures[0] += 1
            raise RetriesExhausted("Redis did not answer (test)")
        real_forget(pod)

    monkeypatch.setattr(cache, "forget_pod", flaky)
    extender = Extender(
        cache, Refusing(api_binder(api_server, tmp_path)), forgetter=Forgetter(cache, 0.05)
    )
    with RunningExtender(extender) as server:
        status, answer = server.post("bind", binding("a", "n1"))
        assert status == 200 and "403 Forbidden" in answer["Error"]
        deadline = time.monotonic() + 10
        while cache.pod_state("uid-a") is not None:
            assert time.monotonic() < deadline, "the claim was never given back"
            time.sleep(0.05)
    assert failures[0] == 3 and cache.get_node_info("n1").requested.milli_cpu == 0


def test_a_claim_whose_bind_never_finishes_is_released_after_the_bind_timeout(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack 5, durably: the Binding fails, every forget fails, and the replica's lease lives
    on (its heartbeat runs); the expiry worker still releases the claim after --bind-timeout."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))

    def unreachable(pod: Any) -> None:
        raise RetriesExhausted("Redis did not answer (test)")

    monkeypatch.setattr(cache, "forget_pod", unreachable)
    assert cache.lease is not None and cache.lease.take()
    cache.hold_lease()
    forgetter = Forgetter(cache, 0.05)
    extender = Extender(
        cache, Refusing(api_binder(api_server, tmp_path)), forgetter=forgetter, bind_timeout=1.0
    )
    worker = ExpiryWorker(cache)
    with RunningExtender(extender) as server:
        status, answer = server.post("bind", binding("a", "n1"))
        assert status == 200 and "403" in answer["Error"]
        assert worker.run_once() == [] and cache.pod_state("uid-a") == "assumed"
        time.sleep(1.1)
        assert worker.run_once() == ["uid-a"]
    assert cache.pod_state("uid-a") is None and cache.get_node_info("n1").requested.milli_cpu == 0
    assert cache.store.client.exists(cache.keys.lease(cache.replica))  # the lease lived


def test_a_bind_that_finished_keeps_the_caches_ttl_not_the_bind_timeout(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))
    extender = Extender(cache, api_binder(api_server, tmp_path), bind_timeout=1.0)
    with RunningExtender(extender) as server:
        assert server.post("bind", binding("a", "n1")) == (200, {"Error": ""})
    deadline = cache.get_pod_record("uid-a").deadline_ms
    assert deadline is not None and deadline > time.time() * 1000 + 5_000  # ttl 10 s
    time.sleep(1.1)
    assert ExpiryWorker(cache).run_once() == [] and cache.pod_state("uid-a") == "assumed"


def test_a_bind_whose_deadline_leaves_the_ttl_is_one_redis_call(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    """The claim's bind-timeout deadline (60 s) leaves the bound pod more than the cache's ttl
    (10 s) for sync to confirm it: the bind makes one function call, the timed claim (issue 43:
    the deadline set, then moved, was three), and the pod keeps its room until then."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))
    extender = Extender(cache, api_binder(api_server, tmp_path), bind_timeout=60.0)
    calls = command_calls(cache, "fcall")
    with RunningExtender(extender) as server:
        assert server.post("bind", binding("a", "n1")) == (200, {"Error": ""})
    after = command_calls(cache, "fcall")
    if calls is not None and after is not None:  # fakeredis keeps no count
        assert after - calls == 1
    deadline = cache.get_pod_record("uid-a").deadline_ms
    assert deadline is not None and deadline > time.time() * 1000 + 50_000
    assert api_server.get("Pod", "a", NS)["spec"]["nodeName"] == "n1"
    assert ExpiryWorker(cache).run_once() == [] and cache.pod_state("uid-a") == "assumed"


def test_a_bound_pod_is_answered_bound_even_when_its_deadline_cannot_move(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis goes away between the Binding and finish_binding: the pod is bound, so the bind
    says so (kube-scheduler would otherwise retry a bound pod); the claim keeps its bind-timeout
    deadline."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))

    def unreachable(pod: Any, now: float | None = None) -> None:
        raise RetriesExhausted("Redis did not answer (test)")

    monkeypatch.setattr(cache, "finish_binding", unreachable)
    # A bind timeout under the cache's ttl (10 s): the deadline must move once bound.
    extender = Extender(cache, api_binder(api_server, tmp_path), bind_timeout=5.0)
    with RunningExtender(extender) as server:
        assert server.post("bind", binding("a", "n1")) == (200, {"Error": ""})
    record = cache.get_pod_record("uid-a")
    assert record.state == "assumed" and record.deadline_ms is not None
    assert api_server.get("Pod", "a", NS)["spec"]["nodeName"] == "n1"


class Lossy:
    """A Binding that the API server applies, then answers ``error`` (500, a timeout); or,
    with ``apply=False``, does not apply."""

    def __init__(self, inner: ApiBinder, error: Exception, apply: bool = True) -> None:
        self.inner = inner
        self.error = error
        self.apply = apply

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self.apply:
            self.inner.bind(namespace, name, uid, node)
        raise self.error

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        return self.inner.read_pod(namespace, name)


def server_error() -> ApiException:
    error = ApiException(status=500, reason="Internal Server Error")
    error.headers = {"Audit-Id": "secret-audit-id", "X-Internal": "token-abc"}  # type: ignore[assignment]
    error.body = '{"message": "etcd leader changed", "uid": "uid-other"}'
    return error


@pytest.mark.parametrize(
    "error",
    [server_error(), ReadTimeoutError(None, "/binding", "read timed out")],  # type: ignore[arg-type]
    ids=["500", "timeout"],
)
def test_a_binding_that_landed_but_failed_is_settled_as_bound(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, error: Exception
) -> None:
    """Attack 13: the claim must not be forgotten while the pod is bound."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))
    extender = Extender(cache, Lossy(api_binder(api_server, tmp_path), error))
    with RunningExtender(extender) as server:
        assert server.post("bind", binding("a", "n1")) == (200, {"Error": ""})
    assert api_server.get("Pod", "a", NS)["spec"]["nodeName"] == "n1"
    assert cache.pod_state("uid-a") == "assumed" and cache.get_pod_record("uid-a").binding_finished


def test_a_binding_that_failed_unapplied_forgets_and_reveals_no_header(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    api_server.create(pending("a", "1"))
    extender = Extender(cache, Lossy(api_binder(api_server, tmp_path), server_error(), False))
    with RunningExtender(extender) as server:
        status, answer = server.post("bind", binding("a", "n1"))
    assert status == 200 and "500 Internal Server Error" in answer["Error"]
    for secret in ("secret-audit-id", "token-abc", "etcd", "uid-other"):
        assert secret not in answer["Error"]
    assert cache.pod_state("uid-a") is None


# -- 6. replica names -------------------------------------------------------------------------


def test_default_replica_names_differ_between_processes() -> None:
    code = "from schedcache.ops.leases import default_replica; print(default_replica('extender'))"
    names = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(names) == 2 and default_replica("extender") not in names


def test_a_second_live_process_with_the_same_replica_is_refused(
    make_cache: Callable[..., Cache],
) -> None:
    first = make_cache(replica="twin")
    assert first.lease is not None and first.lease.take()
    first.hold_lease()
    second = make_cache(replica="twin")
    assert second.lease is not None and not second.lease.take()
    assert make_cache(replica="other").lease.take()  # type: ignore[union-attr]


def test_the_cli_refuses_a_replica_name_in_use() -> None:
    name = f"t-{uuid.uuid4().hex[:12]}"
    holder = Cache(real_client(), name, replica="twin")
    assert holder.lease is not None and holder.lease.take()
    try:
        result = CliRunner().invoke(
            main,
            [
                "--redis",
                REAL_REDIS_URL,
                "--cache",
                name,
                "extender",
                "--no-api",
                "--replica",
                "twin",
            ],
        )
        assert result.exit_code == 1 and "'twin' is in use" in result.output
        assert "Traceback" not in result.output
    finally:
        holder.lease.stop(release=True)
        holder.clear()


# -- 12. every failure is JSON ----------------------------------------------------------------


def test_a_bind_whose_pod_the_api_lacks_or_cannot_serve_is_an_error_result(
    cache: Cache, api_server: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache.add_node(make_node("n1", "4", "8Gi"))
    extender = Extender(cache, api_binder(api_server, tmp_path, timeout=1.0))
    with RunningExtender(extender) as server:
        status, answer = server.post("bind", binding("ghost", "n1"))
        assert status == 200 and answer["Error"] == "pod team/ghost: not found in the API server"
        api_server.down()
        status, answer = server.post("bind", binding("ghost", "n1"))
        assert status == 200 and "the API server did not answer" in answer["Error"]
    assert "Traceback" not in caplog.text


def test_deeply_nested_json_is_400(cache: Cache) -> None:
    with RunningExtender(Extender(cache)) as server:
        for verb in ("filter", "prioritize", "bind"):
            status, answer = server.post(verb, None, raw=b"[" * 10_000 + b"]" * 10_000)
            assert status == 400 and "nested too deeply" in answer["Error"]
        assert healthz_seconds(server) < 1.0


def test_filter_while_redis_is_down_is_503_json_and_readyz_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real Redis behind a proxy that goes down (fakeredis cannot be unreachable)."""
    target = urlparse(REAL_REDIS_URL)
    proxy = FaultyProxy(target.hostname or "127.0.0.1", target.port or 6379)
    name = f"t-{uuid.uuid4().hex[:12]}"
    database = (target.path or "/0").strip("/") or "0"
    client = connect(f"redis://127.0.0.1:{proxy.port}/{database}")
    cache = Cache(client, name, retry=RetryPolicy(attempts=2, within=0.5))
    cache.add_node(make_node("n1", "4", "8Gi"))
    try:
        with RunningExtender(Extender(cache)) as server:
            assert server.get("/readyz")[0] == 200
            proxy.set_down(True)
            status, answer = server.post("filter", {"Pod": pending("a"), "NodeNames": ["n1"]})
            assert status == 503 and "unreachable" in answer["Error"]
            assert answer["NodeNames"] is None and answer["FailedNodes"] == {}  # the result
            status, answer = server.post("prioritize", {"Pod": pending("a"), "NodeNames": ["n1"]})
            assert status == 503
            assert server.get("/readyz")[0] == 503
            assert healthz_seconds(server) < 1.0
            metrics = server.get("/metrics")[1]
            assert 'result="redis_unavailable",verb="filter"' in metrics
            proxy.set_down(False)
            assert server.post("filter", {"Pod": pending("a"), "NodeNames": ["n1"]})[0] == 200
    finally:
        proxy.close()
        Cache(real_client(), name).clear()
    assert "Traceback" not in caplog.text


def test_a_cache_error_in_filter_is_a_filter_result_with_error(
    cache: Cache, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def corrupt(snapshot: Any) -> None:
        raise CorruptRecord("node n1", "not msgpack (test)")

    monkeypatch.setattr(cache, "update_snapshot", corrupt)
    with RunningExtender(Extender(cache)) as server:
        status, answer = server.post("filter", {"Pod": pending("a"), "NodeNames": ["n1"]})
        assert status == 200 and "not msgpack" in answer["Error"]
        assert answer["NodeNames"] is None and answer["FailedAndUnresolvableNodes"] == {}
        status, answer = server.post("prioritize", {"Pod": pending("a"), "NodeNames": ["n1"]})
        assert status == 500 and "not msgpack" in answer["Error"]
    assert "Traceback" not in caplog.text


# -- issue 32: the port is bound before the banner ------------------------------------------


def test_the_banner_comes_after_the_port_is_bound() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main,
            ["--redis", REAL_REDIS_URL, "extender", "--no-api", "--listen", f"127.0.0.1:{port}"],
        )
    assert result.exit_code == 1 and f"cannot listen on 127.0.0.1:{port}" in result.output
    assert "extender for cache" not in result.output and "Traceback" not in result.output
