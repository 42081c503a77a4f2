"""``schedcache sync``: keep a cache in step with a live cluster, as kube-scheduler's informers.

For nodes, for pods not ``Succeeded``/``Failed`` and for PodGroups (scheduler-plugins'
Coscheduling CRD; a cluster without it is synced without them), a :class:`ResourceFeed` lists with
pagination, then watches from the list's resourceVersion with bookmarks. Assigned pods are the
ones kube-scheduler's cache holds; pending ones go to the cache's scheduling queue, under their
``spec.schedulerName``, for that scheduler's replicas to pop (:mod:`schedcache.ops.queue`;
``SyncSettings.queue_for`` limits which scheduler names are queued):

* every object becomes one ``sc_sync_pod`` / ``sc_sync_node`` command carrying its
  resourceVersion; the function decides add, confirm (a pod the scheduler assumed), update or
  remove from what the cache holds, and drops a change at or below the version it last applied
  for that object (a deletion leaves a tombstone). So any number of feeders may run against one
  cache: the first to deliver a change applies it, the others' copies are dropped, the stream
  holds it once, and a feeder that dies loses nothing while another runs;
* a watch that ends (its timeout, a closed connection) resumes from the last resourceVersion
  or bookmark; ``410 Gone`` (an HTTP status or an ``ERROR`` event) relists and **reconciles**:
  listed objects are applied, and cached ones the list no longer holds are removed at the
  list's resourceVersion (so a newer change another feeder applied meanwhile wins);
* an unreachable API server means back-off, the cache left as it is; so does a list page that
  sends nothing for ``list_timeout`` seconds (a stalled list is a timeout, logged and counted
  like a failed watch); a malformed object or watch event is logged by name, counted and
  skipped, and the watch goes on past it (it never restarts from the same resourceVersion);
* a pod the API server accepted is never invisible to fit: one the cache cannot store in full
  (labels past what it reads back) is stored without its labels, still counting its requests
  and ports on its node, and marked ``truncated``;
* Redis away beyond the store's retry policy (a restart, a failover) means the same back-off;
  the watch then resumes from the newest resourceVersion applied (every change before it
  applied too), so an outage replays nothing and relists nothing; the progress written to the
  cache goes through the retry policy, and a write Redis does not take is only logged;
* a stop (SIGTERM) ends a list between pages without reconciling a partial list.

Lists and watches go through the official ``kubernetes`` client (configuration, auth, TLS,
kubeconfig contexts, in-cluster service accounts) with ``_preload_content=False``: the JSON is
read here, because building the client's typed models costs more than the sync itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

import redis
import urllib3
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from schedcache.cache import Cache
from schedcache.errors import CacheError, RetriesExhausted, ValidationError, log_reason
from schedcache.feed.progress import progress_lost, record_progress
from schedcache.feed.reconcile import RESOURCES, held, removal
from schedcache.feed.truncation import stored_pod
from schedcache.model.manifests import subject
from schedcache.model.values import Node, Pod
from schedcache.store import commands, metrics
from schedcache.store.budgets import budget_key, budget_keys, sync_budget, sync_budget_gone
from schedcache.store.commands import DEFAULT_SCHEDULER, Command
from schedcache.store.namespaces import (
    namespace_name,
    namespace_names,
    sync_namespace,
    sync_namespace_gone,
)
from schedcache.store.podgroups import API as POD_GROUPS
from schedcache.store.podgroups import PodGroup, sync_pod_group, sync_pod_group_gone
from schedcache.store.responses import as_text

log = logging.getLogger(__name__)
T = TypeVar("T")

# kube-scheduler's informers: assigned pods for its cache, pending ones for its queue.
NON_TERMINATED_PODS = "status.phase!=Succeeded,status.phase!=Failed"
ASSIGNED_PODS = f"spec.nodeName!=,{NON_TERMINATED_PODS}"
TERMINATED = frozenset({"Succeeded", "Failed"})
#: policy/v1 PodDisruptionBudgets, fed for preemption (docs/preemption.md); not in RESOURCES
#: (``load --prune`` and the progress shown by ``stats`` speak for nodes and pods).
BUDGETS = "poddisruptionbudgets"
#: v1 Namespaces' labels, for non-empty namespaceSelectors (docs/constraints.md); not in
#: RESOURCES either.
NAMESPACES = "namespaces"
FEEDS = (*RESOURCES, BUDGETS, NAMESPACES)
#: What a cluster answers a list of PodDisruptionBudgets when the kind is not served (404) or
#: sync's role may not list it (403): logged once, the feed tries again quietly.
NOT_SERVED = frozenset({403, 404})
#: What a cluster that refuses those lists loses, and the RBAC that sync lacks then.
UNSERVED_CONSEQUENCE = {
    "poddisruptionbudgets": (
        "preemption respects no PodDisruptionBudget",
        "poddisruptionbudgets.policy",
    ),
    "namespaces": ("a non-empty namespaceSelector selects no namespace by labels", "namespaces"),
}


# Seconds between lists of a kind the API server does not serve (the PodGroup CRD missing).
MISSING_KIND_RECHECK = 60.0

# What a failing API server raises through the client (HTTP errors, sockets, bad JSON).
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


class Gone(Exception):
    """410: the resourceVersion is older than the API server's history: relist."""


class Stopped(Exception):
    """The feed was stopped mid-list: the partial list must not reconcile anything."""


@dataclass(frozen=True)
class SyncSettings:
    """``page_size``: objects per list page and per batch of commands; ``watch_timeout``:
    seconds a watch runs before it is renewed (jittered by up to a fifth, so feeders do not
    renew together); ``backoff``/``max_backoff``: first and longest wait after an API error;
    ``progress_every``: seconds between writes of the feed's progress to the cache;
    ``list_timeout``: seconds a list page may send nothing before it counts as failed (the
    socket read timeout of each list request; also its connect timeout); ``queue_for``: the
    scheduler names whose pending pods are queued (``None``: every name; empty: none, and only
    assigned pods are listed and watched); ``pod_groups``: list and watch PodGroups too;
    ``batch_linger``: seconds the Binding of a pod this feed saw pending (a claim's
    confirmation, mostly) may wait for more to share its ``sc_batch`` (0: none; any other
    change of the pods' feed is sent at once, with what waits before it)."""

    page_size: int = 500
    watch_timeout: int = 300
    backoff: float = 0.5
    max_backoff: float = 30.0
    progress_every: float = 1.0
    list_timeout: float = 30.0
    queue_for: frozenset[str] | None = None
    pod_groups: bool = True
    batch_linger: float = 0.01

    def __post_init__(self) -> None:
        if self.queue_for is not None:
            names = frozenset(self.queue_for)
            for name in names:
                commands.scheduler_name(name, "sync", "queue_for")
            object.__setattr__(self, "queue_for", names)
        for name in ("page_size", "watch_timeout"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValidationError("sync", name, f"{value!r} must be an integer >= 1")
        for name in ("backoff", "max_backoff", "progress_every", "list_timeout"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 < value <= 3600:
                raise ValidationError("sync", name, f"{value!r} must be in (0, 3600] seconds")
        linger = self.batch_linger
        if isinstance(linger, bool) or not isinstance(linger, int | float) or not 0 <= linger <= 1:
            raise ValidationError("sync", "batch_linger", f"{linger!r} must be in [0, 1] seconds")


@dataclass
class FeedCounters:
    """What one feed did since it started (also exported as Prometheus counters)."""

    applied: int = 0
    dropped: int = 0
    invalid: int = 0
    rejected: int = 0
    relists: int = 0
    watch_restarts: int = 0
    api_errors: int = 0
    list_timeouts: int = 0
    truncated: int = 0
    last_version: str = ""
    results: dict[str, int] = field(default_factory=dict)


def api_client(
    kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False
) -> kube_client.CoreV1Api:
    """A CoreV1Api from the in-cluster service account, or a kubeconfig (``kubeconfig``, else
    ``KUBECONFIG``, else ``~/.kube/config``) and its ``context``.

    A request whose answer stops coming (read timeout) is not sent again by urllib3 (its
    default resends a GET three times, so a stalled list page took four read timeouts to
    fail): the callers back off and retry themselves (:class:`NoResendAfterTimeout`)."""
    configuration = kube_client.Configuration()
    configuration.retries = NoResendAfterTimeout(3)
    if in_cluster:
        kube_config.load_incluster_config(client_configuration=configuration)
    else:
        kube_config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    return kube_client.CoreV1Api(kube_client.ApiClient(configuration))


class NoResendAfterTimeout(urllib3.Retry):
    """urllib3's default retries, except that a request whose answer stopped coming (a read
    timeout) fails at once: a list page that sends nothing for ``list_timeout`` is one
    timeout, not four. A connection cut before the answer is still resent."""

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        if isinstance(error, urllib3.exceptions.ReadTimeoutError):
            raise urllib3.exceptions.MaxRetryError(_pool, url or "", error) from error
        return super().increment(method, url, response, error, _pool, _stacktrace)


def pod_command(
    event: str, obj: Mapping[str, Any], queue_for: frozenset[str] | None = None
) -> Command | None:
    """The command for a pod seen in a list (``LISTED``) or a watch event: present while it is
    assigned and not terminated, queued while pending for a scheduler in ``queue_for`` (None:
    any), else gone (None: a pending pod of a scheduler not queued, which nothing here holds).
    Raises ValidationError for a malformed pod."""
    return planned_pod(event, obj, queue_for)[0]


def planned_pod(
    event: str, obj: Mapping[str, Any], queue_for: frozenset[str] | None = None
) -> tuple[Command | None, bool]:
    """:func:`pod_command` and whether the pod had to be truncated.

    A valid pod the cache cannot store in full (more labels than it reads back; the API server
    accepts up to etcd's 1.5 MiB) is stored without its labels and marked ``truncated``: left
    out, it would be invisible to fit and a claim could overcommit its node
    (:mod:`schedcache.feed.truncation`, shared with ``load``). A pending pod is queued the same
    way (its own labels then play no part in its placement)."""
    pod = Pod.from_k8s(obj)
    version = _version(obj, commands.pod_subject(pod))
    gone = event == "DELETED" or pod.phase in TERMINATED
    if not gone and not pod.node_name:
        scheduler = _scheduler_name(obj, pod)
        if queue_for is not None and scheduler not in queue_for:
            return None, False
        return stored_pod(pod, lambda stored: commands.sync_pod_pending(stored, scheduler, version))
    present = not gone
    return stored_pod(pod, lambda stored: commands.sync_pod(stored, version, present))


def _scheduler_name(obj: Mapping[str, Any], pod: Pod) -> str:
    spec = obj.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if name is None or name == "":
        return DEFAULT_SCHEDULER
    return commands.scheduler_name(name, commands.pod_subject(pod))


def node_command(event: str, obj: Mapping[str, Any]) -> Command:
    """The command for a node seen in a list or a watch event."""
    if event == "DELETED":
        name = _name(obj)
        return commands.sync_node_gone(name, _version(obj, f"node {name}"))
    node = Node.from_k8s(obj)
    return commands.sync_node(node, _version(obj, f"node {node.name}"))


def pod_group_command(event: str, obj: Mapping[str, Any]) -> Command:
    """The command for a PodGroup seen in a list or a watch event."""
    group = PodGroup.from_k8s(obj)
    version = _version(obj, f"pod group {group.name}")
    if event == "DELETED":
        return sync_pod_group_gone(group.name, version)
    return sync_pod_group(group, version)


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValidationError("node", "metadata.name", "is required")
    return name


def _version(obj: Mapping[str, Any], what: str) -> str:
    metadata = obj.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return commands.resource_version(version, what)


class ResourceFeed:
    """The list-watch loop of one resource (``nodes`` or ``pods``) into one cache."""

    def __init__(
        self,
        cache: Cache,
        api: kube_client.CoreV1Api,
        resource: str,
        settings: SyncSettings,
        stop: threading.Event,
        name: str = "",
    ) -> None:
        if resource not in FEEDS:
            raise ValidationError("sync", "resource", f"{resource!r} is not one of {FEEDS}")
        self.cache, self.api, self.resource = cache, api, resource
        self.settings, self.stop = settings, stop
        self.name = name or cache.replica or "feeder"
        self.counters = FeedCounters()
        self._lock = threading.Lock()
        self.version = ""  # the newest resourceVersion seen (object or bookmark)
        # The newest resourceVersion whose changes, and every one before it, are applied: where
        # a watch resumes after any failure (a Redis outage replays nothing, relists nothing).
        self.applied = ""
        self.response: Any = None  # the open watch, closed by close() to stop at once
        self.synced = threading.Event()  # set once the first list is applied
        self._progress_written = 0.0
        self._written = ""  # the progress this feeder last wrote, as Redis took it
        self._lost = threading.Event()  # Redis came back without it: relist
        self._labels = {"cache": cache.name, "resource": resource}
        self._missing_logged = False  # the PodGroup CRD's absence was logged (_kind_missing)
        # Uids of pods this feed last saw pending (queued): their Binding is a claim's
        # confirmation, which may wait for company (batch_linger); a pod first seen assigned
        # (a DaemonSet's, a static pod) never waits. At most MAX_PENDING_TRACKED: past it a
        # Binding goes at once.
        self._pending_uids: set[str] = set()
        self._refused = False  # a 403/404 on the budgets' list was logged

    # -- the API server ---------------------------------------------------------------------

    def _call(self, **options: Any) -> Any:
        if self.resource == "nodes":
            return self.api.list_node(_preload_content=False, **options)
        if self.resource == "podgroups":
            custom = kube_client.CustomObjectsApi(self.api.api_client)
            return custom.list_cluster_custom_object(*POD_GROUPS, _preload_content=False, **options)
        if self.resource == NAMESPACES:
            return self.api.list_namespace(_preload_content=False, **options)
        if self.resource == BUDGETS:
            policy = kube_client.PolicyV1Api(self.api.api_client)
            return policy.list_pod_disruption_budget_for_all_namespaces(
                _preload_content=False, **options
            )
        queued = self.settings.queue_for is None or self.settings.queue_for
        return self.api.list_pod_for_all_namespaces(
            field_selector=NON_TERMINATED_PODS if queued else ASSIGNED_PODS,
            _preload_content=False,
            **options,
        )

    def _command(self, event: str, obj: Mapping[str, Any]) -> Command | None:
        if self.resource == "nodes":
            return node_command(event, obj)
        if self.resource == "podgroups":
            return pod_group_command(event, obj)
        if self.resource == BUDGETS:
            version = _version(obj, f"poddisruptionbudget {budget_key(obj)}")
            return sync_budget(obj, version, present=event != "DELETED")
        if self.resource == NAMESPACES:
            version = _version(obj, f"namespace {namespace_name(obj)}")
            return sync_namespace(obj, version, present=event != "DELETED")
        command, cut = planned_pod(event, obj, self.settings.queue_for)
        if cut:
            self._count("truncated")
            self._result("truncated")
            log.warning(
                "pods of cache %s: %s stored without its labels (more than the cache stores); "
                "its requests and ports still count on its node",
                self.cache.name,
                subject(obj),
            )
        return command

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """List, then watch, until ``stop`` is set; back off while the API server or Redis is
        away. A watch resumes from the newest resourceVersion applied (:attr:`applied`), so an
        outage of either costs neither a replay nor a relist; only 410 Gone relists."""
        delay = self.settings.backoff
        listed = False
        while not self.stop.is_set():
            try:
                if not listed:
                    self.relist()
                    listed = True
                    self.synced.set()
                self.watch(self.applied)
                delay = self.settings.backoff
                continue
            except Gone as gone:
                log.info("%s of cache %s: %s; relisting", self.resource, self.cache.name, gone)
                listed = False
                continue
            except Stopped:
                break
            except API_ERRORS as error:
                if self.stop.is_set():
                    break
                if self._kind_missing(error):
                    listed = False
                    self.stop.wait(MISSING_KIND_RECHECK)
                    continue
                if self._not_served(error):
                    self.synced.set()  # nothing to wait for: no budgets (namespaces) to read
                    self.stop.wait(self.settings.max_backoff)
                    continue
                self._count("api_errors")
                metrics.SYNC_API_ERRORS.labels(**self._labels).inc()
                stalled = _timed_out(error)
                if stalled:
                    self._count("list_timeouts")
                log.warning(
                    "%s of cache %s: API server unavailable (%s: %s); retrying in %.1f s",
                    self.resource,
                    self.cache.name,
                    f"a list page sent nothing for {self.settings.list_timeout:g} s"
                    if stalled
                    else type(error).__name__,
                    log_reason(error),
                    delay,
                )
            except (CacheError, redis.RedisError) as error:  # Redis away beyond the retry policy
                if self.stop.is_set():
                    break
                log.warning(
                    "%s of cache %s: Redis unavailable (%s: %s); resuming from resourceVersion "
                    "%s in %.1f s",
                    self.resource,
                    self.cache.name,
                    type(error).__name__,
                    log_reason(error),
                    self.applied if listed else "- (listing again)",
                    delay,
                )
            except Exception:
                # close() pulls the socket from under a reading watch (urllib3 then fails in
                # its own ways): that is the stop. Anything else must not end the feed for
                # good with a thread dying quietly: log it whole and back off.
                if self.stop.is_set():
                    break
                self._count("api_errors")
                log.exception(
                    "%s of cache %s: unexpected error; retrying in %.1f s",
                    self.resource,
                    self.cache.name,
                    delay,
                )
            self.stop.wait(delay)
            delay = min(self.settings.max_backoff, delay * 2)

    def _kind_missing(self, error: BaseException) -> bool:
        """Whether ``error`` says the API server has no PodGroups (404: the Coscheduling CRD is
        not installed). Sync goes on without them: logged once, counted as synced, listed
        again every MISSING_KIND_RECHECK seconds (the CRD installed later is then fed)."""
        if self.resource != "podgroups" or getattr(error, "status", None) != 404:
            return False
        if not self._missing_logged:
            self._missing_logged = True
            log.warning(
                "podgroups of cache %s: the API server has no %s/%s %s (the CRD is not "
                "installed): syncing without them, listing again every %g s",
                self.cache.name,
                *POD_GROUPS,
                MISSING_KIND_RECHECK,
            )
        self.synced.set()
        return True

    def _not_served(self, error: BaseException) -> bool:
        """Whether ``error`` is a 404 (policy/v1 not served) or 403 (no RBAC) on the budgets or
        the namespaces: logged once; sync goes on without them and lists them again every
        ``max_backoff`` seconds."""
        if self.resource not in (BUDGETS, NAMESPACES) or not isinstance(error, ApiException):
            return False
        if error.status not in NOT_SERVED:
            return False
        level = logging.DEBUG if self._refused else logging.WARNING
        self._refused = True
        log.log(
            level,
            "%s of cache %s: the API server answered %s (%s); %s until sync may list them "
            "(get/list/watch on %s); trying again every %.0f s",
            self.resource,
            self.cache.name,
            error.status,
            error.reason,
            *UNSERVED_CONSEQUENCE[self.resource],
            self.settings.max_backoff,
        )
        return True

    def close(self) -> None:
        """Stop at once: the open watch is closed under the reading thread."""
        response = self.response
        if response is None:
            return
        # close() alone does not wake a thread blocked reading the socket: shut it down first.
        sock = getattr(getattr(response, "connection", None), "sock", None)
        with contextlib.suppress(Exception):  # a half-read socket may complain; it goes anyway
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            response.close()

    def relist(self) -> str:
        """List every object (paginated, one consistent snapshot), apply them page by page as
        they arrive, remove what the cache holds that the list does not, and return the list's
        resourceVersion."""
        self._count("relists")
        metrics.SYNC_RELISTS.labels(**self._labels).inc()
        self._pending_uids.clear()  # (the list says again which pods are pending)
        listed: set[str] = set()
        count, version = 0, ""
        # Redis applies one page while the next is read and turned into commands.
        applying: Future[None] | None = None
        for items, version in self._pages():
            if self.stop.is_set():  # a partial list must not remove what it did not reach
                raise Stopped(f"{self.resource} list stopped")
            if items is None:  # the snapshot expired between pages: the list starts over
                listed, count = set(), 0
                continue
            planned = []
            for obj in items:
                # An object that cannot be read is still listed: a relist never removes it.
                listed.add(_identity(self.resource, obj))
                command = self._plan("LISTED", obj)
                if command is not None:
                    planned.append(command)
            count += len(items)
            if applying is not None:
                applying.result()
            applying = _background(
                f"schedcache-apply-{self.resource}", self._apply_listed, planned, version
            )
        if applying is not None:
            applying.result()
        if self.resource == BUDGETS:
            cached = budget_keys(self.cache.store)
            stale = sorted(cached - listed)
            self._apply_batch([sync_budget_gone(key, version) for key in stale])
        elif self.resource == NAMESPACES:
            stale = sorted(namespace_names(self.cache.store) - listed)
            self._apply_batch([sync_namespace_gone(key, version) for key in stale])
        else:
            cached = self.cache.store.retrying(lambda: held(self.cache, self.resource), "relist")
            stale = sorted(cached - listed)
            self._apply_batch([removal(self.resource, key, version) for key in stale])
        self._applied(version, force=True)
        log.info(
            "%s of cache %s: listed %d at resourceVersion %s, %d no longer there",
            self.resource,
            self.cache.name,
            count,
            version,
            len(stale),
        )
        return version

    def _apply_listed(self, planned: list[Command], version: str) -> None:
        self._apply_batch(self._unapplied(planned, version))

    def _pages(self) -> Iterator[tuple[list[dict[str, Any]] | None, str]]:
        """The list's pages with its resourceVersion, the next page fetched while the caller
        applies this one; ``(None, "")`` when the list had to start over (410 on a continue
        token)."""
        name = f"schedcache-list-{self.resource}"
        pending = _background(name, self._page, None)
        while True:
            try:
                page = pending.result()
            except ApiException as error:
                if error.status != 410:
                    raise
                yield None, ""
                pending = _background(name, self._page, None)
                continue
            metadata = page.get("metadata")
            metadata = metadata if isinstance(metadata, Mapping) else {}
            token = metadata.get("continue") or None
            if token:
                pending = _background(name, self._page, token)
            version = commands.resource_version(
                metadata.get("resourceVersion"), f"{self.resource} list"
            )
            items = page.get("items")
            yield [item for item in items or [] if isinstance(item, dict)], version
            if not token:
                return

    def _page(self, token: str | None) -> dict[str, Any]:
        wait = self.settings.list_timeout
        options: dict[str, Any] = {
            "limit": self.settings.page_size,
            "_request_timeout": (wait, wait),
        }
        if token:
            options["_continue"] = token
        return response_json(self._call(**options))

    def _unapplied(self, planned: list[Command], version: str) -> list[Command]:
        """``planned`` without the objects the cache already holds at ``version`` or newer
        (another feeder listed them first): one MGET of their versions instead of a function
        call each. The function checks again; this only saves Redis the dropped calls."""
        if not planned:
            return planned
        keys = [self._version_key(command) for command in planned]
        stored = self.cache.store.retrying(lambda: self.cache.client.mget(keys), "relist")
        listed = int(version)
        kept = []
        for command, known in zip(planned, stored, strict=True):
            text = as_text(known) if known is not None else ""
            if text.isdigit() and int(text) >= listed:
                self._count("dropped")
                self._result("dropped_repeated" if int(text) == listed else "dropped_stale")
            else:
                kept.append(command)
        return kept

    def _version_key(self, command: Command) -> str:
        # sync_pod / sync_node arguments: (version, op, uid or name, ...)
        if self.resource == BUDGETS:
            return self.cache.keys.budget_version(str(command.args[1]))
        if self.resource == NAMESPACES:
            return self.cache.keys.namespace_version(str(command.args[1]))
        identity = str(command.args[2])
        if self.resource == "nodes":
            return self.cache.keys.node_version(identity)
        if self.resource == "podgroups":
            return self.cache.keys.pod_group_version(identity)
        return self.cache.keys.pod_version(identity)

    def watch(self, version: str) -> str:
        """Apply watch events from ``version`` until the watch ends; returns the newest
        resourceVersion seen. Raises :class:`Gone` on 410; after any other failure
        :attr:`applied` says how far the changes were applied."""
        self._relist_if_writes_lost()
        response = open_watch(self._call, version, self.settings.watch_timeout)
        self.response = response
        applier = _Applier(self)
        try:
            for line in watch_lines(response):
                if self.stop.is_set():
                    break
                applier.check()
                version = self._event(line, version, applier)
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError) as error:
            # Cut mid-stream (a load balancer, the server restarting): a new watch resumes
            # from the last version; an API server that stays away fails the next request.
            if not self.stop.is_set() and applier.error is None:
                log.info(
                    "%s watch of cache %s cut (%s); resuming from %s",
                    self.resource,
                    self.cache.name,
                    log_reason(error),
                    version,
                )
        except Exception:
            # Else the applier closed the watch (its error counts), or the feed did, having
            # found that Redis lost writes (it relists).
            if applier.error is None and not self._lost.is_set():
                raise
        finally:
            self.response = None
            response.release_conn()
            applier.finish()  # what was read is applied before the watch resumes
        applier.check()
        self._relist_if_writes_lost()
        if not self.stop.is_set():
            self._count("watch_restarts")
            metrics.SYNC_WATCH_RESTARTS.labels(**self._labels).inc()
        self._applied(version, force=True)
        return version

    def _event(self, line: bytes, version: str, applier: _Applier) -> str:
        """Hand one watch event line's command to ``applier``; returns the newest
        resourceVersion."""
        received = time.monotonic()
        try:
            event = json.loads(line)
            kind, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError) as error:
            self._invalid(f"watch event {line[:80]!r}", f"not a watch event ({error})")
            return version
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, Mapping) else None
            if code == 410:
                raise Gone(str(obj.get("message", "410 Gone")))
            raise ApiException(status=code or 500, reason=str(obj))
        if not isinstance(obj, Mapping):
            self._invalid("watch event", "object is not a mapping")
            return version
        metadata = obj.get("metadata")
        seen = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        seen = seen if isinstance(seen, str) and seen.isdigit() else version
        self._seen(seen)
        # Applied in order with the commands: a bookmark (or an object nothing here holds)
        # moves the applied version once everything before it is applied.
        command = None if kind == "BOOKMARK" else self._plan(kind, obj)
        applier.put(command, received, seen, self._lingers(command))
        return seen

    # -- commands ---------------------------------------------------------------------------

    def _plan(self, event: str, obj: Mapping[str, Any]) -> Command | None:
        if event not in ("LISTED", "ADDED", "MODIFIED", "DELETED"):
            self._invalid(subject(obj), f"unknown watch event type {event!r}")
            return None
        try:
            command = self._command(event, obj)
        except ValidationError as error:
            self._invalid(subject(obj), str(error))
            return None
        queued = command is not None and command.name == "sync_pod" and command.args[1] == "queue"
        if queued and len(self._pending_uids) < MAX_PENDING_TRACKED:
            self._pending_uids.add(str(command.args[2]))  # type: ignore[union-attr]
        return command

    def _lingers(self, command: Command | None) -> bool:
        """Whether ``command`` may wait for company: the Binding of a pod this feed saw
        pending (sc_sync_pod op "set"; a claim's confirmation when one of the cache's
        schedulers placed it, which already counts the pod on its node). A pod's other changes
        forget it: a later change of a running pod goes at once."""
        if command is None or command.name != "sync_pod":
            return False
        uid = str(command.args[2])
        if command.args[1] == "queue" or uid not in self._pending_uids:
            return False
        self._pending_uids.discard(uid)
        return command.args[1] == "set"

    def _invalid(self, what: str, why: str) -> None:
        self._count("invalid")
        self._result("invalid")
        log.warning("%s of cache %s: skipped %s: %s", self.resource, self.cache.name, what, why)

    def _apply_one(self, command: Command) -> None:
        try:
            reply = self.cache.run(command)
        except CacheError as error:
            if not _rejected(error):
                raise
            self._rejected(command, error)
            return
        self._outcome(reply)

    def _apply_batch(self, planned: list[Command]) -> None:
        if not planned:
            return
        batch = self.cache.batch(chunk_size=min(200, len(planned)))
        for command in planned:
            batch.add(command)
        for result in batch.execute():
            if result.error is not None:
                self._rejected(result.command, result.error)
            else:
                self._outcome(result.reply)

    def _outcome(self, reply: Any) -> None:
        status, detail = as_text(reply[0]), as_text(reply[1])
        if status == "applied":
            self._count("applied")
            self._result("applied")
        else:
            self._count("dropped")
            self._result(f"dropped_{detail}")

    def _rejected(self, command: Command, error: CacheError) -> None:
        self._count("rejected")
        self._result("rejected")
        log.warning(
            "%s of cache %s: %s rejected: %s",
            self.resource,
            self.cache.name,
            command.subject,
            error,
        )

    def _count(self, name: str) -> None:
        with self._lock:  # a list counts from two threads (reading pages, applying them)
            setattr(self.counters, name, getattr(self.counters, name) + 1)

    def _result(self, result: str) -> None:
        with self._lock:
            self.counters.results[result] = self.counters.results.get(result, 0) + 1
        metrics.SYNC_EVENTS.labels(result=result, **self._labels).inc()

    # -- progress ---------------------------------------------------------------------------

    def _seen(self, version: str) -> None:
        self.version = version

    def _applied(self, version: str, force: bool = False) -> None:
        """Remember the newest resourceVersion applied (with everything before it), where the
        next watch resumes; write it to the cache's ``sync`` hash at most every
        ``progress_every`` seconds (``schedcache stats`` shows it with its age), through the
        store's retry policy. A progress write Redis does not take is logged and the feed goes
        on: the next one carries it."""
        self.version = max(self.version, version, key=_rv_order)
        self.applied = version
        self.counters.last_version = version
        now = time.time()
        if not force and now - self._progress_written < self.settings.progress_every:
            return
        self._progress_written = now
        written = self._written

        def write() -> bool:
            lost = progress_lost(self.cache, self.resource, self.name, written)
            created = record_progress(self.cache, self.resource, version, self.name, now)
            return lost or (bool(written) and created)

        try:
            lost = self.cache.store.retrying(write, f"sync progress of {self.resource}")
        except (redis.RedisError, OSError) as error:
            log.warning(
                "%s of cache %s: progress (resourceVersion %s) not written: %s",
                self.resource,
                self.cache.name,
                version,
                log_reason(error),
            )
            return
        self._written = version
        if lost:
            log.warning(
                "%s of cache %s: Redis lost writes (it no longer holds the progress, "
                "resourceVersion %s, this feeder wrote: an older RDB or AOF, a restore, a "
                "replica behind, a restart without persistence); relisting",
                self.resource,
                self.cache.name,
                written,
            )
            self._lost.set()
            self.close()  # wakes the watch: the next step relists

    def _write_progress_when_idle(self) -> None:
        """A quiet watch writes its progress again every ``progress_every``: what its last
        burst left unwritten, and the check that Redis still holds it (a quiet feed, the
        nodes' often, would otherwise not notice lost writes until its next change)."""
        if self.applied:
            self._applied(self.applied, force=True)

    def _relist_if_writes_lost(self) -> None:
        if self._lost.is_set():
            self._lost.clear()
            raise Gone("Redis lost writes this feeder applied")


# Pods a feed remembers as pending (their Binding lingers, batch_linger): ~100 bytes each.
MAX_PENDING_TRACKED = 200_000


class _Applier:
    """Applies a watch's commands in a thread of its own, as many per call as have arrived
    (one ``sc_batch`` for a burst, so a feeder's round trips, and its copies' cost to Redis,
    shrink under load), in the order they arrived. Commands put with ``linger`` (a Binding's
    confirmation: :meth:`ResourceFeed._lingers`) wait up to ``batch_linger`` from the first
    one's arrival for more (a confirmation alone costs Redis a call of its own: ~300,000
    instructions against ~245,000 in a batch); any other command ends the wait. A failure
    stops it; :meth:`check` raises it in the reading thread."""

    MAX_BATCH = 200

    def __init__(self, feed: ResourceFeed) -> None:
        self.feed = feed
        self.pending: list[tuple[Command | None, float, str]] = []
        self.lingering = 0  # how many of `pending`, from the first, may linger
        self.error: BaseException | None = None
        self.done = False
        self.ready = threading.Condition()
        self.thread = threading.Thread(
            target=self._run, name=f"schedcache-watch-{feed.resource}", daemon=True
        )
        self.thread.start()

    def put(
        self, command: Command | None, received: float, version: str, linger: bool = False
    ) -> None:
        """Apply ``command`` (None: nothing to apply) in order; then ``version`` is applied.
        ``linger``: it may wait for company (a bookmark, None, never ends a wait)."""
        with self.ready:
            first = not self.pending
            if (linger or command is None) and self.lingering == len(self.pending):
                self.lingering += 1
            self.pending.append((command, received, version))
            # The applier waits for a first command, or lingers while every pending one may
            # (until the linger's end, unless one that may not arrives or a batch is full):
            # a command that changes neither wait does not wake it (each wake is a thread
            # switch; under a linger, one a Binding).
            if first or self.lingering != len(self.pending) or len(self.pending) >= self.MAX_BATCH:
                self.ready.notify()

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def finish(self) -> None:
        with self.ready:
            self.done = True
            self.ready.notify()
        self.thread.join()

    def _run(self) -> None:
        seconds = metrics.SYNC_APPLY_SECONDS.labels(**self.feed._labels)
        while True:
            idle = False
            with self.ready:
                while not self.pending and not self.done and not idle:
                    # A quiet watch still writes (and checks) its progress every
                    # progress_every, so Redis coming back without it is noticed.
                    idle = not self.ready.wait(self.feed.settings.progress_every)
                if not self.pending and self.done:
                    return
                self._linger()
                taken, self.pending = (
                    self.pending[: self.MAX_BATCH],
                    self.pending[self.MAX_BATCH :],
                )
                # (What is left is a batch's tail: sent next, without a wait.)
                self.lingering = 0
            if not taken:
                self.feed._write_progress_when_idle()
                continue
            planned = [command for command, _, _ in taken if command is not None]
            try:
                if len(planned) == 1:
                    self.feed._apply_one(planned[0])
                elif planned:
                    self.feed._apply_batch(planned)
            except BaseException as error:  # raised again in the reading thread
                self.error = error
                with self.ready:
                    self.pending.clear()
                # Wake the reading thread now (a quiet watch may send nothing for minutes):
                # the watch ends, and the next one resumes from the newest version applied.
                self.feed.close()
                return
            self.feed._applied(taken[-1][2])
            now = time.monotonic()
            for command, received, _ in taken:
                if command is not None:
                    seconds.observe(now - received)

    def _linger(self) -> None:
        """Wait (holding ``ready``) while only lingering commands are pending, fewer than a
        batch, until ``batch_linger`` after the first one arrived."""
        linger = self.feed.settings.batch_linger
        if not linger or not self.pending:
            return
        until = self.pending[0][1] + linger
        while self.lingering == len(self.pending) < self.MAX_BATCH and not self.done:
            left = until - time.monotonic()
            if left <= 0:
                return
            self.ready.wait(left)


class Syncer:
    """Feeds nodes and pods of one API server into one cache until :meth:`stop`."""

    def __init__(
        self,
        cache: Cache,
        api: kube_client.CoreV1Api,
        settings: SyncSettings | None = None,
        name: str = "",
        stopping: threading.Event | None = None,
    ) -> None:
        """``stopping``: the event that stops it (a signal handler's; else its own)."""
        self.cache = cache
        self.stopping = stopping or threading.Event()
        settings = settings or SyncSettings()
        self.feeds = [
            ResourceFeed(cache, api, resource, settings, self.stopping, name)
            for resource in RESOURCES
            if settings.pod_groups or resource != "podgroups"
        ]
        #: PodDisruptionBudgets for preemption (docs/preemption.md): a feed of its own, as the
        #: nodes' and pods', that a cluster refusing the list (403/404) does not hold back.
        self.budgets = ResourceFeed(cache, api, BUDGETS, settings, self.stopping, name)
        #: Namespaces' labels (docs/constraints.md), as the budgets: a 403 holds nothing back.
        self.namespaces = ResourceFeed(cache, api, NAMESPACES, settings, self.stopping, name)
        self.threads: list[threading.Thread] = []

    def start(self) -> Syncer:
        for feed in (*self.feeds, self.budgets, self.namespaces):
            thread = threading.Thread(
                target=feed.run, name=f"schedcache-sync-{feed.resource}", daemon=True
            )
            thread.start()
            self.threads.append(thread)
        return self

    def list_once(self) -> None:
        """One relist of every resource, in this thread: the cache reconciled with the lists."""
        for feed in (*self.feeds, self.budgets, self.namespaces):
            feed.relist()
            feed.synced.set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Whether every resource finished its first list within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for feed in (*self.feeds, self.budgets, self.namespaces):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not feed.synced.wait(left):
                return False
        return True

    def stop(self, timeout: float = 1.0) -> None:
        """Stop every feed (open watches are closed at once) and wait for them, ``timeout``
        seconds in all: a feed still blocked then (a list page the API server is silent on)
        is a daemon thread and holds nothing that a stop must wait for (a partial list
        reconciles nothing)."""
        self.stopping.set()
        for feed in (*self.feeds, self.budgets, self.namespaces):
            feed.close()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def run(self, stop: Callable[[], bool] | None = None) -> None:
        """:meth:`start`, then wait until :meth:`stop` (or a signal handler calling it)."""
        self.start()
        while not self.stopping.wait(0.5):
            if stop is not None and stop():
                break
        self.stop()

    def __enter__(self) -> Syncer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def _identity(resource: str, obj: Mapping[str, Any]) -> str:
    """The cache's key for a listed object: a node's name, a pod's uid ("" when malformed)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return ""
    if resource == "podgroups":
        return f"{metadata.get('namespace') or 'default'}/{metadata.get('name', '')}"
    if resource == BUDGETS:
        try:
            return budget_key(obj)
        except ValidationError:
            return ""
    if resource == NAMESPACES:
        return str(metadata.get("name", ""))
    return str(metadata.get("name" if resource == "nodes" else "uid", ""))


def _background(name: str, fn: Callable[..., T], *args: Any) -> Future[T]:
    """``fn(*args)`` in a daemon thread: unlike a ThreadPoolExecutor's worker, a page read
    stalled on a silent API server does not hold the process at exit (SIGTERM exits at once)."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as error:  # handed to the caller's result()
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _timed_out(error: BaseException) -> bool:
    """Whether an API error is a request that timed out (urllib3 may wrap it in its retries).

    Not a refused or unresolvable connection: urllib3 makes ``NewConnectionError`` (and its
    ``NameResolutionError``) a ``ConnectTimeoutError`` for old callers, but nothing waited
    there, so it is no list page that sent nothing."""
    timeouts = (urllib3.exceptions.TimeoutError, TimeoutError)
    refused = urllib3.exceptions.NewConnectionError
    return any(
        isinstance(cause, timeouts) and not isinstance(cause, refused)
        for cause in (error, getattr(error, "reason", None))
    )


def open_watch(
    call: Callable[..., Any], version: str, timeout: float, read_timeout: float | None = None
) -> Any:
    """The response of a watch (``call``: a list call of the client) from ``version``, with
    bookmarks, asking for ``timeout`` seconds jittered down to 80 % (as kube's reflector, so
    that many watchers do not all come back at once); a read waits ``read_timeout`` seconds at
    most (default: the watch's time and a minute). Raises :class:`Gone` on 410."""
    seconds = max(1, round(timeout * random.uniform(0.8, 1.0)))
    try:
        return call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=seconds,
            _request_timeout=(10, seconds + 60 if read_timeout is None else read_timeout),
        )
    except ApiException as error:
        if error.status == 410:
            raise Gone(f"watch from {version} answered 410") from None
        raise


def response_json(response: Any) -> dict[str, Any]:
    """A list or get answer's JSON object (the connection released either way)."""
    try:
        value = json.loads(response.data)
    finally:
        response.release_conn()
    if not isinstance(value, dict):
        raise ValueError(f"the API server answered {type(value).__name__}, not an object")
    return value


def watch_lines(response: Any) -> Iterator[bytes]:
    """The lines of a chunked watch response as they arrive."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def _rejected(error: CacheError) -> bool:
    """A command refused on its own (its object is wrong), as opposed to the cache being away."""
    return not isinstance(error, RetriesExhausted)


def _rv_order(version: str) -> tuple[int, str]:
    """resourceVersions compare as numbers (the cache orders them so; "" first)."""
    return (len(version), version)
