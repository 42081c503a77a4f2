"""``schedcache extender``: a kube-scheduler extender on the shared cache, until SIGTERM."""

from __future__ import annotations

import functools
import ipaddress
import logging
from typing import TYPE_CHECKING

import click

from schedcache.cli.kube import kube_api, kube_options, ttl_option
from schedcache.cli.lifecycle import (
    Interrupted,
    StopEvent,
    exit_now,
    give_back_lease,
    ignore_stop_signals,
    ready_cache,
    run_until_stopped,
    stop_on_signals,
)
from schedcache.cli.params import F, Name, SchedulerName, Seconds
from schedcache.cli.serve import metrics_address_option, serve_metrics
from schedcache.extender.limits import Limits
from schedcache.ops.leases import default_replica

API_TIMEOUT = 10.0  # seconds per API request of a bind (the Binding, the reads around it)
# The Binding and the read that settles an unknown outcome must fit in the bind timeout.
BIND_TIMEOUT_MIN = 2 * API_TIMEOUT + 1

if TYPE_CHECKING:
    from schedcache.cache import Cache
    from schedcache.cli.settings import Settings
    from schedcache.scheduler.bindings import BindingProcess

EXTENDER_MISSING = (
    "schedcache extender needs aiohttp and the Kubernetes client: pip install "
    "'schedcache[extender]'"
)
# (the scheduler's own: it named the extender, found in review)
SCHEDULER_MISSING = (
    "schedcache scheduler needs the Kubernetes client: pip install 'schedcache[extender]'"
)

log = logging.getLogger(__name__)


# Newer click types ParamType by what convert() returns; older releases cannot subscript it.
if TYPE_CHECKING:
    AddressParam = click.ParamType[tuple[str, int]]
else:
    AddressParam = click.ParamType


class Listen(AddressParam):
    """``HOST:PORT`` (``:PORT`` listens on every address)."""

    name = "host:port"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int]:
        if isinstance(value, tuple):
            return (str(value[0]), int(value[1]))
        host, _, port = str(value).rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            self.fail(f"{value!r} is not HOST:PORT with a port from 1 to 65535", param, ctx)
        return (host.strip("[]") or "0.0.0.0", int(port))


def _tls_options(command: F) -> F:
    """kube-apiserver's flag names for serving TLS and checking client certificates."""
    for name, text in reversed(
        (
            ("--tls-cert-file", "Serve HTTPS with this certificate (PEM; reloaded on change)."),
            ("--tls-private-key-file", "The certificate's private key (PEM)."),
            ("--client-ca-file", "Require client certificates signed by this CA (PEM)."),
        )
    ):
        command = click.option(name, type=click.Path(dir_okay=False), default=None, help=text)(
            command
        )
    return command


@click.command("extender")
@click.option(
    "--listen",
    type=Listen(),
    default="127.0.0.1:8888",
    show_default=True,
    help="Address to serve on, HOST:PORT.",
)
@click.option(
    "--url-prefix",
    default="",
    help="Path of the urlPrefix in the KubeSchedulerConfiguration (e.g. /scheduler).",
)
@_tls_options
@click.option(
    "--insecure-allow-unauthenticated",
    is_flag=True,
    help="Listen beyond loopback without mutual TLS: anyone who reaches the port may bind pods.",
)
@kube_options
@click.option(
    "--no-api",
    is_flag=True,
    help="Bind only claims in the cache, without a Binding (tests, dry runs).",
)
@click.option(
    "--scheduler-name",
    "scheduler_names",
    type=SchedulerName(),
    metavar="NAME",
    multiple=True,
    help="Bind only pods whose spec.schedulerName is this (repeatable) [default: every pod].",
)
@click.option(
    "--replica",
    type=Name(),
    default=None,
    help="Name in events and the lease of claims [default: extender-<pod or host>-<pid>].",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(1024, 1024 * 1024 * 1024),
    default=Limits.max_body_bytes,
    show_default=True,
    help="Largest filter/prioritize body (docs/extender.md says how it is sized).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 100_000),
    default=Limits.max_connections,
    show_default=True,
    help="Open connections at most; a new one evicts the oldest without a request.",
)
@click.option(
    "--read-timeout",
    type=Seconds(0.1, 3600),
    default=Limits.header_timeout,
    show_default=True,
    help="Seconds a request's headers, and then its body, may take to arrive.",
)
@click.option(
    "--drain-timeout",
    type=Seconds(maximum=3600, open_min=True),
    default=Limits.drain_timeout,
    show_default=True,
    help="Seconds a verb already running at SIGTERM (a bind's Binding) may take to finish "
    "before it is answered 503 (outcome unknown); requests still waiting are answered 503 at "
    "once.",
)
@click.option(
    "--bind-timeout",
    type=Seconds(BIND_TIMEOUT_MIN, 3600),
    default=60.0,
    show_default=True,
    help="Seconds a claim may wait for its Binding; then the expiry worker releases it.",
)
@click.option(
    "--bind-pod-from-filter",
    is_flag=True,
    help="A bind claims the pod this extender's filter decoded (same uid) without reading it "
    "from the API server: trusts /filter's callers as kube-scheduler (docs/security.md).",
)
@click.option(
    "--no-pending-watch",
    is_flag=True,
    help="Do not list and watch the unscheduled pods: every bind reads its pod from the API "
    "server (a GET) instead of the watch's copy (docs/extender.md).",
)
@ttl_option
@click.pass_obj
def extender(
    settings: Settings,
    listen: tuple[str, int],
    url_prefix: str,
    tls_cert_file: str | None,
    tls_private_key_file: str | None,
    client_ca_file: str | None,
    insecure_allow_unauthenticated: bool,
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    no_api: bool,
    scheduler_names: tuple[str, ...],
    replica: str | None,
    max_body_bytes: int,
    max_connections: int,
    read_timeout: float,
    drain_timeout: float,
    bind_timeout: float,
    bind_pod_from_filter: bool,
    no_pending_watch: bool,
    ttl: float,
) -> None:
    """Serve kube-scheduler's extender protocol (filter, prioritize, bind) on the cache, so
    several active kube-scheduler replicas share it: a bind is a fit-checked claim, never an
    overfilled node. Configuration: docs/extender.md; security: docs/security.md."""
    settings.refuse_embedded("schedcache extender")
    try:
        from schedcache.extender.guard import bind_socket
        from schedcache.extender.pending import PendingPods
        from schedcache.extender.server import event_loop_name, serve
        from schedcache.extender.service import Binder, Extender
        from schedcache.extender.tls import ReloadingContext, TlsFiles
    except ImportError:
        raise click.ClickException(EXTENDER_MISSING) from None
    host, port = listen
    tls = (tls_cert_file, tls_private_key_file, client_ca_file)
    if any(tls) and not all(tls):
        raise click.ClickException(
            "mutual TLS needs all of --tls-cert-file, --tls-private-key-file and --client-ca-file"
        )
    if not all(tls) and not _loopback(host) and not insecure_allow_unauthenticated:
        raise click.ClickException(
            f"refusing to listen on {host}:{port} without authentication: give "
            "--tls-cert-file, --tls-private-key-file and --client-ca-file (mutual TLS, as "
            "kube-scheduler's tlsConfig), or --insecure-allow-unauthenticated"
        )
    ssl_context = None
    if tls_cert_file and tls_private_key_file and client_ca_file:
        try:
            ssl_context = ReloadingContext(
                TlsFiles(tls_cert_file, tls_private_key_file, client_ca_file)
            ).server
        except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
            raise click.ClickException(f"the TLS files cannot be used: {error}") from None
    binder: Binder | None = None
    pending: PendingPods | None = None
    if not no_api:
        from schedcache.scheduler.binder import ApiBinder

        api = kube_api(kubeconfig, context, in_cluster, EXTENDER_MISSING, " (or --no-api)")
        binder = ApiBinder(api, timeout=API_TIMEOUT)
        if not no_pending_watch:
            pending = PendingPods(api, frozenset(scheduler_names))
    limits = Limits(
        max_body_bytes=max_body_bytes,
        max_connections=max_connections,
        header_timeout=read_timeout,
        body_timeout=read_timeout,
        drain_timeout=drain_timeout,
    )
    try:  # before anything is written or printed: a port in use fails here
        sock = bind_socket(host, port)
    except OSError as error:
        raise click.ClickException(f"cannot listen on {host}:{port}: {error}") from None
    stop = StopEvent()
    stop_on_signals(stop)  # until the server's own handlers: waiting for Redis at start
    cache = ready_cache(
        settings,
        stop,
        "extender",
        _hold_lease,
        replica=replica or default_replica("extender"),
        ttl=ttl,
    )
    if cache is None:
        click.echo("stopped before Redis answered", err=True)
        ignore_stop_signals()  # stopped: a repeated signal changes nothing (exit 0)
        return
    served: Extender | None = None
    try:
        # A signal before the server's own handlers are in place ends the setup at once.
        stop_on_signals(stop, interrupt=True)
        if stop.is_set():
            raise Interrupted
        bound_port = sock.getsockname()[1]
        scheme = "https" if ssl_context else "http"
        click.echo(
            f"extender for cache {cache.name} (replica {cache.replica}) on "
            f"{scheme}://{host}:{bound_port}{url_prefix} "
            f"({event_loop_name(tls=ssl_context is not None)} event loop)",
            err=True,
        )
        if pending is not None:
            pending.start()  # binds read their pod from the API server until it has listed
        served = Extender(
            cache,
            binder,
            scheduler_names=frozenset(scheduler_names),
            bind_timeout=bind_timeout,
            bind_pod_from_filter=bind_pod_from_filter,
            pending=pending,
        )
        # From here a signal only sets ``stop``: serve() takes over from a handler that
        # raises nothing (one that raised while its loop ran was logged as a traceback).
        stop_on_signals(stop)
        serve(served, sock, url_prefix, limits, ssl_context, stopped=stop)
    except Interrupted:
        click.echo("stopped", err=True)
    finally:
        stop_on_signals(stop)  # a signal repeated while stopping: nothing more to stop
        if served is not None:
            served.forgetter.stop()
        if pending is not None:
            pending.close()
        give_back_lease(cache)  # a restart with the same --replica is not refused
        ignore_stop_signals()  # stopped: a repeated signal changes nothing (exit 0)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _binding_process(
    settings: Settings,
    cache: Cache,
    kube: tuple[str | None, str | None, bool],
    workers: int,
) -> BindingProcess:
    """``--binding-process``: the Bindings' process, its cache opened with these settings as
    the replica's (same name, replica, ttl), its API client from the same kubeconfig."""
    from schedcache.feed.sync import api_client
    from schedcache.scheduler.bindings import BindingProcess

    open_cache = functools.partial(settings.cache, replica=cache.replica, ttl=cache.ttl)
    try:
        return BindingProcess(
            open_cache, functools.partial(api_client, *kube), cache.replica, workers
        )
    except RuntimeError as error:  # it could not reach Redis or read the kubeconfig
        raise click.ClickException(str(error)) from None


def _hold_lease(cache: Cache) -> None:
    """Take the replica's lease now: refused while another live process holds the name."""
    lease = cache.lease
    if lease is None:
        return
    if not lease.take():
        raise click.ClickException(
            f"replica {cache.replica!r} is in use: another live process holds its lease in "
            f"cache {cache.name}; give each process its own --replica (or leave the default)"
        )
    cache.hold_lease()


@click.command("scheduler")
@click.option(
    "--scheduler-name",
    type=SchedulerName(),
    metavar="NAME",
    required=True,
    help="Schedule the pending pods whose spec.schedulerName is this.",
)
@kube_options
@click.option(
    "--replica",
    type=Name(),
    default=None,
    help="Name in events and the claims' lease [default: scheduler-<pod or host>-<pid>].",
)
@ttl_option
@click.option(
    "--pod-initial-backoff",
    type=Seconds(open_min=True, maximum=3600.0),
    default=1.0,
    show_default=True,
    help="First wait before an unschedulable pod is tried again (upstream's "
    "podInitialBackoffSeconds), s; doubles per failure.",
)
@click.option(
    "--pod-max-backoff",
    type=Seconds(open_min=True, maximum=3600.0),
    default=10.0,
    show_default=True,
    help="Longest wait before an unschedulable pod is tried again (upstream's "
    "podMaxBackoffSeconds), s. A pod no node could take waits parked until a cluster change "
    "could help, then for the rest of its back-off.",
)
@click.option(
    "--lease",
    type=Seconds(open_min=True, maximum=3600.0),
    default=15.0,
    show_default=True,
    help="How long a pod popped from the queue is this replica's alone, s (a dead replica's "
    "pods come back after it).",
)
@click.option(
    "--percentage-of-nodes-to-score",
    type=click.IntRange(0, 100),
    default=0,
    show_default=True,
    help="Upstream's percentageOfNodesToScore: feasible nodes searched per pod, in percent "
    "of the nodes (0: adaptive, 50 - nodes/125, at least 5 % and 100 nodes).",
)
@click.option(
    "--binding-workers",
    type=click.IntRange(1, 1024),
    default=16,
    show_default=True,
    help="Bindings in flight at once (the scheduling loop goes on while they wait).",
)
@click.option(
    "--pop-batch",
    type=click.IntRange(1, 100),
    default=32,  # the loop's POP_BATCH (tests/test_reference_batches.py keeps them one)
    show_default=True,
    help="Pods popped from the queue a call at most: starts at 1 and doubles while pops come "
    "back full; a pod of higher priority queued meanwhile waits behind the batch's pods "
    "not yet attempted, at most this many.",
)
@click.option(
    "--batch-claims/--no-batch-claims",
    default=True,
    show_default=True,
    help="Place the pods of one pop on one snapshot read and send their claims in one call "
    "(pods with host ports, scalar resources, inter-pod rules, spread constraints or "
    "preferred affinity, and pod groups' members, are attempted one by one either way).",
)
@click.option(
    "--binding-process/--no-binding-process",
    default=False,
    show_default=True,
    help="Post the Bindings from a process of its own (its own Redis connection and API "
    "client, with these settings): the scheduling loop keeps its core (docs/performance.md).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve /metrics here (preemption attempts and victims, fit conflicts, commands).",
)
@metrics_address_option("--metrics-address")
@click.pass_obj
def scheduler(
    settings: Settings,
    scheduler_name: str,
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    replica: str | None,
    ttl: float,
    pod_initial_backoff: float,
    pod_max_backoff: float,
    lease: float,
    percentage_of_nodes_to_score: int,
    binding_workers: int,
    pop_batch: int,
    batch_claims: bool,
    binding_process: bool,
    metrics_port: int | None,
    metrics_address: str,
) -> None:
    """A reference scheduler replica in Python on the cache: pops the pending pods with
    --scheduler-name from the cache's scheduling queue (fed by `schedcache sync`, shared by
    every replica: each pod is tried by one at a time), filters and scores on its snapshot,
    claims with check_fit, binds through the API server. Run N side by side, and at least one
    `schedcache sync` (it queues the pending pods and confirms the bindings). Runs until
    SIGTERM or Ctrl-C."""
    if pod_max_backoff < pod_initial_backoff:
        raise click.BadParameter(
            f"{pod_max_backoff:g} is below --pod-initial-backoff {pod_initial_backoff:g}",
            param_hint="--pod-max-backoff",
        )
    settings.refuse_embedded("schedcache scheduler")
    if binding_process and not settings.is_shared():
        raise click.UsageError(
            "--binding-process needs --redis: the binding process would open an embedded "
            "Redis of its own, not this one",
        )
    stop = StopEvent()
    # Before the kubeconfig and the kubernetes client's import: a signal there was a
    # KeyboardInterrupt (SIGINT: "Aborted!", exit 1) or the default action (SIGTERM).
    stop_on_signals(stop)
    api = kube_api(kubeconfig, context, in_cluster, SCHEDULER_MISSING)
    try:
        from schedcache.scheduler.loop import STOP_WAIT, ReferenceScheduler
    except ImportError:
        raise click.ClickException(SCHEDULER_MISSING) from None
    cache = ready_cache(
        settings,
        stop,
        f"scheduler {scheduler_name}",
        _hold_lease,
        replica=replica or default_replica("scheduler"),
        ttl=ttl,
    )
    if cache is None:
        click.echo("stopped before Redis answered", err=True)
        exit_now(0)
    bindings = None
    if binding_process:
        bindings = _binding_process(
            settings, cache, (kubeconfig, context, in_cluster), binding_workers
        )
    loop = ReferenceScheduler(
        cache,
        api,
        scheduler_name,
        retry_delay=pod_initial_backoff,
        max_backoff=pod_max_backoff,
        percentage=percentage_of_nodes_to_score,
        binding_workers=binding_workers,
        lease=lease,
        pop_batch=pop_batch,
        batch_claims=batch_claims,
        bindings=bindings,
    )
    loop.stop = stop
    if metrics_port is not None:
        serve_metrics(cache, metrics_port, metrics_address)
    click.echo(f"scheduling pods of {scheduler_name!r} on cache {cache.name}", err=True)
    # The Bindings' STOP_WAIT and 2 s for the attempt under way: a loop caught in a hung
    # Redis's retries is left behind (exit_now below), its popped pods to their lease.
    bound = STOP_WAIT + 2.0
    if not run_until_stopped(lambda: loop.run(stop_wait=STOP_WAIT), stop, bound):
        log.warning("the scheduling loop did not stop within %g s (Redis does not answer)", bound)
    give_back_lease(cache)  # a restart with the same --replica is not refused
    click.echo(
        f"stopped; {loop.bound} bound, {loop.conflicts} conflicts, "
        f"{loop.unschedulable} unschedulable attempts",
        err=True,
    )
    exit_now(0)  # a Binding still in flight (abandoned after STOP_WAIT) holds no exit
