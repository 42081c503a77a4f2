"""``schedcache sync``: feed the cache from a live cluster's API server until SIGTERM or Ctrl-C."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from schedcache.cli.kube import kube_api, kube_options
from schedcache.cli.lifecycle import StopEvent, exit_now, ready_cache, stop_on_signals
from schedcache.cli.params import Name, Seconds
from schedcache.cli.serve import metrics_address_option, serve_metrics
from schedcache.cli.text import one_line, plural

if TYPE_CHECKING:
    from schedcache.cli.settings import Settings
    from schedcache.feed.sync import Syncer

KUBE_MISSING = (
    "schedcache sync needs the Kubernetes client: pip install 'schedcache[kube]' "
    "(the official `kubernetes` package)"
)


@click.command("sync")
@kube_options
@click.option(
    "--page-size",
    type=click.IntRange(1, 10_000),
    default=500,
    show_default=True,
    help="Objects per list page (limit/continue) and per batch of commands.",
)
@click.option(
    "--watch-timeout",
    type=click.IntRange(1, 3600),
    default=300,
    show_default=True,
    help="Seconds a watch runs before it is renewed from its last resourceVersion.",
)
@click.option(
    "--max-backoff",
    type=Seconds(open_min=True, maximum=3600.0),
    default=30.0,
    show_default=True,
    help="Longest wait between attempts while the API server or Redis is away, s.",
)
@click.option(
    "--list-timeout",
    type=Seconds(open_min=True, maximum=3600.0),
    default=30.0,
    show_default=True,
    help="A list page that sends nothing for this long is a failed request (logged, counted, "
    "retried after a back-off), s.",
)
@click.option(
    "--batch-linger",
    type=Seconds(maximum=1.0),
    default=0.01,
    show_default=True,
    help="How long the Binding of a pod this feed saw pending (a claim's confirmation) may "
    "wait for more to share one call to Redis, s (0: none).",
)
@click.option(
    "--replica", type=Name(), default="sync", show_default=True, help="Feeder name in events."
)
@click.option("--once", is_flag=True, help="List, reconcile the cache with the lists, and exit.")
@click.option(
    "--queue-for",
    "queue_for",
    multiple=True,
    metavar="SCHEDULER",
    help="Queue only the pending pods whose spec.schedulerName is this (repeatable) "
    "[default: every scheduler name].",
)
@click.option(
    "--no-queue",
    is_flag=True,
    help="Queue no pending pods: list and watch assigned pods only (a cache no "
    "`schedcache scheduler` pops from, e.g. behind kube-scheduler's extender).",
)
@click.option(
    "--no-pod-groups",
    is_flag=True,
    help="Do not list and watch PodGroups (scheduling.x-k8s.io/v1alpha1; docs/gangs.md).",
)
@click.option(
    "--metrics-port", type=click.IntRange(0, 65535), default=None, help="Serve /metrics here."
)
@metrics_address_option("--metrics-address")
@click.pass_obj
def sync(
    settings: Settings,
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    page_size: int,
    watch_timeout: int,
    max_backoff: float,
    list_timeout: float,
    batch_linger: float,
    replica: str,
    once: bool,
    queue_for: tuple[str, ...],
    no_queue: bool,
    no_pod_groups: bool,
    metrics_port: int | None,
    metrics_address: str,
) -> None:
    """Keep the cache in step with a cluster, as kube-scheduler's informers: list Nodes,
    non-terminated Pods and PodGroups, then watch them (bookmarks; 410 Gone relists and removes what
    vanished): assigned pods into the cache, pending ones into the scheduling queue that
    `schedcache scheduler` replicas pop. Any number of feeders may sync one cache: each
    object's changes apply in resourceVersion order, once. Runs until SIGTERM or Ctrl-C (exit
    0). With --once: exit 1 when any object was invalid (the valid ones are applied), as `load`
    does."""
    if no_queue and queue_for:
        raise click.UsageError("--no-queue and --queue-for exclude each other")
    stop = StopEvent()
    if not once:  # before the kubernetes client's import and the kubeconfig: a signal there
        stop_on_signals(stop)  # was a KeyboardInterrupt (SIGINT: "Aborted!", exit 1)
    try:
        from schedcache.feed import sync as feed
    except ImportError:
        raise click.ClickException(KUBE_MISSING) from None
    try:
        settings_ = feed.SyncSettings(
            page_size=page_size,
            watch_timeout=watch_timeout,
            max_backoff=max_backoff,
            list_timeout=list_timeout,
            batch_linger=batch_linger,
            queue_for=frozenset() if no_queue else frozenset(queue_for) or None,
            pod_groups=not no_pod_groups,
        )
    except ValueError as error:  # a --queue-for that is no scheduler name
        raise click.BadParameter(str(error), param_hint="--queue-for") from None
    api = kube_api(kubeconfig, context, in_cluster, KUBE_MISSING)
    if not settings.is_shared():
        click.echo(
            "note: the embedded cache lives in this process only; give --redis to feed a "
            "cache that schedulers share",
            err=True,
        )
    if once:
        _list_once(feed.Syncer(settings.cache(replica=replica), api, settings_, name=replica), feed)
        return
    cache = ready_cache(settings, stop, f"sync of cache {settings.cache_name}", replica=replica)
    if cache is None:
        click.echo("stopped before Redis answered", err=True)
        exit_now(0)
    syncer = feed.Syncer(cache, api, settings_, name=replica, stopping=stop)
    if metrics_port is not None:
        serve_metrics(cache, metrics_port, metrics_address)
    click.echo(f"syncing cache {cache.name} from {api.api_client.configuration.host}", err=True)
    syncer.run()
    click.echo(f"stopped; {_summary(syncer)}", err=True)
    # A list page may still wait on a silent API server, or be half sent, in a daemon thread
    # that holds nothing (a stopped list reconciles nothing): finalising the interpreter under
    # it aborts (exit 134) or takes another second. SIGTERM must end in 2 s, with status 0.
    exit_now(0)


def _list_once(syncer: Syncer, feed: Any) -> None:
    try:
        syncer.list_once()
    except feed.API_ERRORS as error:
        raise click.ClickException(f"the API server failed: {one_line(error)}") from None
    click.echo(_summary(syncer))
    skipped = sum(feed.counters.invalid + feed.counters.rejected for feed in syncer.feeds)
    if skipped:  # one exit-status rule with `load`: the valid objects applied, exit 1
        raise click.ClickException(
            f"{plural(skipped, 'object')} invalid or rejected (logged above); the rest was applied"
        )


def _summary(syncer: Syncer) -> str:
    parts = []
    for resource in syncer.feeds:
        c = resource.counters
        parts.append(
            f"{resource.resource}: {c.applied} applied, {c.dropped} dropped, {c.invalid} invalid, "
            f"{c.rejected} rejected, {c.truncated} truncated, {c.relists} lists, "
            f"{c.list_timeouts} list timeouts, rv {c.last_version or '-'}"
        )
    return "; ".join(parts)
