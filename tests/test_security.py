"""Security: TLS (server and client certificates), a least-privilege ACL user, what reaches logs
and messages, and that nothing read from Redis is unpickled or evaluated (docs/security.md).

Real Redis only: fakeredis has neither TLS nor ACLs. These tests start their own
``redis-server`` processes on free loopback ports (``tests/servers.py``), never the shared
server of the other tests; the certificates are made with ``openssl`` in a temporary directory.
"""

from __future__ import annotations

import ast
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from click.testing import CliRunner

from schedcache import BatchFailed, Cache, Snapshot, connect
from schedcache.cli.app import main
from schedcache.errors import LibraryNotLoaded
from schedcache.ops.acl import acl_rules
from schedcache.ops.expiry import ExpiryWorker
from schedcache.store.connection import ConnectionFailed, describe
from schedcache.store.keys import Keys
from schedcache.store.library import function_name, library_name
from tests.factories import make_node, make_pod, node_manifest, pod_manifest
from tests.servers import Server, free_port, wait_until

PACKAGE = Path(__file__).resolve().parent.parent / "schedcache"
PASSWORD = "Sched-S3cret-pw"  # the restricted user's; must never show in a message or a log
KEY_PASSPHRASE = "Key-Passphrase-42"  # of the encrypted client key


# -- certificates -------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A test CA with a server and a client certificate, and an unrelated second CA."""

    directory: Path

    def __getattr__(self, name: str) -> str:  # pki.ca_crt -> <dir>/ca.crt
        if name.startswith("_"):
            raise AttributeError(name)
        stem, _, suffix = name.rpartition("_")
        return str(self.directory / f"{stem.replace('_', '-')}.{suffix}")


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=30)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        directory,
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
        *("-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2"),
        *("-subj", f"/CN=schedcache test {name}"),
    )


def _certificate(directory: Path, name: str, ca: str, extensions: str) -> None:
    _openssl(
        directory,
        *("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}"),
    )
    (directory / f"{name}.ext").write_text(extensions + "\n")
    _openssl(
        directory,
        *("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key"),
        *("-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext"),
    )


def two_cas_and_a_server(directory: Path, server_names: str) -> None:
    """The start of every TLS test's PKI: ``ca`` and ``other-ca``, and ``server`` signed by
    ``ca`` for ``server_names`` (a subjectAltName list)."""
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    _certificate(
        directory,
        "server",
        "ca",
        f"subjectAltName={server_names}\nextendedKeyUsage=serverAuth",
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    assert shutil.which("openssl"), "the TLS tests make their certificates with openssl"
    directory = tmp_path_factory.mktemp("pki")
    two_cas_and_a_server(directory, "IP:127.0.0.1,DNS:localhost")
    # A certificate valid for another host only: hostname checking must refuse it.
    _certificate(
        directory,
        "elsewhere",
        "ca",
        "subjectAltName=DNS:redis.elsewhere.example\nextendedKeyUsage=serverAuth",
    )
    _certificate(directory, "client", "ca", "extendedKeyUsage=clientAuth")
    _openssl(
        directory,
        *("pkey", "-in", "client.key", "-aes256", "-passout", f"pass:{KEY_PASSPHRASE}"),
        *("-out", "client-encrypted.key"),
    )
    return Pki(directory)


# -- servers ------------------------------------------------------------------------------


@dataclass
class TlsServer(Server):
    """A redis-server that listens on a TLS port only (``--port 0``)."""

    tls_port: int = 0
    pki: Pki | None = None

    def client(self, **options: object) -> redis.Redis:
        assert self.pki is not None
        return redis.Redis(
            port=self.tls_port,
            ssl=True,
            ssl_ca_certs=self.pki.ca_crt,
            ssl_certfile=self.pki.client_crt,
            ssl_keyfile=self.pki.client_key,
            ssl_check_hostname=False,  # the admin's client, whichever certificate is served
            socket_timeout=5,
            **options,  # type: ignore[arg-type]
        )

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.tls_port}/0"


def start_tls_server(
    directory: Path, pki: Pki, auth_clients: bool, certificate: str = "server", *extra: str
) -> TlsServer:
    tls_port = free_port(bus_offset=10000 if extra else 0)
    server = TlsServer(
        0,
        directory,
        [
            *("--port", "0", "--tls-port", str(tls_port)),
            *("--tls-cert-file", str(pki.directory / f"{certificate}.crt")),
            *("--tls-key-file", str(pki.directory / f"{certificate}.key")),
            *("--tls-ca-cert-file", pki.ca_crt),
            *("--tls-auth-clients", "yes" if auth_clients else "no"),
            *extra,
        ],
        tls_port=tls_port,
        pki=pki,
    )
    return server.start()  # type: ignore[return-value]


@pytest.fixture(scope="module")
def mtls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """TLS with client certificates required (``--tls-auth-clients yes``)."""
    server = start_tls_server(tmp_path_factory.mktemp("mtls"), pki, auth_clients=True)
    yield server
    server.kill()


@pytest.fixture(scope="module")
def tls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """TLS that authenticates the server only (``--tls-auth-clients no``)."""
    server = start_tls_server(tmp_path_factory.mktemp("tls"), pki, auth_clients=False)
    yield server
    server.kill()


# -- a workload ---------------------------------------------------------------------------


def run_workload(cache: Cache) -> None:
    """Every kind of call a scheduler replica, an informer, the worker and an operator make."""
    past = float(cache.client.time()[0]) - 3600
    for index in range(3):
        cache.add_node(make_node(f"n{index}", "4000m", "8Gi"))
    pods = [make_pod(f"p{index}", f"n{index % 3}", "100m", "64Mi") for index in range(6)]
    for pod in pods:
        cache.assume_pod(pod, check_fit=True)
    for pod in pods[:4]:
        cache.finish_binding(pod)
    for pod in pods[:2]:
        cache.add_pod(pod)
    cache.finish_binding(pods[4], now=past)  # due: the worker expires it
    cache.forget_pod(pods[5])
    with cache.batch() as batch:
        batch.add_pod(make_pod("batched", "n1", "10m", "1Mi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert snap.num_nodes() == 3
    cache.update_node(None, make_node("n3", "2000m", "4Gi"))
    cache.update_snapshot(snap)
    assert snap.num_nodes() == 4
    assert cache.get_node_info("n1").pods
    assert cache.get_pod(pods[0]).uid == "p0" and cache.is_assumed_pod(pods[2])
    assert cache.pod_count() == 6 and cache.node_count() == 4
    assert {pod.uid for pod in cache.list_pods()} >= {"p0", "p1", "batched"}
    assert len(cache.dump().nodes) == 4 and cache.node_tree().list()
    assert cache.history(pods[0]) and cache.history_of_node("n1") and cache.stream_length()
    assert sum(len(info.pods) for info in cache.replay().nodes.values()) == 6
    cache.checkpoint()
    cache.compact()
    worker = ExpiryWorker(cache, interval=0.5)
    assert worker.run_once() == ["p4"]
    assert 0 <= worker.seconds_until_next_deadline() <= 0.5
    cache.remove_pod(pods[0])
    cache.remove_node("n2")
    cache.add_pod(make_pod("late", "n0", "10m", "1Mi"))
    assert cache.verify() == []
    assert [event.type for event in cache.events()][-1] == "PodAdded"


# -- TLS ----------------------------------------------------------------------------------


def test_tls_with_client_certificate_runs_the_workload(mtls_server: TlsServer, pki: Pki):
    url = (
        f"{mtls_server.url}?ssl_ca_certs={pki.ca_crt}"
        f"&ssl_certfile={pki.client_crt}&ssl_keyfile={pki.client_key}"
    )
    client = connect(url)
    assert client.connection_pool.connection_class is redis.SSLConnection
    run_workload(Cache(client, "tls", replica="r1"))


def test_tls_with_client_certificate_runs_the_async_workload(mtls_server: TlsServer, pki: Pki):
    """``AsyncCache`` on ``rediss://`` with a client certificate: its hiredis-packed pipelines
    on TLS connections, and the audit's sync twin made from the same URL."""
    from tests.apis import Blocking

    url = (
        f"{mtls_server.url}?ssl_ca_certs={pki.ca_crt}"
        f"&ssl_certfile={pki.client_crt}&ssl_keyfile={pki.client_key}"
    )
    sync_cache = Cache(connect(url), "tls-async", replica="r1")
    blocking = Blocking(sync_cache, url, {"replica": "r1"})
    try:
        assert "SSL" in blocking.async_cache.client.connection_pool.connection_class.__name__
        run_workload(blocking)  # type: ignore[arg-type]
        assert blocking.verify() == []  # folded in a thread on a sync TLS client of the URL
    finally:
        blocking.close_async()
        sync_cache.clear()


def test_tls_options_as_keyword_arguments(mtls_server: TlsServer, pki: Pki):
    client = connect(
        mtls_server.url,
        ssl_ca_certs=pki.ca_crt,
        ssl_certfile=pki.client_crt,
        ssl_keyfile=pki.client_key,
    )
    assert client.ping()


def test_encrypted_client_key_with_its_passphrase_which_is_masked(mtls_server: TlsServer, pki: Pki):
    url = (
        f"{mtls_server.url}?ssl_ca_certs={pki.ca_crt}&ssl_certfile={pki.client_crt}"
        f"&ssl_keyfile={pki.client_encrypted_key}&ssl_password={KEY_PASSPHRASE}"
    )
    assert connect(url).ping()
    assert KEY_PASSPHRASE not in describe(url)
    assert "ssl_password=***" in describe(url)
    with pytest.raises(ConnectionFailed) as info:
        connect(url.replace(KEY_PASSPHRASE, "wrong-" + KEY_PASSPHRASE))
    assert KEY_PASSPHRASE not in str(info.value)


def test_server_authentication_only(tls_server: TlsServer, pki: Pki):
    cache = Cache(connect(f"{tls_server.url}?ssl_ca_certs={pki.ca_crt}"), "tls")
    cache.add_node(make_node("n0"))
    assert cache.verify() == []


def test_a_required_client_certificate_missing_fails_at_connect(mtls_server: TlsServer, pki: Pki):
    with pytest.raises(ConnectionFailed, match=r"^cannot reach Redis at rediss://127\.0\.0\.1"):
        connect(f"{mtls_server.url}?ssl_ca_certs={pki.ca_crt}", timeout=2)


def test_wrong_ca_fails_fast_naming_the_url_without_the_password(tls_server: TlsServer, pki: Pki):
    url = (
        f"rediss://sched:{PASSWORD}@127.0.0.1:{tls_server.tls_port}/0"
        f"?ssl_ca_certs={pki.other_ca_crt}"
    )
    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as info:
        connect(url)
    assert time.monotonic() - started < 2
    message = str(info.value)
    assert message.startswith(
        f"cannot reach Redis at rediss://sched:***@127.0.0.1:{tls_server.tls_port}/0"
    )
    assert "certificate verify failed" in message.lower()
    assert PASSWORD not in message and PASSWORD not in repr(info.value)


def test_hostname_checking_is_on_and_can_be_turned_off(pki: Pki, tmp_path: Path):
    server = start_tls_server(tmp_path, pki, False, "elsewhere")
    try:
        url = f"{server.url}?ssl_ca_certs={pki.ca_crt}"
        with pytest.raises(ConnectionFailed, match=r"(?i)mismatch|hostname"):
            connect(url)
        assert connect(url + "&ssl_check_hostname=false").ping()
        assert connect(url, ssl_check_hostname=False).ping()
    finally:
        server.kill()


def test_a_plain_url_against_the_tls_port_fails_clearly(tls_server: TlsServer):
    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as info:
        connect(f"redis://127.0.0.1:{tls_server.tls_port}/0", timeout=2, connect_timeout=1)
    assert time.monotonic() - started < 3
    assert str(info.value).startswith(
        f"cannot reach Redis at redis://127.0.0.1:{tls_server.tls_port}/0: "
    )
    assert re.search("(?i)reset|closed", str(info.value))  # the TLS port hung up


def test_tls_redis_cluster_with_the_restricted_user(pki: Pki, tmp_path: Path):
    """``rediss+cluster://``: a one-primary cluster on TLS (its bus too), the TLS options
    (booleans included) read from the URL as for a single server, the admin loading the library
    and the restricted user (with the cluster's extra commands) running the workload."""
    server = start_tls_server(
        tmp_path, pki, False, "elsewhere", "--cluster-enabled", "yes", "--tls-cluster", "yes"
    )
    try:
        admin = server.client()
        admin.execute_command("CLUSTER ADDSLOTSRANGE", 0, 16383)
        wait_until(lambda: admin.cluster("info")["cluster_state"] == "ok", 10, "cluster ok")
        where = f"127.0.0.1:{server.tls_port}?ssl_ca_certs={pki.ca_crt}"
        with pytest.raises(ConnectionFailed, match=r"(?i)mismatch|hostname"):
            connect(f"rediss+cluster://{where}")
        where += "&ssl_check_hostname=false"
        result = CliRunner().invoke(main, ["--redis", f"rediss+cluster://{where}", "scripts"])
        assert result.exit_code == 0, result.output
        admin.execute_command(
            "ACL",
            "SETUSER",
            *acl_setuser("sched", PASSWORD, CACHE),
            *(f"+{command}" for command in ACL_CLUSTER_COMMANDS),
        )
        admin.acl_log_reset()
        client = connect(f"rediss+cluster://sched:{PASSWORD}@{where}")
        run_workload(Cache(client, CACHE, replica="r1"))
        with pytest.raises(redis.exceptions.NoPermissionError):
            Cache(client, OTHER).add_node(make_node("n0"))
        # that key, and no other refusal: the workload needed nothing more
        assert [(e["reason"], e["object"]) for e in admin.acl_log()] == [("key", "{other}:")]
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("url", "password"),
    [
        (url, password)
        for url in (
            "redis://sched:{pw}@127.0.0.1:{port}/0",
            "rediss://sched:{pw}@127.0.0.1:{port}/0",
            "redis+cluster://sched:{pw}@127.0.0.1:{port}",
            "redis+sentinel://sched:{pw}@127.0.0.1:{port}/master",
        )
        for password in ("ab/cd" + PASSWORD, PASSWORD + "?x", "a#" + PASSWORD)
        # (that one parses, and the Sentinel client's retries take seconds to give up)
        if not (url.startswith("redis+sentinel") and "#" in password)
    ],
)
def test_a_password_that_breaks_the_url_is_not_quoted(url: str, password: str):
    """An unencoded ``/``, ``?`` or ``#`` splits the URL inside the password: the parser's
    message would quote the pieces."""
    with pytest.raises(ConnectionFailed) as info:
        connect(url.format(pw=password, port=free_port()), connect_timeout=0.5)
    message = str(info.value)
    assert "sched:***@" in message
    for piece in ("ab", "cd", PASSWORD, "x", "a"):
        if piece in password:
            assert f"'{piece}" not in message and PASSWORD not in message


def test_an_unknown_option_fails_at_connect_naming_it(tls_server: TlsServer, pki: Pki):
    with pytest.raises(ConnectionFailed, match="unexpected keyword argument 'ssl_ca_cert'"):
        connect(f"{tls_server.url}?ssl_ca_cert={pki.ca_crt}")
    with pytest.raises(ConnectionFailed, match="'ssl_ca_certs'"):  # TLS options need rediss://
        connect(f"redis://127.0.0.1:{tls_server.tls_port}/0?ssl_ca_certs={pki.ca_crt}")


# -- ACL ----------------------------------------------------------------------------------

CACHE = "secure"
OTHER = "other"

# What redis-py's cluster client asks as well: the slot map, and the command table it routes by.
ACL_CLUSTER_COMMANDS = ("cluster|slots", "command")


def acl_setuser(user: str, password: str, cache: str) -> list[str]:
    """The ``ACL SETUSER`` arguments docs/security.md gives: ``schedcache acl``'s rules for the
    worker role (it runs every command of this file's workload) and a password."""
    return [user, *acl_rules(cache, "worker").split(), f">{password}"]


def test_the_docs_show_the_acl_command_not_a_hand_kept_list():
    text = (PACKAGE.parent / "docs" / "security.md").read_text(encoding="utf-8")
    assert "schedcache acl prod --role scheduler" in text
    assert "+incrby" not in text  # no list to go stale: the rules come from the command
    assert "--cluster" in text and "--replica-reads" in text


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the schedcache library loaded by the admin (the default user) and a
    restricted user ``sched`` for the cache ``secure``; ``other`` is another tenant's cache."""
    server = Server(free_port(), tmp_path_factory.mktemp("acl"), []).start()
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", *acl_setuser("sched", PASSWORD, CACHE))
    result = CliRunner().invoke(main, ["--redis", f"redis://127.0.0.1:{server.port}/0", "scripts"])
    assert result.exit_code == 0, result.output
    other = Cache(admin, OTHER)
    other.add_node(make_node("theirs"))
    other.assume_pod(make_pod("their-pod", "theirs", "10m", "1Mi"))
    admin.acl_log_reset()
    yield server
    server.kill()


def restricted_url(server: Server, password: str = PASSWORD) -> str:
    return f"redis://sched:{quote(password)}@127.0.0.1:{server.port}/0"


def denials(server: Server) -> list[str]:
    """The ACL LOG since the last reset (``client|setinfo`` aside: redis-py sends it at connect
    and ignores a refusal)."""
    return [
        f"{entry['reason']} {entry['object']}"
        for entry in server.client().acl_log()
        if entry["object"] != "client|setinfo"
    ]


def test_restricted_user_runs_the_whole_workload(
    acl_server: Server, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    acl_server.client().acl_log_reset()
    client = connect(restricted_url(acl_server))
    assert PASSWORD not in repr(client)
    cache = Cache(client, CACHE, replica="r1", lease_ttl=5)
    run_workload(cache)
    cache.hold_lease()
    cache.lease.renew()  # type: ignore[union-attr]
    cache.close(release_lease=True)
    assert client.xread({cache.keys.events: "0"}, count=1)  # `events --follow`
    assert client.execute_command("WAIT", 0, 10) == 0  # --wait-replicas
    runner = CliRunner()
    for command in (
        ["stats"],
        ["verify"],
        ["events"],
        ["replay"],
        ["dump"],
        ["history", "pod", "p1"],
    ):
        result = runner.invoke(
            main, ["--redis", restricted_url(acl_server), "--cache", CACHE, *command]
        )
        assert result.exit_code == 0, (command, result.output, result.exception)
        assert PASSWORD not in result.output
    assert denials(acl_server) == []
    assert PASSWORD not in caplog.text


def test_restricted_user_runs_the_async_workload(acl_server: Server) -> None:
    """The same workload through ``AsyncCache`` (its hiredis-packed pipelines, the lease task,
    the expiry coroutine, the audit in a thread): the recipe's commands suffice."""
    from schedcache.aio import AsyncExpiryWorker
    from tests.apis import Blocking

    Cache(acl_server.client(), CACHE).clear()  # the admin: the sync workload ran there first
    acl_server.client().acl_log_reset()
    url = restricted_url(acl_server)
    sync_cache = Cache(connect(url), CACHE, replica="r2")
    blocking = Blocking(sync_cache, url, {"replica": "r2", "lease_ttl": 5})
    try:
        run_workload(blocking)  # type: ignore[arg-type]
        worker = AsyncExpiryWorker(blocking.async_cache)
        assert blocking.loop.run(worker.run_once()) == []  # the workload's due pod went already
        assert blocking.verify() == []
    finally:
        blocking.close_async()
    assert denials(acl_server) == []
    Cache(acl_server.client(), CACHE).clear()


def test_restricted_user_runs_a_sync_and_a_relist(acl_server: Server, tmp_path: Path) -> None:
    """`schedcache sync` with the recipe's user: lists (MGET of versions), reconciles, and
    removals turning versions into tombstones (PEXPIRE inside the functions)."""
    from tests.apiserver import FakeApiServer

    with FakeApiServer() as api:
        api.create(node_manifest("n1", "4", "8Gi"))
        api.create(pod_manifest("p", "n1", "100m", "1Mi", uid="uid-sync"))
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        runner = CliRunner()
        argv = ["--redis", restricted_url(acl_server), "--cache", CACHE, "sync", "--once"]
        for _ in range(2):  # the second list finds everything there
            result = runner.invoke(main, [*argv, "--kubeconfig", kubeconfig])
            assert result.exit_code == 0, (result.output, result.exception)
        assert Cache(connect(restricted_url(acl_server)), CACHE).pod_state("uid-sync") == "added"
        api.delete("Pod", "p", pod_manifest("p")["metadata"]["namespace"])
        assert runner.invoke(main, [*argv, "--kubeconfig", kubeconfig]).exit_code == 0
    cache = Cache(connect(restricted_url(acl_server)), CACHE)
    assert cache.pod_state("uid-sync") is None
    assert denials(acl_server) == []


def test_restricted_user_cannot_touch_another_cache(
    acl_server: Server, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    admin = acl_server.client()
    theirs = {key: admin.dump(key) for key in admin.keys(Keys(OTHER).pattern)}
    client = connect(restricted_url(acl_server))
    errors: list[Exception] = []
    intruder = Cache(client, OTHER)  # constructing is allowed: its calls say NOPERM
    for attempt in (
        lambda: client.get(Keys(OTHER).generation),
        lambda: client.set(Keys(OTHER).pod("x"), b"x"),
        lambda: client.xrange(Keys(OTHER).events),
        lambda: intruder.add_node(make_node("mine")),
        lambda: intruder.remove_node("theirs"),
        lambda: intruder.dump(),
        lambda: intruder.get_pod("their-pod"),
        lambda: intruder.replay(),
        lambda: ExpiryWorker(intruder).run_once(),
        # the library's read function as well: ACLs check the keys of FCALL and redis.call
        lambda: client.fcall_ro(
            function_name("read_nodes"), 1, Keys(OTHER).prefix, "", "", "theirs"
        ),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError, match=r"(?i)no permissions") as info:
            attempt()
        errors.append(info.value)
    with pytest.raises(BatchFailed) as failed, intruder.batch() as batch:
        batch.add_node(make_node("mine"))
    errors += [error for _, error in failed.value.failures]
    assert isinstance(errors[-1], redis.exceptions.NoPermissionError)
    assert {key: admin.dump(key) for key in admin.keys(Keys(OTHER).pattern)} == theirs
    assert all(PASSWORD not in f"{error} {error!r}" for error in errors)
    assert PASSWORD not in caplog.text
    admin.acl_log_reset()


@pytest.mark.parametrize(
    "command",
    [
        ("FLUSHALL",),
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("CONFIG", "GET", "requirepass"),
        ("FUNCTION", "LOAD", "REPLACE", "#!lua name=evil\nredis.register_function('x', 'x')"),
        ("FUNCTION", "DELETE", "schedcache"),
        ("FUNCTION", "FLUSH"),
        ("FUNCTION", "LIST"),
        ("EVAL", "return redis.call('GET', KEYS[1])", "1", "{secure}:gen"),
        ("ACL", "SETUSER", "sched", "+@all"),
        ("ACL", "LIST"),
        ("CLIENT", "LIST"),
        ("SWAPDB", "0", "1"),
        ("SHUTDOWN", "NOSAVE"),
        ("INFO",),
        ("SUBSCRIBE", "x"),
        ("MONITOR",),
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_restricted_user_cannot_run_commands_outside_its_list(acl_server: Server, command):
    client = redis.Redis.from_url(restricted_url(acl_server), socket_timeout=5)
    with pytest.raises(redis.exceptions.NoPermissionError) as info:
        client.execute_command(*command)
    assert PASSWORD not in str(info.value)
    assert acl_server.alive


def test_restricted_user_cannot_load_the_library_the_admin_does(acl_server: Server):
    admin = acl_server.client()
    admin.function_delete(library_name())
    try:
        with pytest.raises(LibraryNotLoaded, match="an admin runs `schedcache scripts`") as info:
            Cache(connect(restricted_url(acl_server)), CACHE)
        assert f"lacks the schedcache library {library_name()}" in str(info.value)
        assert PASSWORD not in str(info.value)
        refused = CliRunner().invoke(main, ["--redis", restricted_url(acl_server), "scripts"])
        assert refused.exit_code == 1
        assert "a Redis user allowed FUNCTION LOAD and FUNCTION LIST" in refused.output
        assert PASSWORD not in refused.output
    finally:
        result = CliRunner().invoke(
            main, ["--redis", f"redis://127.0.0.1:{acl_server.port}/0", "scripts"]
        )
        assert result.exit_code == 0, result.output
    assert Cache(connect(restricted_url(acl_server)), CACHE).node_count() >= 0


def test_restricted_user_cannot_clear_the_cache(acl_server: Server):
    """``Cache.clear()`` SCANs the whole keyspace (the names of other caches' keys): the
    admin's job."""
    cache = Cache(connect(restricted_url(acl_server)), CACHE)
    with pytest.raises(redis.exceptions.NoPermissionError, match="scan"):
        cache.clear()
    acl_server.client().acl_log_reset()


def test_wrong_password_fails_at_connect_without_showing_it(
    acl_server: Server, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    wrong = "Not-" + PASSWORD
    with pytest.raises(ConnectionFailed) as info:
        connect(restricted_url(acl_server, wrong))
    message = str(info.value)
    assert message.startswith(
        f"cannot reach Redis at redis://sched:***@127.0.0.1:{acl_server.port}"
    )
    assert wrong not in message and wrong not in caplog.text
    result = CliRunner().invoke(main, ["--redis", restricted_url(acl_server, wrong), "stats"])
    assert result.exit_code == 1 and "sched:***@" in result.output
    assert wrong not in result.output
    acl_server.client().acl_log_reset()


# -- nothing read from Redis is executed ---------------------------------------------------

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}
# The one place that imports code: `whatif --policy module:function` (and `what_if`'s callers)
# name a policy of their own on the command line; nothing read from Redis or a manifest gets
# there.
USER_CODE_IMPORTS = {"schedcache/sim/policies.py"}
UNSAFE_YAML = {"load", "load_all", "full_load", "full_load_all", "unsafe_load", "unsafe_load_all"}


def test_the_package_never_unpickles_or_evaluates():
    findings = []
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 20
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                names = []
            findings += [
                f"{where}:{node.lineno} imports {name}"
                for name in names
                if name.split(".")[0] in UNSAFE_MODULES
            ]
            if not isinstance(node, ast.Call):
                continue
            function = node.func
            # A literal string evaluates nothing read from anywhere (cli/startup.py's exec("")
            # resets CPython's record of an interrupt: exit_status_decided).
            literal = (
                len(node.args) == 1
                and not node.keywords
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            )
            if isinstance(function, ast.Name) and function.id in UNSAFE_CALLS and not literal:
                findings.append(f"{where}:{node.lineno} calls {function.id}()")
            if isinstance(function, ast.Attribute):
                owner = function.value.id if isinstance(function.value, ast.Name) else ""
                imports_user_code = function.attr == "import_module" and (
                    str(where) in USER_CODE_IMPORTS
                )
                if (
                    owner in ("builtins", "importlib")
                    and function.attr in (*UNSAFE_CALLS, "import_module")
                    and not imports_user_code
                ):
                    findings.append(f"{where}:{node.lineno} calls {owner}.{function.attr}()")
                if owner == "yaml" and function.attr in UNSAFE_YAML:
                    findings.append(f"{where}:{node.lineno} calls yaml.{function.attr}()")
                if function.attr in ("unpackb", "Unpacker", "unpack") and owner == "msgpack":
                    keywords = {keyword.arg for keyword in node.keywords}
                    if str(where) != "schedcache/store/events.py" or "max_ext_len" not in keywords:
                        findings.append(
                            f"{where}:{node.lineno} decodes msgpack outside events.unpack()"
                        )
    assert findings == []
