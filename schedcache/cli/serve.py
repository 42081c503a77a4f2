"""``schedcache worker expiry|compact`` and ``schedcache metrics``: the long-running commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click
from prometheus_client import REGISTRY, start_http_server

from schedcache.cache import Cache
from schedcache.cli.lifecycle import ignore_stop_signals, serve_until_stopped
from schedcache.cli.params import Duration, F, Name, Seconds
from schedcache.cli.text import one_line, plural
from schedcache.history.checkpoints import MAX_KEEP_EVENTS
from schedcache.history.retention import retain, run_retention
from schedcache.ops.expiry import MAX_BATCH, ExpiryWorker
from schedcache.ops.leases import default_replica
from schedcache.store.metrics import CacheCollector

if TYPE_CHECKING:
    from schedcache.cli.settings import Settings


# /metrics names caches, their sizes and scheduler names and asks no credentials: loopback
# unless a wider address is given (docs/operations.md: the kube-rbac-proxy way).
LOOPBACK = "127.0.0.1"
ADDRESS_HELP = (
    "Address /metrics listens on: loopback by default; give 0.0.0.0 (or the pod's IP) to let "
    "others scrape it, unauthenticated (docs/operations.md#metrics-beyond-loopback)."
)


def metrics_address_option(*names: str) -> Callable[[F], F]:
    """The ``--metrics-address``/``--address`` option, loopback by default."""
    return click.option(*names, default=LOOPBACK, show_default=True, help=ADDRESS_HELP)


def serve_metrics(cache: Cache, port: int, address: str) -> None:
    """Serve /metrics (library counters plus this cache's sizes) in a background thread; one
    ``Error:`` line naming the address when it cannot listen there (a port in use, an address
    that does not resolve, or that is no host name at all: idna's UnicodeError, a ValueError).
    The cache's collector is registered only once the server runs: a failed start leaves
    nothing behind (found in review: registered first, it was left on a UnicodeError, and the
    next start in the process failed as a duplicate)."""
    try:
        start_http_server(port, addr=address)
    except (OSError, ValueError) as error:
        reason = (error.strerror if isinstance(error, OSError) else None) or one_line(error)
        raise click.ClickException(
            f"cannot serve /metrics on {host_port(address, port)}: {reason}"
        ) from None
    REGISTRY.register(CacheCollector(cache))


def host_port(address: str, port: int) -> str:
    """``address:port`` as a URL writes it: an IPv6 address in brackets (``[::1]:9108``)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


@click.group()
def worker() -> None:
    """Long-running workers."""


@worker.command("expiry")
@click.option(
    "--interval",
    type=Seconds(open_min=True),
    default=1.0,
    show_default=True,
    help="Longest sleep between rounds, s.",
)
@click.option(
    "--batch",
    type=click.IntRange(1, MAX_BATCH),
    default=500,
    show_default=True,
    help="Pods expired per Lua call.",
)
@click.option(
    "--replica",
    type=Name(),
    default=None,
    help="Name in events [default: expiry-worker-<pod or host>-<pid>].",
)
@click.option("--once", is_flag=True, help="Run one round and exit.")
@click.option(
    "--metrics-port", type=click.IntRange(0, 65535), default=None, help="Serve /metrics here."
)
@metrics_address_option("--metrics-address")
@click.pass_obj
def worker_expiry(
    settings: Settings,
    interval: float,
    batch: int,
    replica: str | None,
    once: bool,
    metrics_port: int | None,
    metrics_address: str,
) -> None:
    """Expire assumed pods whose binding finished and whose deadline passed (Redis clock)."""
    settings.refuse_embedded("schedcache worker expiry", once)
    name = replica or default_replica("expiry-worker")
    if once:
        once_cache = settings.cache(replica=name)
        settings.refuse_evicting(once_cache)
        expiry = ExpiryWorker(once_cache, interval=interval, batch=batch)
        click.echo(f"expired {plural(len(expiry.run_once()), 'pod')}")
        return
    started = serve_until_stopped(settings, "expiry worker", replica=name)
    if started is None:
        return
    cache, stop = started
    expiry = ExpiryWorker(cache, interval=interval, batch=batch)
    expiry.stopping = stop
    if metrics_port is not None:
        serve_metrics(cache, metrics_port, metrics_address)
    expiry.run()
    ignore_stop_signals()  # stopped: a repeated signal changes nothing (exit 0)


@worker.command("compact")
@click.option(
    "--keep",
    type=Duration(open_min=True, maximum=10 * 365 * 86400.0),
    default="1h",
    show_default=True,
    help="History kept in the stream: seconds or 90s/30m/1h/2d.",
)
@click.option(
    "--keep-events",
    type=click.IntRange(0, MAX_KEEP_EVENTS),
    default=0,
    show_default=True,
    help="Keep at least this many newest events.",
)
@click.option(
    "--interval",
    type=Duration(open_min=True),
    default="60",
    show_default=True,
    help="Seconds between rounds.",
)
@click.option("--once", is_flag=True, help="Run one round and exit.")
@click.pass_obj
def worker_compact(
    settings: Settings, keep: float, keep_events: int, interval: float, once: bool
) -> None:
    """Keep the stream bounded: checkpoint and trim the events older than --keep, every
    --interval, until SIGTERM or Ctrl-C. Any number may run on one cache (a lease makes one
    round at a time do the work)."""
    settings.refuse_embedded("schedcache worker compact", once)
    if once:
        once_cache = settings.cache()
        settings.refuse_evicting(once_cache)
        done = retain(once_cache, keep, keep_events)
        click.echo(
            f"removed {plural(done.removed, 'event')}; "
            f"stream {plural(done.stream_length, 'event')}; "
            f"checkpoint {done.checkpoint or '-'}"
            if done.ran
            else "another worker holds the retention lease: nothing done"
        )
        return
    started = serve_until_stopped(settings, "compaction worker")
    if started is None:
        return
    cache, stop = started
    failed = run_retention(cache, keep, interval, stop, keep_events=keep_events)
    ignore_stop_signals()  # stopped: a repeated signal changes nothing (exit 0)
    click.echo(f"stopped; {failed} failed rounds", err=True)


@click.command("metrics")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=9108, show_default=True, help="Port."
)
@metrics_address_option("--address")
@click.pass_obj
def metrics_command(settings: Settings, port: int, address: str) -> None:
    """Serve Prometheus metrics of the cache on /metrics until SIGTERM or Ctrl-C."""
    settings.refuse_embedded("schedcache metrics")
    started = serve_until_stopped(settings, "metrics")
    if started is None:
        return
    cache, stop = started
    serve_metrics(cache, port, address)
    where = host_port(address, port)
    click.echo(f"serving http://{where}/metrics for cache {cache.name}", err=True)
    stop.wait()
    ignore_stop_signals()  # stopped: a repeated signal changes nothing (exit 0)
