"""The pending pods' watch: the pod a bind claims, read from the API server ahead of the bind.

kube-scheduler binds the pod object its informer holds; the extender does the same with an
informer of its own (on by default with an API server; ``--no-pending-watch`` turns it off):
:class:`PendingPods` lists, then watches, the unscheduled pods (``fieldSelector=spec.nodeName=``,
as kube-scheduler's queue informer) through the extender's API client, and keeps, by uid, each
pod of a served ``schedulerName`` (every pod when none is given) decoded (``Pod.from_k8s``) at
watch time, off the bind's path. A bind whose uid, name and namespace are a kept pod's claims it
without an API GET (service.py); a filter or prioritize call whose pod has a kept pod's uid and
resourceVersion judges that copy instead of decoding its body's (:meth:`PendingPods.decoded`).
The data is the API server's, never a caller's.

* Bounded: at most ``PENDING_PODS`` pods and ``PENDING_BYTES`` of their JSON, none of over
  ``POD_BYTES`` (decoded, a pod took up to 5.2x its JSON, measured with 400 labels: ~85 MiB
  at most; a plain pod ~1 KiB). A pod beyond them,
  one whose ``schedulerName`` is not a string, one that cannot be decoded, is not kept (an older
  copy of its uid goes): its bind reads it as before, and refuses it with the same error.
* A pod leaves when it is bound (the watch's MODIFIED with ``spec.nodeName``, or the DELETED
  the field selector makes of it) or deleted.
* Lists page by page (``PAGE_SIZE`` pods, a page past ``PAGE_BYTES`` read again a pod a page;
  the kept pods dropped first, the list swapped in whole once listed; with one scheduler name
  the API server selects it), then watches from the list's resourceVersion with bookmarks; a
  watch that ends (or stays silent to its read timeout) resumes from the newest version seen;
  ``410 Gone`` (an HTTP status or an ``ERROR`` event) relists; other failures back off
  (``BACKOFF`` doubling to ``MAX_BACKOFF``).
* **Current or not served**: until the first list ends, while it relists, once the watch has
  been down for more than ``STALE_AFTER`` seconds, or silent for more than ``IDLE_AFTER``,
  :meth:`PendingPods.get` answers nothing (binds GET the pod, as without the watch); after
  such an outage the watch relists before it serves again.

What a kept copy may lag (as kube-scheduler's informer may): a pod deleted and recreated has
another uid (the bind GETs); one bound elsewhere meanwhile is refused by Redis's claim or by
the Binding's 409, whose settle path runs as today; a pod deleted meanwhile gets the Binding's
404 and its claim is forgotten. The rest of a pending pod's spec cannot change, except what a
scheduling-gated pod may tighten (node affinity and selector, tolerations); kube-scheduler does
not send a gated pod to the extender.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

import urllib3
from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter as Metric
from prometheus_client import Gauge

from schedcache.errors import CacheError, log_reason
from schedcache.feed.sync import (
    API_ERRORS,
    Gone,
    open_watch,
    watch_lines,
)
from schedcache.model.values import Pod
from schedcache.store.commands import DEFAULT_SCHEDULER, scheduler_name

log = logging.getLogger(__name__)

UNSCHEDULED = "spec.nodeName="  # kube-scheduler's queue informer's selector
PENDING_PODS = 10_000  # pods kept at most
PENDING_BYTES = 16 * 1024 * 1024  # their JSON at most (decoded: up to ~5x)
POD_BYTES = 16 * 1024  # one pod's JSON at most, as --bind-pod-from-filter's KEPT_POD_BYTES
STALE_AFTER = 5.0  # seconds the watch may be down before binds read the API server again
BACKOFF, MAX_BACKOFF = 0.5, 30.0
WATCH_TIMEOUT = 300  # seconds a watch asks for (jittered down to 80 %), as sync's
PAGE_SIZE = 100
# A list page's JSON at most (read no further; the page is then read again a pod at a time: a
# pod is at most ~1.5 MiB, etcd's request limit): a stranger's 500 pods of 1.5 MiB, pending for
# ever, held ~3 GiB at a list of 500-pod pages.
PAGE_BYTES = 4 * 1024 * 1024
LIST_TIMEOUT = 60.0
# Seconds the watch may go without a line (an event or a bookmark: the API server sends one at
# least every minute to a watch that allows them) before binds read their pod again; the watch
# connection's read timeout is a little longer (a hung connection is dropped, then resumed).
IDLE_AFTER = 70.0


KEPT = Gauge("schedcache_extender_pending_pods", "Pending pods the extender's watch keeps.")
RELISTS = Metric(
    "schedcache_extender_pending_relists_total", "Lists of the pending pods (the first included)."
)


class Watched(NamedTuple):
    """A pending pod as the API server holds it: decoded, its ``spec.schedulerName``, and the
    size of its JSON (counted against ``PENDING_BYTES``)."""

    pod: Pod
    served: str
    size: int


class PendingPods:
    """The list-watch of unscheduled pods; :meth:`start` runs it in a daemon thread."""

    def __init__(
        self,
        api: kube_client.CoreV1Api,
        scheduler_names: frozenset[str] = frozenset(),
        stale_after: float = STALE_AFTER,
        idle_after: float = IDLE_AFTER,
    ) -> None:
        self.api = api
        # Each is part of the field selector: a scheduler name or refused by name.
        for name in scheduler_names:
            scheduler_name(name, "pending pods' watch", "scheduler_names")
        self.scheduler_names = frozenset(scheduler_names)
        self.stale_after = stale_after
        self.idle_after = idle_after
        # The list's and watch's selector: the unscheduled pods, of the one scheduler served
        # when there is one (the API server filters: another scheduler's pods are never read).
        self.selector = UNSCHEDULED
        if len(scheduler_names) == 1:
            self.selector += f",spec.schedulerName={next(iter(scheduler_names))}"
        self.heard = 0.0  # when the watch last sent a line (or was opened)
        self.pods: dict[str, Watched] = {}
        self.bytes = 0
        self.lock = threading.Lock()
        self.version = ""
        self.listed = threading.Event()  # set once a list is in (and while it serves)
        self.down_since: float | None = None  # when the watch last failed, until it is back
        self.counters: Counter[str] = Counter()
        self.stop = threading.Event()
        self.response: Any = None
        self.thread: threading.Thread | None = None
        KEPT.set_function(lambda: len(self.pods))

    # -- what binds read -------------------------------------------------------------------

    def get(self, uid: str) -> Watched | None:
        """The kept pod of ``uid`` while the watch is current, else None (the bind reads it)."""
        if not self.current():
            return None
        return self.pods.get(uid)

    def decoded(self, uid: str, version: str) -> tuple[Pod, int] | None:
        """The kept pod of ``uid`` and its JSON's size, when it is the object at
        ``resourceVersion`` ``version``: a filter or prioritize call's pod, not decoded again
        (service.py). Served even while the watch is not current: an object's content at one
        resourceVersion never changes, so a lagging copy of that version is still that pod."""
        entry = self.pods.get(uid)
        if entry is None or entry.pod.resource_version != version:
            return None
        return entry.pod, entry.size

    def current(self) -> bool:
        """Listed, the watch not down for more than ``stale_after`` seconds, and not silent
        for more than ``idle_after`` (a connection that hangs without closing)."""
        down = self.down_since
        now = time.monotonic()
        return (
            self.listed.is_set()
            and (down is None or now - down <= self.stale_after)
            and now - self.heard <= self.idle_after
        )

    def down_too_long(self) -> bool:
        """The watch failed more than ``stale_after`` seconds ago and is not back: events may
        be missing, relist. (A silent watch is not down: resuming from its version misses
        nothing, and a healthy watch on a quiet cluster may send no bookmark for minutes.)"""
        down = self.down_since
        return down is not None and time.monotonic() - down > self.stale_after

    # -- the thread ------------------------------------------------------------------------

    def start(self) -> PendingPods:
        self.thread = threading.Thread(target=self.run, name="schedcache-pending-pods", daemon=True)
        self.thread.start()
        return self

    def close(self, timeout: float = 1.0) -> None:
        """Stop at once: the open watch is closed under the reading thread."""
        self.stop.set()
        response = self.response
        if response is not None:
            sock = getattr(getattr(response, "connection", None), "sock", None)
            with contextlib.suppress(Exception):
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
                response.close()
        if self.thread is not None:
            self.thread.join(timeout)

    def run(self) -> None:
        """List, then watch, until stopped; back off while the API server is away."""
        delay = BACKOFF
        listed = False
        while not self.stop.is_set():
            try:
                if not listed or self.down_too_long():
                    self.relist()
                    listed = True
                if self.watch(self.version):
                    delay = BACKOFF
                    continue
                # Ended without a line: resumed after a pause, not at once (a server that
                # ends every watch at once would be asked again and again: third review).
                self.stop.wait(delay)
                delay = min(MAX_BACKOFF, delay * 2)
                continue
            except Gone as gone:
                log.info("pending pods: %s; relisting", gone)
                listed = False
                continue
            except API_ERRORS as error:
                if self.stop.is_set():
                    break
                self.counters["api_errors"] += 1
                log.warning(
                    "pending pods: API server unavailable (%s: %s); binds read their pod "
                    "after %g s; retrying in %.1f s",
                    type(error).__name__,
                    log_reason(error),
                    self.stale_after,
                    delay,
                )
            except Exception:
                if self.stop.is_set():
                    break
                self.counters["api_errors"] += 1
                log.exception("pending pods: unexpected error; retrying in %.1f s", delay)
            if self.down_since is None:
                self.down_since = time.monotonic()
            self.stop.wait(delay)
            delay = min(MAX_BACKOFF, delay * 2)

    def _call(self, **options: Any) -> Any:
        return self.api.list_pod_for_all_namespaces(
            field_selector=self.selector, _preload_content=False, **options
        )

    def relist(self) -> None:
        """Every unscheduled pod (paginated), swapped in whole once listed. The pods kept
        before are dropped first (binds read their pod meanwhile): one set is held at a time."""
        self.counters["relists"] += 1
        RELISTS.inc()
        self.listed.clear()
        with self.lock:
            self.pods, self.bytes = {}, 0
        while True:
            pods, size, version = self._list()
            if version:
                break
        with self.lock:
            self.pods, self.bytes, self.version = pods, size, version
        self.down_since = None
        self.heard = time.monotonic()
        self.listed.set()
        log.info("pending pods: listed %d at resourceVersion %s", len(pods), version)

    def _list(self) -> tuple[dict[str, Watched], int, str]:
        """One list: its pods, their bytes and its resourceVersion ("" when a continue token
        expired: the list starts over)."""
        pods: dict[str, Watched] = {}
        size = 0
        token: str | None = None
        one_by_one = 0  # pages of one pod still to read (after a page past PAGE_BYTES)
        while not self.stop.is_set():
            options: dict[str, Any] = {
                "limit": 1 if one_by_one else PAGE_SIZE,
                "_request_timeout": (LIST_TIMEOUT, LIST_TIMEOUT),
            }
            if token:
                options["_continue"] = token
            try:
                page = capped_json(self._call(**options), PAGE_BYTES)
            except ApiException as error:
                if error.status == 410:
                    return {}, 0, ""
                raise
            if page is None:  # past PAGE_BYTES: the same pods again, one a page
                if one_by_one:
                    raise ValueError(f"one pod's JSON passes {PAGE_BYTES} bytes")
                self.counters["large_pages"] += 1
                one_by_one = PAGE_SIZE
                continue
            one_by_one = max(0, one_by_one - 1)
            metadata = page.get("metadata")
            metadata = metadata if isinstance(metadata, Mapping) else {}
            for item in page.get("items") or []:
                if not isinstance(item, Mapping):
                    continue
                bytes_ = len(json.dumps(item, separators=(",", ":")))
                entry = self._entry(item, bytes_)
                if entry is None:
                    continue
                if len(pods) >= PENDING_PODS or size + entry.size > PENDING_BYTES:
                    self.counters["full"] += 1
                    continue
                pods[entry.pod.uid] = entry
                size += entry.size
            token = metadata.get("continue") or None
            if not token:
                version = metadata.get("resourceVersion")
                return pods, size, str(version) if version else "0"
        raise _Stopped

    def watch(self, version: str) -> int:
        """Apply watch events from ``version`` until the watch ends (:attr:`version` follows
        them); how many lines it sent. Raises :class:`Gone` on 410."""
        lines = 0
        response = open_watch(self._call, version, WATCH_TIMEOUT, self.idle_after + 5)
        self.response = response
        self.down_since = None
        self.heard = time.monotonic()
        try:
            for line in watch_lines(response):
                if self.stop.is_set():
                    break
                self.heard = time.monotonic()
                lines += 1
                self._event(line)
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError) as error:
            # Cut mid-stream (a load balancer, the server restarting): a new watch resumes
            # at once from the last version; an API server that stays away fails it.
            if not self.stop.is_set():
                log.info("pending pods: watch cut (%s); resuming from %s", error, self.version)
        finally:
            self.response = None
            response.release_conn()
        self.counters["watch_restarts"] += 1
        return lines

    def _event(self, line: bytes) -> None:
        try:
            event = json.loads(line)
            kind, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError):
            self.counters["invalid"] += 1
            return
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, Mapping) else None
            if code == 410:
                raise Gone(str(obj.get("message", "410 Gone")))
            raise ApiException(status=code or 500, reason="the watch answered an error")
        if not isinstance(obj, Mapping):
            self.counters["invalid"] += 1
            return
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        seen = metadata.get("resourceVersion")
        if isinstance(seen, str) and seen.isdigit():
            self.version = seen
        if kind == "BOOKMARK":
            return
        uid = metadata.get("uid")
        if not isinstance(uid, str) or not uid:
            self.counters["invalid"] += 1
            return
        entry = None if kind == "DELETED" else self._entry(obj, len(line))
        with self.lock:
            old = self.pods.pop(uid, None)
            if old is not None:
                self.bytes -= old.size
            if entry is None:
                return
            if len(self.pods) >= PENDING_PODS or self.bytes + entry.size > PENDING_BYTES:
                self.counters["full"] += 1
                return
            self.pods[uid] = entry
            self.bytes += entry.size

    def _entry(self, obj: Mapping[str, Any], size: int) -> Watched | None:
        """``obj`` decoded, when it is to be kept: pending, served, within ``POD_BYTES``."""
        spec = obj.get("spec")
        if not isinstance(spec, Mapping) or spec.get("nodeName"):
            return None  # bound: leaves
        served = spec.get("schedulerName") or DEFAULT_SCHEDULER
        if not isinstance(served, str):
            self.counters["undecodable"] += 1
            return None
        if self.scheduler_names and served not in self.scheduler_names:
            return None
        if size > POD_BYTES:
            self.counters["too_large"] += 1
            return None
        try:
            pod = Pod.from_k8s(obj)
        except (CacheError, ValueError, TypeError, AttributeError):
            self.counters["undecodable"] += 1
            return None
        if not pod.uid:
            return None
        return Watched(pod, served, size)


def capped_json(response: Any, cap: int) -> dict[str, Any] | None:
    """A list answer's JSON object, or None when it passes ``cap`` bytes (not read further:
    the connection is dropped)."""
    data = response.read(cap + 1, decode_content=True)
    if len(data) > cap:
        response.close()  # the rest unread: the connection is not given back to the pool
        return None
    response.release_conn()
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"the API server answered {type(value).__name__}, not an object")
    return value


class _Stopped(Exception):
    """The list was stopped between pages."""
