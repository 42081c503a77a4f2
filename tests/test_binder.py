"""The Binding's client side (``ApiBinder``): on a kept-alive connection it is written and read
by ``http.client`` itself; binds, refusals and broken connections come out as through urllib3.
No Redis here: the API server's side alone."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from kubernetes.client.exceptions import ApiException

from schedcache.feed.sync import api_client
from schedcache.scheduler.binder import ApiBinder
from tests.apiserver import FakeApiServer
from tests.test_security import two_cas_and_a_server

NS = "default"


def pending(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"},
    }


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        yield s


def binder_of(server: FakeApiServer, tmp_path: Path) -> ApiBinder:
    return ApiBinder(api_client(str(server.kubeconfig(tmp_path / "kubeconfig"))))


def node_of(server: FakeApiServer, name: str) -> str:
    return str(server.get("Pod", name, NS)["spec"].get("nodeName") or "")


def test_bindings_on_one_kept_alive_connection_bind_and_refuse_as_the_api_server_says(
    server: FakeApiServer, tmp_path: Path
) -> None:
    for name in ("p1", "p2", "p3"):
        server.create(pending(name))
    binder = binder_of(server, tmp_path)
    binder.bind(NS, "p1", "uid-p1", "n1")  # connects (urllib3's path)
    binder.bind(NS, "p2", "uid-p2", "n2")  # the connection kept alive
    assert (node_of(server, "p1"), node_of(server, "p2")) == ("n1", "n2")
    # Already bound elsewhere: 409 with the API server's Status, the pod where it was.
    with pytest.raises(ApiException) as refused:
        binder.bind(NS, "p1", "uid-p1", "n9")
    assert refused.value.status == 409
    assert json.loads(refused.value.body)["reason"] == "Conflict"
    binder.bind(NS, "p2", "uid-p2", "n2")  # already bound there: an earlier try landed
    with pytest.raises(ApiException) as missing:
        binder.bind(NS, "nope", "uid-nope", "n1")
    assert missing.value.status == 404
    binder.bind(NS, "p3", "uid-p3", "n3")
    assert [node_of(server, n) for n in ("p1", "p2", "p3")] == ["n1", "n2", "n3"]
    posts = [r for r in server.requests if r.method == "POST"]
    assert len(posts) == 6  # nothing resent
    pool, _ = binder._server()
    assert pool.num_connections == 1  # every request on the one kept-alive connection


class BindingServer:
    """Answers every Binding 201 on a kept-alive connection (``keep``), or closes the
    connection after each answer (``close``), or answers the first request and then reads the
    next and closes without answering (``drop``); over TLS with ``tls``. Counts the requests
    it read."""

    def __init__(self, mode: str, tls: ssl.SSLContext | None = None) -> None:
        self.mode = mode
        self.requests = 0
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.tls = tls
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            self.connections += 1
            with conn:
                buffer = b""
                while True:
                    while b"\r\n\r\n" not in buffer:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buffer += chunk
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    length = next(
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                    while len(buffer) < length:
                        buffer += conn.recv(65536)
                    buffer = buffer[length:]
                    self.requests += 1
                    if self.mode == "drop" and self.requests > 1:
                        return  # read, never answered
                    answer = b'{"kind":"Status","status":"Success","code":201}'
                    conn.sendall(
                        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer)
                    )
                    if self.mode == "close":
                        return
        except (OSError, ssl.SSLError):
            return

    def binder(self, tmp_path: Path, ca: Path | None = None) -> ApiBinder:
        scheme = "https" if self.tls is not None else "http"
        cluster: dict[str, str] = {"server": f"{scheme}://127.0.0.1:{self.port}"}
        if ca is not None:
            cluster["certificate-authority"] = str(ca)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": cluster}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        return ApiBinder(api_client(str(kubeconfig)), timeout=5.0)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("binder-pki")
    two_cas_and_a_server(directory, "IP:127.0.0.1")
    return directory


def test_bindings_over_tls_go_on_one_kept_alive_connection_and_a_stranger_is_refused(
    pki: Path, tmp_path: Path
) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "server.crt", pki / "server.key")
    server = BindingServer("keep", context)
    try:
        binder = server.binder(tmp_path, pki / "ca.crt")
        for i in range(4):
            binder.bind(NS, f"p{i}", f"uid-p{i}", "n1")
        assert (server.requests, server.connections) == (4, 1)
        # A server whose certificate this kubeconfig's CA did not sign gets no Binding.
        stranger = server.binder(tmp_path, pki / "other-ca.crt")
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            stranger.bind(NS, "p9", "uid-p9", "n1")
        assert server.requests == 4
    finally:
        server.close()


def test_a_kept_alive_connection_the_server_closed_is_replaced_not_failed(
    tmp_path: Path,
) -> None:
    server = BindingServer("close")
    try:
        binder = server.binder(tmp_path)
        for i in range(3):
            binder.bind(NS, f"p{i}", f"uid-p{i}", "n1")
            time.sleep(0.05)  # the server's close arrives before the next bind
        assert server.requests == 3
    finally:
        server.close()


def test_a_binding_whose_kept_alive_connection_breaks_raises_and_is_not_resent(
    tmp_path: Path,
) -> None:
    """A POST the server may have taken is not sent again blindly (urllib3 resends none
    after a read error either): the caller asks where the pod is."""
    server = BindingServer("drop")
    try:
        binder = server.binder(tmp_path)
        binder.bind(NS, "p0", "uid-p0", "n1")
        with pytest.raises(Exception) as broken:
            binder.bind(NS, "p1", "uid-p1", "n1")
        assert not isinstance(broken.value, ApiException)
        time.sleep(0.1)
        assert server.requests == 2
    finally:
        server.close()
