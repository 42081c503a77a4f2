"""A fake Kubernetes API server, just enough for list/watch/bind tests with the official client.

No kube-apiserver can run on the test machines, yet ``schedcache sync`` (an informer: list then
watch Nodes and Pods) and a scheduler extender's bind must be tested against something the
official ``kubernetes`` Python client talks to unchanged. ``FakeApiServer`` is a stdlib-only
``ThreadingHTTPServer`` on 127.0.0.1 (a free port, daemon threads) holding Nodes and Pods as
plain JSON dicts, with one global resourceVersion counter like etcd's revision.

Covered (JSON only, ``Content-Type: application/json``):

* ``GET /api/v1/nodes``, ``/api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``: ``NodeList`` /
  ``PodList`` whose items carry no ``kind``/``apiVersion`` (as the real server's lists).
  ``resourceVersion`` is ignored on lists: every first page serves the current state.
* ``GET /api/v1/nodes/{name}``, ``/api/v1/namespaces/{ns}/pods/{name}``; 404 ``Status``.
* PodGroups (scheduler-plugins' Coscheduling CRD, ``scheduling.x-k8s.io/v1alpha1``), created
  with ``create({"kind": "PodGroup", ...})``: ``GET .../namespaces/{ns}/podgroups/{name}``, and
  list and watch (``/apis/scheduling.x-k8s.io/v1alpha1/podgroups``, also per namespace) as
  pods'. ``podgroups_installed = False`` answers them 404, as a cluster without the CRD.
* Pagination with ``limit`` and ``continue``: the first page of a list that does not fit takes a
  snapshot of the kind at the current rv; the token (base64 JSON of rv and offset) serves the
  later pages from that snapshot, so all pages are consistent at the list's rv however the
  objects change meanwhile. ``remainingItemCount`` is set only on cluster-wide lists without a
  field selector (the real server also sets it on namespaced lists). A token older than the
  compacted rv answers 410 ``Expired``; unlike the real server, that ``Status`` carries no
  fresh (inconsistent) continue token. Snapshots are kept until ``compact()`` (at most 16).
* ``fieldSelector``: ``=``, ``==`` and ``!=`` terms joined by ``,`` (AND) on ``spec.nodeName``,
  ``spec.schedulerName``, ``status.phase``, ``metadata.name``, ``metadata.namespace`` (a
  missing field is ``""``, a pod's scheduler ``default-scheduler``); any other field answers
  400 as the real server does. ``labelSelector`` is IGNORED (logged only).
* Watch: the list URLs with ``watch=1|true``, ``resourceVersion``, ``allowWatchBookmarks``,
  ``timeoutSeconds``. A 200 chunked stream of one JSON event per line: every event after the
  rv from the kept history, then live ones; ``resourceVersion`` unset or ``"0"`` starts with a
  synthetic ADDED per current object. A field selector applies as the real watch cache does:
  an object that starts matching arrives as ADDED, one that stops matching as DELETED (its
  previous content with the event's rv). Bookmarks (``kind``, ``apiVersion``,
  ``metadata.resourceVersion`` only) on ``bookmark()`` and every ``bookmark_interval`` seconds
  when configured, only to watches that allow them. The stream ends cleanly (last chunk) after
  ``timeoutSeconds``; without it the watch runs until dropped or the server stops. An rv older
  than the compacted history (also a watcher that falls behind a ``compact()``) gets one
  ``ERROR`` event with a 410 ``Expired`` Status and the stream ends, as the real server does;
  with ``gone_as_http=True`` the watch request answers HTTP 410 instead. An rv newer than the
  current one is treated as the current one (the real server waits, then fails).
* ``POST /api/v1/namespaces/{ns}/pods/{name}/binding`` (``create_namespaced_pod_binding``) and
  ``POST /api/v1/namespaces/{ns}/bindings`` (``create_namespaced_binding``, pod named by the
  Binding's ``metadata.name``): sets ``spec.nodeName``, emits MODIFIED, answers 201 with a
  success ``Status``; 404 without the pod, 409 ``Conflict`` when it is already bound or the
  Binding's ``metadata.uid`` (a precondition, when given) is not the pod's.
* ``PATCH /api/v1/namespaces/{ns}/pods/{name}/status`` (``patch_namespaced_pod_status``) with
  a strategic-merge patch of ``status.conditions``: conditions merge by ``type`` (the list's
  patch merge key), other status fields are replaced; emits MODIFIED. Any other patch content
  type, or a patch outside ``status``, answers 415/422.
* ``DELETE /api/v1/namespaces/{ns}/pods/{name}`` (``delete_namespaced_pod``): removes the pod
  at once (no grace period), emits DELETED, answers the pod; 404 without it.
* ``GET /apis/policy/v1/poddisruptionbudgets`` (and ``/namespaces/{ns}/...``): list and watch
  of ``PodDisruptionBudget`` objects, as for pods (no get, no status subresource: a test sets
  ``status.disruptionsAllowed`` with ``update``); ``refused[kind] = 403`` (or 404) makes that
  kind's lists and watches answer it (RBAC without the kind, a cluster not serving it).
* ``GET /api/v1/namespaces``: list and watch of ``Namespace`` objects (cluster-scoped), as for
  nodes; ``refused["Namespace"]`` as for budgets.
* Authentication: a bearer token (the one ``kubeconfig()`` writes) unless ``token=None``;
  a missing or wrong one answers 401.

Not covered: any other resource or verb (create/update over HTTP, other PATCHes, other DELETEs,
``/apis``, discovery, ``/version``), protobuf, tables, YAML, ``pretty``,
``resourceVersionMatch``, ``sendInitialEvents``, list at an old ``resourceVersion``, label
selectors, set-based field selectors, admission, validation or defaulting (objects are stored
as given, plus ``metadata.resourceVersion``, a ``uid``, a ``creationTimestamp`` and a pod's
``namespace`` ``"default"`` when missing), HTTP/2, TLS, watch-list, ``Retry-After``.

Test control (thread-safe): ``create``, ``update``, ``delete``, ``get``, ``compact``,
``bookmark``, ``end_watches`` (clean end, as when the real server's request timeout expires),
``drop_watches`` (shuts every open watch socket down mid-stream, no last chunk),
``stall_lists`` / ``release_lists`` (list requests, not watches, send nothing until released:
a stalled API server), ``bind_delay`` (seconds each Binding waits before it is applied),
``emit_raw`` (a watch event with any object, malformed included, sent
to every watch of its kind whatever its selector), ``down`` /
``up``, ``requests`` (log of ``Request(method, path, query)``), ``open_watches``,
``watches_started``, ``wait_for_watches``, ``wait_for_watches_started``, ``kubeconfig(path)``
and ``url``.
``down()`` REFUSES connections: it closes the listening socket and every open connection
(watches included, abruptly) and ``up()`` listens again on the same port; nothing answers 503.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for nodes

KINDS = ("Node", "Pod", "PodGroup", "PodDisruptionBudget", "Namespace")
# Kinds whose objects live in a namespace ("default" when the object names none).
NAMESPACED = ("Pod", "PodGroup", "PodDisruptionBudget")
SELECTABLE_FIELDS = (
    "spec.nodeName",
    "spec.schedulerName",
    "status.phase",
    "metadata.name",
    "metadata.namespace",
)
MAX_SNAPSHOTS = 16
MAX_HEADERS, MAX_LINE = 100, 65536  # http.client's limits on a request's header lines
_DATE: list[Any] = [0, ""]  # (second, its Date header): _Handler.date_time_string


class Request(NamedTuple):
    """One request as the server saw it, for assertions on what a client asked."""

    method: str
    path: str
    query: dict[str, str]


@dataclass(frozen=True)
class Event:
    """One change of one object: the previous content is kept for field-selector watches."""

    type: str
    obj: Obj
    rv: int
    prev: Obj | None
    raw: bool = False  # emit_raw(): sent as is to every watch of the kind
    # The chunk each field selector makes of this event (None: not sent), encoded once for all
    # the watches with that selector (every scheduler replica watches the same pending pods).
    chunks: dict[tuple[tuple[str, str, bool], ...], bytes | None] = field(
        default_factory=dict, compare=False, repr=False
    )


@dataclass
class Selector:
    """A fieldSelector as a list of (field, wanted value, equal?) terms, all of which must hold."""

    terms: list[tuple[str, str, bool]] = field(default_factory=list)

    def matches(self, obj: Obj) -> bool:
        return all((field_value(obj, f) == v) == eq for f, v, eq in self.terms)


class ApiError(Exception):
    """Raised inside a handler to answer with a Status body."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def status(code: int, reason: str = "", message: str = "") -> Obj:
    """A metav1.Status body; success when code < 400."""
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    if code < 400:
        body.update(status="Success", code=code)
        return body
    body.update(status="Failure", message=message, reason=reason, code=code)
    return body


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def field_value(obj: Obj, path: str) -> str:
    """The string at a dotted path, "" when missing (as the real server's field sets; a pod's
    ``spec.schedulerName`` is ``default-scheduler`` then: the real server defaults it)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None and path == "spec.schedulerName":
        return "default-scheduler"
    return "" if value is None else str(value)


def parse_field_selector(text: str) -> Selector:
    """Parse ``a=b,c!=d`` (and ``==``); unsupported fields are a 400 like the real server's."""
    selector = Selector()
    for term in filter(None, (t.strip() for t in text.split(","))):
        m = re.fullmatch(r"([^!=]+)(!=|==|=)(.*)", term)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector term: {term!r}")
        name, op, value = m.groups()
        if name not in SELECTABLE_FIELDS:
            raise ApiError(
                400, "BadRequest", f'field label not supported: "{name}" (fake api server)'
            )
        selector.terms.append((name, value, op != "!="))
    return selector


def object_key(kind: str, obj: Obj) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", "") if kind in NAMESPACED else "", meta["name"])


def name_key(kind: str, name: str, namespace: str | None) -> Key:
    """The key of a name: pods default to namespace "default", nodes have none."""
    return ((namespace or "default") if kind in NAMESPACED else "", name)


def list_item(obj: Obj) -> Obj:
    """A list item: the real server drops kind and apiVersion from items."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def int_param(query: dict[str, str], name: str) -> int:
    """An integer query parameter (0 when absent); junk is a 400 like the real server's."""
    text = query.get(name) or "0"
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, "BadRequest", f"invalid {name}: {text!r}") from None


def encode_continue(rv: int, offset: int) -> str:
    raw = json.dumps({"v": "fake/v1", "rv": rv, "start": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), int(data["start"])
    except (ValueError, KeyError, TypeError) as e:
        raise ApiError(400, "BadRequest", f"invalid continue token: {e}") from e


@dataclass
class WatchState:
    """One open watch: what it has sent and how it must end."""

    kind: str
    sock: socket.socket
    last_rv: int
    bookmarks: bool
    bookmark_gen: int
    bookmark_due: float | None  # monotonic time of the next periodic bookmark
    too_old: bool = False  # started below the compacted rv
    dropped: bool = False  # end abruptly, without the last chunk
    ended: bool = False  # end cleanly (after an ERROR event, or end_watches())


class FakeApiServer:
    """A list/watch/bind API server for Nodes and Pods; see the module docstring.

    Objects are never mutated in place (every write stores a fresh dict), so snapshots and the
    event history share them without copies.
    """

    def __init__(
        self,
        *,
        bookmark_interval: float | None = None,
        gone_as_http: bool = False,
        token: str | None = "fake-token",
    ) -> None:
        self.bookmark_interval = bookmark_interval
        self.gone_as_http = gone_as_http
        self.token = token
        self._cond = threading.Condition()
        self._rv = 1
        self._compacted_rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {k: {} for k in KINDS}
        self._history: dict[str, list[Event]] = {k: [] for k in KINDS}
        self._forgotten_rv: dict[str, int] = {k: 0 for k in KINDS}  # newest compacted event
        self._snapshots: dict[tuple[str, int], list[Obj]] = {}
        self._watches: list[WatchState] = []
        self._connections: set[socket.socket] = set()
        self._bookmark_gen = 0
        self._closing = False
        self._lists_flowing = threading.Event()
        self._lists_flowing.set()
        self.watches_started = 0
        self.podgroups_installed = True  # False: the PodGroup CRD is missing (404)
        self.bind_delay = 0.0  # seconds a Binding waits before it is applied (a slow server)
        self.refused: dict[str, int] = {}  # kind -> the HTTP status its lists and watches get
        self.requests: list[Request] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._listen()

    # ----------------------------------------------------------------- lifecycle

    def _listen(self) -> None:
        """Bind (the same port again after ``down()``) and serve on a daemon thread."""
        api = self

        class Handler(_Handler):
            server_api = api

        httpd = _HttpServer(("127.0.0.1", self.port), Handler)
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _stop_listening(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd = None

    def __enter__(self) -> FakeApiServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """End every watch, stop listening and cut the kept-alive connections.

        Cutting matters: a client would otherwise send its next request (say, a re-watch) over
        a pooled keep-alive connection that still reaches a handler thread.
        """
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._stop_listening()
        self._cut_connections()

    def _cut_connections(self) -> None:
        with self._cond:
            conns = list(self._connections)
        for conn in conns:
            _shutdown(conn)

    def down(self) -> None:
        """Refuse connections: stop listening and cut every open connection, watches too."""
        self._stop_listening()
        with self._cond:
            for w in self._watches:
                w.dropped = True
            self._cond.notify_all()
        self._cut_connections()

    def up(self) -> None:
        """Listen again on the same port."""
        if self._httpd is None:
            self._listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig (JSON, which is YAML) that ``load_kube_config`` accepts."""
        user: Obj = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-user", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake-user"}}],
            "current-context": "fake",
            "preferences": {},
        }
        path = Path(path)
        path.write_text(json.dumps(config, indent=2))
        return path

    # ----------------------------------------------------------------- test control

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def create(self, obj: Obj) -> Obj:
        """Store a new Node or Pod (``kind`` decides) and emit ADDED; returns the stored copy."""
        kind = obj.get("kind", "")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        if kind in NAMESPACED:
            meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        stored.setdefault("apiVersion", "v1")
        key = object_key(kind, stored)
        with self._cond:
            if key in self._objects[kind]:
                raise KeyError(f"{kind} {key} exists")
            return copy.deepcopy(self._write(kind, key, stored, "ADDED"))

    def update(self, obj: Obj) -> Obj:
        """Replace an object by namespace/name and emit MODIFIED."""
        kind = obj["kind"]
        stored = copy.deepcopy(obj)
        if kind in NAMESPACED:
            stored["metadata"].setdefault("namespace", "default")
        key = object_key(kind, stored)
        with self._cond:
            old = self._objects[kind][key]  # KeyError when missing
            for field_name in ("uid", "creationTimestamp"):
                if field_name in old["metadata"]:
                    stored["metadata"].setdefault(field_name, old["metadata"][field_name])
            return copy.deepcopy(self._write(kind, key, stored, "MODIFIED"))

    def delete(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        """Remove an object and emit DELETED (carrying the deletion's rv, as the real server)."""
        key = name_key(kind, name, namespace)
        with self._cond:
            old = self._objects[kind][key]
            gone_obj = copy.deepcopy(old)
            return copy.deepcopy(self._write(kind, key, gone_obj, "DELETED"))

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        key = name_key(kind, name, namespace)
        with self._cond:
            return copy.deepcopy(self._objects[kind].get(key))

    def objects(self, kind: str) -> list[Obj]:
        """Copies of every stored object of ``kind``, as a list would serve them now."""
        with self._cond:
            return copy.deepcopy(list(self._objects[kind].values()))

    def _write(self, kind: str, key: Key, stored: Obj, type_: str) -> Obj:
        """Bump the rv, stamp it, record the event and wake the watches (lock held); returns
        ``stored`` itself, which callers must copy before handing it out."""
        self._rv += 1
        stored["metadata"]["resourceVersion"] = str(self._rv)
        stored.setdefault("kind", kind)
        prev = self._objects[kind].get(key)
        if type_ == "DELETED":
            del self._objects[kind][key]
        else:
            self._objects[kind][key] = stored
        self._history[kind].append(Event(type_, stored, self._rv, prev))
        self._cond.notify_all()
        return stored

    def stall_lists(self) -> None:
        """List requests (not watches) send nothing, not even headers, until release_lists()."""
        self._lists_flowing.clear()

    def release_lists(self) -> None:
        self._lists_flowing.set()

    def wait_while_stalled(self) -> None:
        """Called by a list request's handler: hold it while lists are stalled (or closing)."""
        while not self._lists_flowing.wait(0.05):
            if self._closing:
                return

    def emit_raw(self, kind: str, type_: str, obj: Any) -> int:
        """Send a watch event ``{"type": type_, "object": obj}`` as given (a malformed one
        included) to every watch of ``kind``; it takes an rv of its own (returned), as if the
        server had stored something, so later events come after it."""
        with self._cond:
            self._rv += 1
            self._history[kind].append(Event(type_, obj, self._rv, None, raw=True))
            self._cond.notify_all()
            return self._rv

    def patch_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        """A strategic-merge patch of a pod's status: conditions merge by type."""
        status_patch = patch.get("status")
        if set(patch) - {"status", "metadata"} or not isinstance(status_patch, dict):
            raise ApiError(422, "Invalid", "only status may be patched here (fake api server)")
        with self._cond:
            old = self._objects["Pod"].get((namespace, name))
            if old is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            new = copy.deepcopy(old)
            current = new.setdefault("status", {})
            for key, value in status_patch.items():
                if key != "conditions":
                    current[key] = value
                    continue
                merged = {c.get("type"): c for c in current.get("conditions") or []}
                for condition in value or []:
                    merged[condition.get("type")] = {
                        **merged.get(condition.get("type"), {}),
                        **condition,
                    }
                current["conditions"] = list(merged.values())
            return copy.deepcopy(self._write("Pod", (namespace, name), new, "MODIFIED"))

    def compact(self) -> int:
        """Forget the history up to the current rv: older watches and continue tokens get 410."""
        with self._cond:
            self._compacted_rv = self._rv
            for kind in KINDS:
                if self._history[kind]:
                    self._forgotten_rv[kind] = self._history[kind][-1].rv
                self._history[kind] = []
            self._snapshots = {k: v for k, v in self._snapshots.items() if k[1] >= self._rv}
            self._cond.notify_all()
            return self._rv

    def bookmark(self) -> None:
        """Send a BOOKMARK at the current rv to every watch that allows them."""
        with self._cond:
            self._bookmark_gen += 1
            self._cond.notify_all()

    def end_watches(self) -> int:
        """End every open watch cleanly (last chunk), as the real server does when its
        per-request timeout expires; returns how many."""
        with self._cond:
            for w in self._watches:
                w.ended = True
            self._cond.notify_all()
            return len(self._watches)

    def drop_watches(self) -> int:
        """Cut every open watch mid-stream (socket shutdown, no last chunk); returns how many."""
        with self._cond:
            watches = list(self._watches)
            for w in watches:
                w.dropped = True
            self._cond.notify_all()
        for w in watches:
            _shutdown(w.sock)
        return len(watches)

    @property
    def open_watches(self) -> int:
        with self._cond:
            return len(self._watches)

    def open_watches_of(self, kind: str) -> int:
        with self._cond:
            return sum(w.kind == kind for w in self._watches)

    def wait_for_watches(self, n: int, timeout: float = 5.0) -> bool:
        """Wait until at least n watches are open (tests race the client's connect)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._watches) >= n, timeout)

    def wait_for_watches_started(self, n: int, timeout: float = 5.0) -> bool:
        """Wait until n watches were started in all (a client's re-watch is one more)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.watches_started >= n, timeout)

    # ----------------------------------------------------------------- serving

    def _log(self, method: str, path: str, query: dict[str, str]) -> None:
        with self._cond:
            self.requests.append(Request(method, path, query))

    def get_object(self, kind: str, key: Key) -> Obj:
        with self._cond:
            obj = self._objects[kind].get(key)
        if obj is None:
            plural = kind.lower() + "s"
            raise ApiError(404, "NotFound", f'{plural} "{key[1]}" not found')
        return obj

    def list_page(
        self, kind: str, namespace: str | None, selector: Selector, query: dict[str, str]
    ) -> Obj:
        """One list page: the current state, or a snapshot page for a continue token."""
        limit = int_param(query, "limit")
        token = query.get("continue")
        with self._cond:
            if token:
                rv, start = decode_continue(token)
                items = self._snapshots.get((kind, rv))
                if items is None or rv < self._compacted_rv:
                    raise gone(
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter."
                    )
            else:
                rv, start = self._rv, 0
                items = [self._objects[kind][k] for k in sorted(self._objects[kind])]
        page, next_offset = select_page(items, start, limit, namespace, selector)
        meta: Obj = {"resourceVersion": str(rv)}
        if next_offset is not None:
            with self._cond:
                self._keep_snapshot(kind, rv, items)
            meta["continue"] = encode_continue(rv, next_offset)
            if not selector.terms and namespace is None:
                meta["remainingItemCount"] = len(items) - next_offset
        return {
            "kind": f"{kind}List",
            "apiVersion": "v1",
            "metadata": meta,
            "items": [list_item(o) for o in page],
        }

    def _keep_snapshot(self, kind: str, rv: int, items: list[Obj]) -> None:
        self._snapshots[(kind, rv)] = items
        while len(self._snapshots) > MAX_SNAPSHOTS:
            del self._snapshots[next(iter(self._snapshots))]

    def bind(self, namespace: str, name: str, body: Obj) -> Obj:
        """Set spec.nodeName from a Binding, as the pods/binding subresource does."""
        node = (body.get("target") or {}).get("name")
        if not node:
            raise ApiError(400, "BadRequest", "Binding target.name is required")
        if self.bind_delay:
            time.sleep(self.bind_delay)
        with self._cond:
            old = self._objects["Pod"].get((namespace, name))
            if old is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            wanted = (body.get("metadata") or {}).get("uid")
            if wanted and wanted != old["metadata"].get("uid"):
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": Precondition '
                    f"failed: UID in precondition: {wanted}, UID in object meta: "
                    f"{old['metadata'].get('uid')}",
                )
            bound_to = (old.get("spec") or {}).get("nodeName")
            if bound_to:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                    f"already assigned to node {bound_to!r}",
                )
            # Stored objects are never mutated in place, so the new one shares all but the
            # dicts it changes: a deep copy of the pod cost more than the rest of a bind.
            new = {
                **old,
                "metadata": {**old["metadata"]},
                "spec": {**(old.get("spec") or {}), "nodeName": node},
            }
            self._write("Pod", (namespace, name), new, "MODIFIED")
        return status(201)

    # ----------------------------------------------------------------- watch

    def start_watch(self, kind: str, sock: socket.socket, query: dict[str, str]) -> WatchState:
        """Register a watch, or raise 410 at once when its rv is compacted and so configured."""
        rv = int_param(query, "resourceVersion")
        with self._cond:
            bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
            interval = self.bookmark_interval
            w = WatchState(
                kind=kind,
                sock=sock,
                last_rv=min(rv, self._rv),
                bookmarks=bookmarks,
                bookmark_gen=self._bookmark_gen,
                bookmark_due=time.monotonic() + interval if interval and bookmarks else None,
                too_old=0 < rv < self._compacted_rv,
            )
            if w.too_old and self.gone_as_http:
                raise gone(self._too_old(w))
            self._watches.append(w)
            self.watches_started += 1
            self._cond.notify_all()
            return w

    def end_watch(self, w: WatchState) -> None:
        with self._cond:
            if w in self._watches:
                self._watches.remove(w)
            self._cond.notify_all()

    def _expired(self, w: WatchState) -> bool:
        """Started too old, or compaction forgot events this watch had not sent yet."""
        return w.too_old or w.last_rv < self._forgotten_rv[w.kind]

    def _too_old(self, w: WatchState) -> str:
        return f"too old resource version: {w.last_rv} ({self._compacted_rv})"

    def initial_events(self, w: WatchState, selector: Selector) -> list[Obj]:
        """Synthetic ADDED events for a watch from rv 0/unset, as the real server sends."""
        with self._cond:
            objs = [o for o in self._objects[w.kind].values() if selector.matches(o)]
            w.last_rv = self._rv
        return [{"type": "ADDED", "object": o} for o in objs]

    def next_events(
        self, w: WatchState, selector: Selector, deadline: float | None
    ) -> list[Obj] | None:
        """Wait for what the watch must send next; None when it must end.

        Returns events after w.last_rv (filtered by the selector), then a bookmark if one is
        due; one ERROR 410 event (and the end next time) when the watch is or fell too old.
        """
        chunks = self.next_chunks(w, selector, deadline)
        if chunks is None:
            return None
        return [json.loads(c.split(b"\r\n", 1)[1]) for c in chunks]

    def next_chunks(
        self, w: WatchState, selector: Selector, deadline: float | None
    ) -> list[bytes] | None:
        """``next_events`` as the chunks of the watch's body, as the handler sends them."""
        with self._cond:
            while True:
                if w.dropped or w.ended or self._closing:
                    return None
                if self._expired(w):
                    w.ended = True
                    error = status(410, "Expired", self._too_old(w))
                    return [chunk({"type": "ERROR", "object": error})]
                now = time.monotonic()
                periodic = w.bookmark_due is not None and now >= w.bookmark_due
                if periodic and self.bookmark_interval:
                    w.bookmark_due = now + self.bookmark_interval
                out = self._pending(w, selector, periodic)
                if out:
                    return out
                if deadline is not None and now >= deadline:
                    return None
                waits = [t - now for t in (deadline, w.bookmark_due) if t is not None]
                self._cond.wait(max(min(waits), 0.001) if waits else None)

    def _pending(self, w: WatchState, selector: Selector, periodic: bool) -> list[bytes]:
        """Chunks of the events after last_rv, then a bookmark when one is due (lock held)."""
        history = self._history[w.kind]
        out: list[bytes] = []
        key = tuple(selector.terms)
        for event in history[_first_after(history, w.last_rv) :]:
            try:
                line = event.chunks[key]
            except KeyError:
                converted = convert_event(event, selector)
                line = event.chunks[key] = chunk(converted) if converted else None
            if line:
                out.append(line)
            w.last_rv = event.rv
        asked = w.bookmark_gen != self._bookmark_gen
        w.bookmark_gen = self._bookmark_gen
        if w.bookmarks and (asked or periodic):
            w.last_rv = self._rv
            out.append(chunk(bookmark_event(w.kind, self._rv)))
        return out


def select_page(
    items: list[Obj], start: int, limit: int, namespace: str | None, selector: Selector
) -> tuple[list[Obj], int | None]:
    """Matching items from start, at most limit; the offset to continue at, or None at the end."""
    page: list[Obj] = []
    i = start
    for i in range(start, len(items)):
        obj = items[i]
        if namespace is not None and obj["metadata"].get("namespace") != namespace:
            continue
        if not selector.matches(obj):
            continue
        if limit and len(page) == limit:
            return page, i
        page.append(obj)
    return page, None


def _first_after(history: list[Event], rv: int) -> int:
    """Index of the first event with an rv above rv (history is sorted by rv)."""
    lo, hi = 0, len(history)
    while lo < hi:
        mid = (lo + hi) // 2
        if history[mid].rv <= rv:
            lo = mid + 1
        else:
            hi = mid
    return lo


def convert_event(event: Event, selector: Selector) -> Obj | None:
    """The watch cache's rule: an object entering the selection is ADDED, leaving it DELETED."""
    if not selector.terms or event.raw:
        return {"type": event.type, "object": event.obj}
    cur = event.type != "DELETED" and selector.matches(event.obj)
    old = event.prev is not None and selector.matches(event.prev)
    if cur and not old:
        return {"type": "ADDED", "object": event.obj}
    if cur and old:
        return {"type": "MODIFIED", "object": event.obj}
    if old and event.prev is not None:
        # A new dict for what changes (the rv); the rest is shared, never mutated in place.
        prev = {**event.prev, "metadata": {**event.prev["metadata"]}}
        prev["metadata"]["resourceVersion"] = str(event.rv)
        return {"type": "DELETED", "object": prev}
    return None


def chunk(event: Obj) -> bytes:
    """One watch event as one chunk of a chunked body: a JSON line."""
    line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
    return f"{len(line):x}\r\n".encode() + line + b"\r\n"


def bookmark_event(kind: str, rv: int) -> Obj:
    return {
        "type": "BOOKMARK",
        "object": {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}},
    }


def _shutdown(sock: socket.socket) -> None:
    """Cut a connection from another thread; the peer sees it end mid-response."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


ROUTES: list[tuple[str, re.Pattern[str]]] = [
    ("list_nodes", re.compile(r"/api/v1/nodes")),
    ("list_namespaces", re.compile(r"/api/v1/namespaces")),  # their labels (issue 38)
    ("get_node", re.compile(r"/api/v1/nodes/(?P<name>[^/]+)")),
    ("list_pods", re.compile(r"/api/v1/pods")),
    ("list_pods", re.compile(r"/api/v1/namespaces/(?P<namespace>[^/]+)/pods")),
    ("get_pod", re.compile(r"/api/v1/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)")),
    ("bind", re.compile(r"/api/v1/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)/binding")),
    ("bind", re.compile(r"/api/v1/namespaces/(?P<namespace>[^/]+)/bindings")),
    (
        "pod_status",
        re.compile(r"/api/v1/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)/status"),
    ),
    # scheduler-plugins' PodGroup (Coscheduling): list, watch, GET of one.
    ("list_podgroups", re.compile(r"/apis/scheduling\.x-k8s\.io/v1alpha1/podgroups")),
    (
        "list_podgroups",
        re.compile(
            r"/apis/scheduling\.x-k8s\.io/v1alpha1/namespaces/(?P<namespace>[^/]+)/podgroups"
        ),
    ),
    (
        "get_podgroup",
        re.compile(
            r"/apis/scheduling\.x-k8s\.io/v1alpha1/namespaces/(?P<namespace>[^/]+)"
            r"/podgroups/(?P<name>[^/]+)"
        ),
    ),
    # policy/v1 PodDisruptionBudgets: list and watch only (issue 41, preemption)
    ("list_pdbs", re.compile(r"/apis/policy/v1/poddisruptionbudgets")),
    (
        "list_pdbs",
        re.compile(r"/apis/policy/v1/namespaces/(?P<namespace>[^/]+)/poddisruptionbudgets"),
    ),
]
#: The kind each list route serves.
LIST_KINDS = {
    "list_nodes": "Node",
    "list_pods": "Pod",
    "list_podgroups": "PodGroup",
    "list_pdbs": "PodDisruptionBudget",
    "list_namespaces": "Namespace",
}


class _HttpServer(ThreadingHTTPServer):
    """socketserver's listen backlog is 5: 8 scheduler replicas with 16 binding threads each
    connect at once, and connections past the backlog were reset (ECONNRESET) at their first
    request."""

    request_queue_size = 1024


class Headers:
    """A request's headers by lower-cased name, read by ``read_headers``: ``get`` by any case,
    as http.server's ``email.message.Message`` answers, for a fraction of its parse (the
    email parser was the largest Python part of a Binding's CPU)."""

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._fields.get(name.lower(), default)

    def __getitem__(self, name: str) -> str | None:
        return self._fields.get(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields


def read_headers(rfile: Any) -> Headers:
    """The header lines up to the blank one; the first of a repeated name counts (as
    ``Message.get``). ValueError past http.client's limits (a line of 64 KiB, 100 lines)."""
    fields: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise ValueError("Line too long")
        if line in (b"\r\n", b"\n", b""):
            return Headers(fields)
        name, colon, value = line.decode("iso-8859-1").partition(":")
        if colon:
            fields.setdefault(name.strip().lower(), value.strip())
    raise ValueError(f"got more than {MAX_HEADERS} headers")


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive, chunked watches) front of a FakeApiServer."""

    protocol_version = "HTTP/1.1"
    # Answers go out in one write each (_send_json), watch events as they come: nothing gains
    # from Nagle's algorithm, which held a second write until the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True
    server_api: FakeApiServer

    def parse_request(self) -> bool:
        """The request line and headers of HTTP/1.0 and 1.1 (http.server's parse, minus its
        email parser, HTTP/0.9 and ``Expect: 100-continue``, which no client here sends);
        a bad one answers 400 or 431 and closes the connection."""
        self.command = ""
        self.request_version = self.default_request_version
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = self.requestline.split()
        if len(words) != 3 or words[2] not in ("HTTP/1.0", "HTTP/1.1"):
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({self.requestline!r})")
            return False
        self.command, path, self.request_version = words
        self.path = "/" + path.lstrip("/") if path.startswith("//") else path
        try:
            self.headers = read_headers(self.rfile)  # type: ignore[assignment]
        except ValueError as error:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, str(error))
            return False
        connection = (self.headers.get("Connection") or "").lower()
        self.close_connection = connection == "close" or (
            self.request_version == "HTTP/1.0" and connection != "keep-alive"
        )
        return True

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The Date header, formatted once a second (http.server formats it per answer)."""
        if timestamp is not None:
            return super().date_time_string(timestamp)
        now = int(time.time())
        if _DATE[0] != now:
            _DATE[:] = [now, super().date_time_string(now)]
        return str(_DATE[1])

    def setup(self) -> None:
        super().setup()
        with self.server_api._cond:
            self.server_api._connections.add(self.connection)

    def finish(self) -> None:
        with self.server_api._cond:
            self.server_api._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is ``FakeApiServer.requests``."""

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        api = self.server_api
        api._log(method, url.path, query)
        try:
            self._authenticate()
            route, params = self._route(url.path)
            body = self._dispatch(method, route, params, query)
        except ApiError as e:
            self._send_json(e.code, status(e.code, e.reason, e.message))
            return
        except Exception as e:  # a bug here must reach the test as a 500, not a hang
            self._send_json(500, status(500, "InternalError", f"{type(e).__name__}: {e}"))
            raise
        if body is not None:
            # A client that gave up (a list it timed out on while lists were stalled) is gone.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._send_json(201 if route == "bind" else 200, body)

    def _authenticate(self) -> None:
        token = self.server_api.token
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def _route(self, path: str) -> tuple[str, dict[str, str]]:
        for name, pattern in ROUTES:
            m = pattern.fullmatch(path)
            if m:
                return name, m.groupdict()
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _dispatch(
        self, method: str, route: str, params: dict[str, str], query: dict[str, str]
    ) -> Obj | None:
        """The body to answer with, or None when the handler streamed the answer itself."""
        api = self.server_api
        if route == "pod_status":
            if method != "PATCH":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
            content_type = self.headers.get("Content-Type", "")
            if content_type != "application/strategic-merge-patch+json":
                raise ApiError(415, "UnsupportedMediaType", f"{content_type} (fake api server)")
            return api.patch_status(params["namespace"], params["name"], self._read_json())
        if method == "DELETE" and route == "get_pod":  # a preemption's victim (issue 41)
            api.get_object("Pod", (params["namespace"], params["name"]))  # 404 when absent
            return api.delete("Pod", params["name"], params["namespace"])
        if (method == "POST") != (route == "bind"):
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
        if route == "bind":
            binding = self._read_json()
            name = params.get("name") or (binding.get("metadata") or {}).get("name", "")
            return api.bind(params["namespace"], name, binding)
        if route in ("list_podgroups", "get_podgroup") and not api.podgroups_installed:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if route in ("get_node", "get_pod", "get_podgroup"):
            kind = {"get_node": "Node", "get_pod": "Pod", "get_podgroup": "PodGroup"}[route]
            key = (params.get("namespace", ""), params["name"])
            return api.get_object(kind, key)
        kind = LIST_KINDS[route]
        if kind in api.refused:  # a cluster without the kind (404) or an RBAC refusal (403)
            code = api.refused[kind]
            raise ApiError(code, HTTPStatus(code).phrase.replace(" ", ""), f"{kind} refused")
        selector = parse_field_selector(query.get("fieldSelector", ""))
        if query.get("watch") in ("1", "true"):
            self._watch(kind, params.get("namespace"), selector, query)
            return None
        api.wait_while_stalled()
        return api.list_page(kind, params.get("namespace"), selector, query)

    def _read_json(self) -> Obj:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"invalid JSON body: {e}") from e
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "body must be a JSON object")
        return body

    def _send_json(self, code: int, body: Obj) -> None:
        """Status line, headers and body in ONE write (end_headers() would write the headers
        alone, and the body would follow in a second segment)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code, HTTPStatus(code).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._headers_buffer.append(b"\r\n" + data)  # end_headers(), plus the body
        self.flush_headers()

    # ----------------------------------------------------------------- watch stream

    def _watch(
        self, kind: str, namespace: str | None, selector: Selector, query: dict[str, str]
    ) -> None:
        """Stream events as chunked JSON lines until timeout, drop or server close."""
        api = self.server_api
        if namespace is not None:
            selector = Selector([*selector.terms, ("metadata.namespace", namespace, True)])
        timeout = int_param(query, "timeoutSeconds")
        deadline = time.monotonic() + timeout if timeout else None
        w = api.start_watch(kind, self.connection, query)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if query.get("resourceVersion", "") in ("", "0"):
                self._send_chunks([chunk(e) for e in api.initial_events(w, selector)])
            for chunks in _until_none(lambda: api.next_chunks(w, selector, deadline)):
                self._send_chunks(chunks)
            if w.dropped:
                self.close_connection = True
            else:
                self.wfile.write(b"0\r\n\r\n")  # the clean end of a chunked body
        except OSError:
            self.close_connection = True
        finally:
            api.end_watch(w)

    def _send_chunks(self, chunks: list[bytes]) -> None:
        """One chunk per event line, written in one call."""
        if chunks:
            self.wfile.write(b"".join(chunks))


def _until_none(fn: Any) -> Iterator[list[bytes]]:
    while (value := fn()) is not None:
        yield value
