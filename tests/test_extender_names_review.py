"""A stranger's review of 7b64f82..051ecc1 (issue 43, eighth round): lists of up to KEPT_NAMES
node names kept and prioritized on the arrays, and the bench's raw-socket HTTP/1.1 client.

Answers against the per-node code on either side of NAMES_AT_ONCE and KEPT_NAMES (shrunk, and
once at their real size), with unknown, repeated, NUL-holding, non-ASCII and dead names, a list
mutated in place, a node list that changes, pods the columns cannot judge alone; what is kept
stays bounded; the interpreter lock is let go during an 8,192-name prioritize; and the bench's
``Client`` against answers a server writes oddly. Behavioural tests run on every backend."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.extender import Client
from schedcache import Cache
from schedcache.extender import protocol
from schedcache.extender.service import Extender
from schedcache.model.values import Node
from schedcache.views import columns as columns_module
from tests.factories import make_node, make_pod, node_manifest, pod_manifest
from tests.test_columns import ANTI
from tests.test_extender_columns import per_node, wired

# -- the verbs against the per-node code -----------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    """A plain pod (the columns judge it), one with a host port and one with inter-pod
    anti-affinity (the per-node code judges them), one that fits nowhere on some nodes."""
    ports = [{"containerPort": 80, "hostPort": 80}]
    return [
        pod_manifest("plain", "", "1500m", "1Gi", uid="uid-plain"),
        pod_manifest("big", "", "5", "1Gi", uid="uid-big"),
        pod_manifest("port", "", "100m", "1Gi", uid="uid-port", ports=ports),
        pod_manifest(
            "anti", "", "100m", "1Gi", uid="uid-anti", labels={"app": "web"}, affinity=ANTI
        ),
    ]


def same_as_per_node(ext: Extender, manifest: dict[str, Any], names: list[str]) -> bool | None:
    """Both verbs' answers (as dicts and as the server writes them, twice: the second from
    what was kept) equal the per-node code's; whether prioritize scored on the arrays."""
    args = protocol.filter_args({"Pod": manifest, "NodeNames": names})
    for _ in range(2):
        filtered, prioritized = ext.filter(args), ext.prioritize(args)  # (the snapshot read)
        expected = per_node(ext, args)
        assert json.dumps(filtered) == json.dumps(expected[0]), names
        assert json.dumps(prioritized) == json.dumps(expected[1]), names
        assert wired(ext.filter_answer(args)) == protocol.encode(expected[0]), names
        wire = json.dumps(expected[1], separators=(",", ":")).encode()
        assert ext.prioritize_answer(args) == wire, names
    return ext.columns.score_rows(args.pod, ext.snapshot, names) is not None


@pytest.fixture
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """NAMES_AT_ONCE 4, KEPT_NAMES 8, KEPT_LISTS 4: the bounds' edges with a dozen nodes."""
    monkeypatch.setattr(columns_module, "NAMES_AT_ONCE", 4)
    monkeypatch.setattr(columns_module, "KEPT_NAMES", 8)
    monkeypatch.setattr(columns_module, "KEPT_LISTS", 4)


def cluster_of(cache: Cache, count: int) -> None:
    for i in range(count):
        cache.add_node(Node.from_k8s(node_manifest(f"n{i}", f"{i % 5 + 1}", "8Gi")))
    cache.add_pod(make_pod("busy", "n1", "900m", "1Gi"))


def test_lists_around_both_bounds_answer_as_the_per_node_code(
    cache: Cache, small_bounds: None
) -> None:
    """Lists of NAMES_AT_ONCE - 1 to KEPT_NAMES + 1 names (and 14), plain or with an unknown, a
    repeated, a NUL-holding, a non-ASCII or a dead node's name, for pods the columns judge and
    pods they cannot: every answer is the per-node code's; prioritize is on the arrays exactly
    for the plain pod's lists of at most KEPT_NAMES live names named once."""
    cluster_of(cache, 14)
    cache.add_pod(make_pod("orphan", "n13", "100m", "1Gi"))
    cache.remove_node(make_node("n13", "4", "8Gi"))  # a node gone, its pod still there
    ext = Extender(cache)
    plain, big, *others = manifests()
    for count in (3, 4, 5, 7, 8, 9, 13):
        names = [f"n{i}" for i in reversed(range(count))]
        variants = {
            "plain": names,
            "unknown": [*names[:-1], "x1"],
            "repeated": [*names[:-1], names[0]],
            "nul": [*names[:-1], "n0\0n1"],
            "non-ascii": [*names[:-1], "n\u00f6"],
            "dead": [*names[:-1], "n13"],
        }
        for kind, listed in variants.items():
            on_arrays = same_as_per_node(ext, plain, listed)
            assert on_arrays is (kind == "plain" and count <= 8), (kind, count)
            assert same_as_per_node(ext, big, listed) is on_arrays
            for manifest in others:
                assert same_as_per_node(ext, manifest, listed) is False
    assert len(ext.columns._named) <= 4


def test_a_list_changed_in_place_and_a_node_list_changed_answer_as_the_per_node_code(
    cache: Cache, small_bounds: None
) -> None:
    """The caller's list object grown past KEPT_NAMES and shrunk back, a name replaced in place;
    a kept list naming a node that joins later, and one naming a node that leaves: the rows
    kept are never another list's or another node list's."""
    cluster_of(cache, 10)
    ext = Extender(cache)
    plain = manifests()[0]
    names = [f"n{i}" for i in range(8)]
    assert same_as_per_node(ext, plain, names)
    names.append("n8")  # 9: past KEPT_NAMES
    assert same_as_per_node(ext, plain, names) is False
    del names[0]  # 8 again, other names
    assert same_as_per_node(ext, plain, names)
    names[3] = "n9"
    assert same_as_per_node(ext, plain, names)
    late = ["n0", "n1", "n2", "late", "n4", "n5"]
    assert same_as_per_node(ext, plain, late) is False  # "late" is no node yet: kept as -1
    cache.add_node(make_node("late", "3", "8Gi"))
    assert same_as_per_node(ext, plain, late)
    cache.remove_node(make_node("n2", "3", "8Gi"))
    assert same_as_per_node(ext, plain, late) is False
    cache.update_node(make_node("n4", "3", "8Gi"), make_node("n4", "1", "2Gi"))  # a row refilled
    assert same_as_per_node(ext, plain, ["n0", "n1", "n4", "late", "n5", "n6", "n7", "n8"])


# -- what is kept ----------------------------------------------------------------------------


def kept_bytes(ext: Extender) -> int:
    named = ext.columns._named
    return sum(len(key) + rows.nbytes for key, rows in named.items())


def test_many_distinct_lists_of_kept_names_keep_at_most_the_documented_bounds(
    cache: Cache,
) -> None:
    """Forty distinct lists of 8,192 short names (the most a list may be kept with): at most
    KEPT_LISTS of them are kept, within ~4 MiB of names and ~2 MiB of rows; nothing else the
    verbs keep grows with them."""
    cluster_of(cache, 4)
    ext = Extender(cache)
    plain = manifests()[0]
    for j in range(40):
        names = [f"{j:02x}{i:04x}" for i in range(columns_module.KEPT_NAMES)]
        args = protocol.filter_args({"Pod": plain, "NodeNames": names})
        scored = json.loads(ext.prioritize_answer(args))  # (unknown names score 0)
        assert len(scored) == len(names) and not any(item["Score"] for item in scored)
        ext.filter_answer(args)
    assert len(ext.columns._named) == columns_module.KEPT_LISTS
    assert kept_bytes(ext) <= columns_module.KEPT_CHARS + columns_module.KEPT_LISTS * 8 * 8192
    assert len(ext._starts[1]) <= 4  # a start per node, not per name sent
    assert len(ext.passed.kept) == 0  # (nothing passed)
    assert len(protocol._HOSTS) <= protocol.MAX_HOSTS


# Found in review: real node names are longer than ~12 characters (EKS's
# ip-10-0-1-23.ec2.internal, GKE's gke-<cluster>-<pool>-<hash>-<id>): 5,000 of them joined
# passed the per-list bound of 64 KiB and were looked up again on every call (and their
# HostPriorityList pieces written again). Mended: the bound is on all kept lists together.
def test_every_name_of_a_5000_node_cluster_with_cloud_node_names_is_kept(cache: Cache) -> None:
    cluster_of(cache, 2)
    ext = Extender(cache)
    names = [f"ip-10-0-{i // 256}-{i % 256}.eu-west-1.compute.internal" for i in range(5000)]
    ext.columns.refresh(ext.snapshot)
    rows = ext.columns._rows_named(names)
    assert len(rows) == 5000 and "\0".join(names) in ext.columns._named
    assert ext.columns._rows_named(list(names)) is rows  # sent again: the same rows


def test_lists_of_the_longest_node_names_keep_at_most_kept_chars_all_together(
    cache: Cache,
) -> None:
    """Node names of 253 characters (the most a DNS subdomain may be), 8,192 a list: ~2 MiB
    a list joined, so only one or two are kept at once, the newest; each answers its own
    rows, and every list sent again after being let go is looked up again, right."""
    cluster_of(cache, 2)
    ext = Extender(cache)
    ext.columns.refresh(ext.snapshot)
    lists = [
        [f"{j:02x}{i:05x}".ljust(253, "x") for i in range(columns_module.KEPT_NAMES)]
        for j in range(4)
    ]
    for names in lists * 2:
        rows = ext.columns._rows_named(names)
        assert len(rows) == len(names) and (rows == -1).all()  # (no such nodes)
        assert "\0".join(names) in ext.columns._named  # the newest is kept
        joined = sum(len(key) for key in ext.columns._named)
        assert joined == ext.columns._named.size <= columns_module.KEPT_CHARS
    assert len(ext.columns._named) < len(lists)


# -- real size, and the interpreter lock -----------------------------------------------------


class Ticks:
    """A thread that ticks every 0.5 ms and records its longest gap between ticks."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.0005)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> Ticks:
        self._thread.start()
        time.sleep(0.003)
        return self

    def __exit__(self, *_: object) -> None:
        time.sleep(0.002)
        self._stop.set()
        self._thread.join()


@pytest.fixture
def switching() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)
    yield
    sys.setswitchinterval(interval)


def test_8192_and_8193_names_at_their_real_size_answer_as_the_per_node_code_and_let_go_the_lock(
    make_cache: Callable[..., Cache], switching: None
) -> None:
    """8,193 nodes: prioritize of 8,192 names (on the arrays) and of 8,193 (per name) answers
    the per-node code's bytes; during the one on the arrays the lock is let go within a few
    ms (measured 2-4 ms on this branch, ~1-5 ms at cf247fc's per-name path: below 25 ms)."""
    cache = make_cache()
    with cache.batch(chunk_size=1000) as batch:
        for i in range(8193):
            batch.update_node(None, make_node(f"n{i:05}", f"{i % 7 + 1}", "8Gi"))
    ext = Extender(cache)
    plain = manifests()[0]
    for count in (8192, 8193):
        names = [f"n{i:05}" for i in reversed(range(count))]
        args = protocol.filter_args({"Pod": plain, "NodeNames": names})
        answered = ext.prioritize_answer(args)  # (the snapshot read)
        expected = per_node(ext, args)[1]
        wire = json.dumps(expected, separators=(",", ":")).encode()
        assert answered == wire
        on_arrays = ext.columns.score_rows(args.pod, ext.snapshot, names) is not None
        assert on_arrays is (count == 8192)
        longest = []
        for _ in range(3):
            with Ticks() as ticks:
                assert ext.prioritize_answer(args) == wire
            longest.append(ticks.longest)
        assert sorted(longest)[1] < 0.025, (count, longest)


# -- the bench's client ----------------------------------------------------------------------


class Answering:
    """A server of one connection at a time that answers each request with the next of
    ``answers`` (bytes; written in ``piece``-byte sends; None: close the connection)."""

    def __init__(self, answers: list[bytes | None], piece: int = 0) -> None:
        self.answers = answers
        self.piece = piece
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with conn:
                while self.answers:
                    if not self._request(conn):
                        break
                    answer = self.answers.pop(0)
                    if answer is None:
                        break
                    step = self.piece or len(answer)
                    for start in range(0, len(answer), step):
                        conn.sendall(answer[start : start + step])
                        if self.piece:
                            time.sleep(0.0002)
                    if b"connection: close" in answer.lower():
                        break

    @staticmethod
    def _request(conn: socket.socket) -> bool:
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            received += chunk
        head, body = received.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += conn.recv(65536)
        return True

    def close(self) -> None:
        self.listener.close()


def answer(body: bytes, status: str = "200 OK", length: str = "Content-Length: %d") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{length}\r\n\r\n"
    return head.replace("%d", str(len(body))).encode() + body


def test_the_clients_answers_split_into_small_segments_in_any_header_case() -> None:
    """Answers of 150 KB written 1,000 bytes a send, and small ones byte by byte, with the
    header in any case and spacing: the client reads each whole, in turn, on one connection."""
    big = json.dumps([{"Host": f"node-{i}", "Score": i % 11} for i in range(5000)]).encode()
    answers: list[bytes | None] = [
        answer(big),
        answer(b'{"Error":""}', length="content-length:%d"),
        answer(b"[1,2]", length="CONTENT-LENGTH:   %d  "),
        answer(big, length="Content-length: %d"),
    ]
    server = Answering(answers, piece=1000)
    try:
        client = Client(server.port)
        assert client.post("prioritize", {}) == json.loads(big)
        server.piece = 1
        assert client.post("bind", {}) == {"Error": ""}
        assert client.post("filter", {}) == [1, 2]
        server.piece = 1000
        assert client.post("prioritize", {}) == json.loads(big)
        assert server.connections == 1 and client.unread == b""
        assert [len(seconds) for seconds in client.seconds.values()] == [1, 2, 1]
    finally:
        server.close()


def test_the_clients_non_200_json_answer_and_a_closed_connection_raise() -> None:
    server = Answering([answer(b'{"Error":"no"}', status="500 Internal Server Error"), None])
    try:
        client = Client(server.port)
        with pytest.raises(RuntimeError, match="filter: 500"):
            client.post("filter", {})
        with pytest.raises(ConnectionError):
            client.post("filter", {})
    finally:
        server.close()


# Found in review (mended): a non-200 answer whose body is not JSON (aiohttp's own '413:
# Request Entity Too Large', text/plain) raised json.JSONDecodeError, not the RuntimeError naming
# the status: Client.post decoded before it checked the status (as the http.client one did)
def test_the_clients_non_200_text_answer_raises_naming_its_status() -> None:
    text = answer(b"413: Request Entity Too Large", status="413 Request Entity Too Large")
    server = Answering([text.replace(b"application/json", b"text/plain")])
    try:
        with pytest.raises(RuntimeError, match="413"):
            Client(server.port).post("filter", {})
    finally:
        server.close()


# Found in review (mended): after an answer with 'Connection: close' (the server then closes),
# the next post failed with ConnectionError; http.client's HTTPConnection, which this Client
# replaced, opened a new connection
def test_the_client_reconnects_after_an_answer_that_closes_the_connection() -> None:
    closing = answer(b"[]", length="Content-Length: %d\r\nConnection: close")
    server = Answering([closing, answer(b"[]")])
    try:
        client = Client(server.port)
        assert client.post("filter", {}) == []
        assert client.post("filter", {}) == []
        assert server.connections == 2
    finally:
        server.close()


# Found in review (mended): a chunked answer (Transfer-Encoding: chunked, no Content-Length:
# HTTP/1.1's other framing, which http.client read) raised 'an answer without Content-Length'
def test_the_client_reads_a_chunked_answer() -> None:
    body = b'{"Error":""}'
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )
    server = Answering([chunked])
    try:
        assert Client(server.port).post("bind", {}) == {"Error": ""}
    finally:
        server.close()
