"""The ``schedcache`` command line.

Every command takes ``--redis URL`` (default: ``SCHEDCACHE_REDIS_URL``, else an embedded
in-process fakeredis) and ``--cache NAME``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

import click
import redis
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from schedcache import logs
from schedcache.cache import Cache
from schedcache.connection import EMBEDDED, ENV_URL, ConnectionFailed, connect, describe
from schedcache.demo import DemoReport, run_demo
from schedcache.errors import CacheError, ValidationError
from schedcache.library import SCHEMA_VERSION, command_names, ensure_loaded
from schedcache.loader import entries, load_documents, parse_documents
from schedcache.retry import DEFAULT_RETRY, NO_RETRY
from schedcache.routing import primaries
from schedcache.simulation import MODES, SimulationReport, run_replicas

console = Console()


@dataclass
class Settings:
    """The global options: where Redis is and how patiently to talk to it."""

    url: str | None
    cache_name: str
    timeout: float = 5.0
    retry_for: float = DEFAULT_RETRY.within
    wait_replicas: int = 0
    wait_timeout: float = 1.0

    def is_shared(self) -> bool:
        """A real Redis that other processes can reach (not the embedded default)."""
        return bool(self.url) and self.url != EMBEDDED

    def client(self) -> redis.Redis:
        try:
            return connect(self.url, timeout=self.timeout)
        except ConnectionFailed as error:
            raise click.ClickException(str(error)) from None

    def cache(self, client: redis.Redis | None = None, **options: Any) -> Cache:
        """The named cache with these settings (``options``: ttl, replica, ...)."""
        retry = replace(DEFAULT_RETRY, within=self.retry_for) if self.retry_for else NO_RETRY
        try:
            return Cache(
                client or self.client(),
                self.cache_name,
                retry=retry,
                wait_replicas=self.wait_replicas,
                wait_timeout=self.wait_timeout,
                **options,
            )
        except ValidationError as error:
            raise click.BadParameter(str(error)) from None


@click.group()
@click.option(
    "--redis",
    "url",
    envvar=ENV_URL,
    default=None,
    metavar="URL",
    help="Redis URL (redis://, rediss://, unix://, redis+sentinel://, redis+cluster://; "
    "see docs/deployment.md); default: embedded fakeredis.",
)
@click.option("--cache", "cache_name", default="default", show_default=True, help="Cache name.")
@click.option(
    "--timeout",
    default=5.0,
    show_default=True,
    envvar="SCHEDCACHE_TIMEOUT",
    help="Socket timeout for each Redis call, seconds.",
)
@click.option(
    "--retry-for",
    default=DEFAULT_RETRY.within,
    show_default=True,
    envvar="SCHEDCACHE_RETRY_FOR",
    help="Keep resending a command while Redis does not answer for this many seconds "
    "(exactly once: resent commands are never applied twice); 0 = no retries.",
)
@click.option(
    "--wait-replicas",
    default=0,
    show_default=True,
    envvar="SCHEDCACHE_WAIT_REPLICAS",
    help="Answer a command only once this many replicas have it (WAIT).",
)
@click.option(
    "--wait-timeout",
    default=1.0,
    show_default=True,
    help="Longest wait for --wait-replicas, seconds.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--log-format",
    default="kv",
    show_default=True,
    type=click.Choice(sorted(logs.FORMATTERS)),
    help="Log lines on stderr as key=value pairs or JSON.",
)
@click.pass_context
def main(
    ctx: click.Context,
    url: str | None,
    cache_name: str,
    timeout: float,
    retry_for: float,
    wait_replicas: int,
    wait_timeout: float,
    log_level: str,
    log_format: str,
) -> None:
    """kube-scheduler's cache on Redis, shared by scheduler replicas."""
    logs.configure(log_level, log_format)
    if timeout <= 0 or retry_for < 0 or wait_replicas < 0 or wait_timeout <= 0:
        raise click.BadParameter(
            "--timeout and --wait-timeout must be > 0, --retry-for and --wait-replicas >= 0"
        )
    ctx.obj = Settings(url, cache_name, timeout, retry_for, wait_replicas, wait_timeout)


@main.command()
@click.option("--nodes", default=6, show_default=True, help="Nodes in the simulated cluster.")
@click.option("--pods", default=40, show_default=True, help="Pods to schedule.")
@click.option("--replicas", default=2, show_default=True, help="Scheduler replicas.")
@click.option("--ttl", default=30.0, show_default=True, help="Assumed-pod ttl, seconds.")
@click.option("--seed", default=1, show_default=True, help="Random seed.")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="fit",
    show_default=True,
    help="With --redis: how replica processes claim (fit-checked, or strict generations).",
)
@click.option("--keep", is_flag=True, help="Keep the cache's previous contents.")
@click.pass_obj
def demo(
    settings: Settings,
    nodes: int,
    pods: int,
    replicas: int,
    ttl: float,
    seed: int,
    mode: str,
    keep: bool,
) -> None:
    """Schedule a simulated cluster and show what the cache saw.

    On the embedded backend the replicas take turns in this process (with binds that fail and
    binds never confirmed, so forgetting and expiry are seen). With --redis they are separate
    processes claiming concurrently with fit-checked claims, retrying conflicts on the next
    best node.
    """
    if nodes < 1 or pods < 0 or replicas < 1:
        raise click.BadParameter("--nodes and --replicas must be >= 1, --pods >= 0")
    client = settings.client()
    if settings.is_shared():
        if keep:
            raise click.UsageError(
                "--keep: with --redis the demo builds its cluster in an empty cache; "
                "use another --cache to keep this one"
            )
        with console.status(f"{replicas} replica processes scheduling {pods} pods"):
            report = run_replicas(
                settings.url or "",
                settings.cache_name,
                replicas=replicas,
                nodes=nodes,
                pods=pods,
                mode=mode,
                seed=seed,
            )
        shared = settings.cache(client)
        print_nodes(shared.dump().nodes, describe(settings.url), settings.cache_name)
        print_parallel_report(report, shared, pods)
        if report.overcommitted_nodes:
            raise click.ClickException(
                f"overcommitted nodes: {', '.join(report.overcommitted_nodes)}"
            )
        return
    cache = settings.cache(client, ttl=ttl, replica="demo-informer")
    if not keep:
        cache.clear()
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("scheduling", total=pods)
        report = run_demo(
            cache,
            nodes=nodes,
            pods=pods,
            replicas=replicas,
            seed=seed,
            progress=lambda n: bar.advance(task, n),
        )
    print_report(report, describe(settings.url), settings.cache_name)


def print_parallel_report(report: SimulationReport, cache: Cache, pods: int) -> None:
    table = Table(title=f"{len(report.replicas)} replica processes, {report.mode} claims")
    for column in ("replica", "claimed", "conflicts", "unschedulable", "seconds"):
        table.add_column(column, justify="left" if column == "replica" else "right")
    for replica in report.replicas:
        table.add_row(
            replica.replica,
            str(replica.claimed),
            str(replica.conflicts),
            str(replica.unschedulable),
            f"{replica.seconds:.2f}",
        )
    console.print(table)
    summary = Table(title="Summary", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    for what, value in (
        ("pods to schedule", pods),
        ("claimed", report.claimed),
        ("conflicts (another replica was first)", report.conflicts),
        ("conflicts per successful claim", f"{report.conflict_fraction:.4f}"),
        ("unschedulable (no node fits)", report.unschedulable),
        ("pods per second", f"{report.pods_per_second:,.0f}"),
        ("overcommitted nodes", len(report.overcommitted_nodes)),
        ("events in the stream", cache.stream_length()),
        ("seconds", f"{report.seconds:.2f}"),
    ):
        summary.add_row(what, str(value))
    console.print(summary)


def print_report(report: DemoReport, where: str, name: str) -> None:
    print_nodes(report.nodes, where, name)
    print_summary(report)


def print_nodes(node_infos: dict, where: str, name: str) -> None:
    nodes = Table(title=f"Nodes of cache {name!r} on {where}")
    for column in ("node", "zone", "pods", "cpu requested", "memory requested", "generation"):
        nodes.add_column(column, justify="left" if column in ("node", "zone") else "right")
    for node_name in sorted(node_infos, key=lambda n: (len(n), n)):
        info = node_infos[node_name]
        zone = info.node.labels.get("topology.kubernetes.io/zone", "") if info.node else "(ghost)"
        alloc = info.allocatable
        nodes.add_row(
            node_name,
            zone,
            str(len(info.pods)),
            f"{info.requested.milli_cpu}m / {alloc.milli_cpu}m",
            f"{info.requested.memory >> 20}Mi / {alloc.memory >> 20}Mi",
            str(info.generation),
        )
    console.print(nodes)


def print_summary(report: DemoReport) -> None:
    summary = Table(title="Summary", show_header=False)
    summary.add_column("what")
    summary.add_column("count", justify="right")
    rows = [
        ("pods to schedule", report.pods),
        ("assumed (scheduled)", report.scheduled),
        *((f"  by {replica}", count) for replica, count in sorted(report.per_replica.items())),
        ("confirmed by the informer (add_pod)", report.confirmed),
        ("bind failed (forget_pod)", report.bind_failures),
        ("never confirmed, expired", report.expired),
        ("unschedulable (no node fits)", report.unschedulable),
        ("conflicts (another replica was first)", report.conflicts),
        ("snapshot updates", report.snapshot_updates),
        ("events in the stream", report.events),
        ("cache generation", report.generation),
        ("seconds", f"{report.seconds:.2f}"),
    ]
    for what, count in rows:
        summary.add_row(what, str(count))
    console.print(summary)


@main.command()
@click.argument("source", metavar="FILE|-", type=click.File("r", encoding="utf-8"))
@click.option("--batch-size", default=500, show_default=True, help="Objects per batch.")
@click.pass_obj
def load(settings: Settings, source: click.utils.LazyFile, batch_size: int) -> None:
    """Ingest kubectl output: `get nodes,pods -o json` (a List) or `get pods --watch -o json`.

    Bound pods become add_pod/update_pod/remove_pod, nodes add_node/update_node/remove_node.
    Invalid objects are reported with their position and skipped; the exit status is 1 when
    any object was invalid or rejected by the cache.
    """
    text = source.read()
    cache = settings.cache(replica="loader")
    stderr = Console(stderr=True)
    try:
        documents = parse_documents(text)
    except ValidationError as error:
        raise click.ClickException(str(error)) from None
    total = sum(1 for _ in entries(documents))
    with Progress(console=stderr, transient=True) as bar:
        task = bar.add_task("loading", total=total)
        report = load_documents(
            cache, documents, batch_size=batch_size, progress=lambda n: bar.advance(task, n)
        )
    applied = ", ".join(f"{count} {name}" for name, count in sorted(report.applied.items()))
    click.echo(f"applied: {applied or 'nothing'}")
    click.echo(f"skipped: {len(report.skipped)}")
    for line in report.skipped:
        click.echo(f"  {line}")
    for title, lines in (("invalid", report.invalid), ("rejected", report.rejected)):
        click.echo(f"{title}: {len(lines)}")
        for line in lines:
            click.echo(f"  {line}")
    if not report.ok:
        sys.exit(1)


def registered_functions(server: redis.Redis) -> set[str]:
    """The names of the functions of the schedcache library loaded on ``server``."""
    registered = set()
    for library in server.function_list(library="schedcache"):
        entries = dict(zip(library[::2], library[1::2], strict=True))
        for function in entries[b"functions"]:
            details = dict(zip(function[::2], function[1::2], strict=True))
            registered.add(details[b"name"].decode())
    return registered


@main.command()
@click.pass_obj
def scripts(settings: Settings) -> None:
    """Load the Lua library into Redis and list the functions it registers (on every primary
    of a Redis Cluster)."""
    expected = {f"sc_{name}" for name in command_names()} | {"sc_version"}
    for server in primaries(settings.client()):
        try:
            ensure_loaded(server)
            registered = registered_functions(server)
        except (CacheError, redis.exceptions.NoPermissionError) as error:
            raise click.ClickException(
                f"{error} — loading the library takes a Redis user allowed FUNCTION LOAD and "
                "FUNCTION LIST (an admin; docs/security.md)"
            ) from None
        missing = expected - registered
        if missing:
            raise click.ClickException(
                f"functions missing after load: {', '.join(sorted(missing))}"
            )
    for name in sorted(registered):
        click.echo(name)
    click.echo(f"schedcache library v{SCHEMA_VERSION}: {len(registered)} functions loaded")


@main.command()
@click.pass_obj
def stats(settings: Settings) -> None:
    """Counts of the cache: nodes, pods, assumed pods, stream length, generation."""
    cache = settings.cache()
    dump = cache.dump()
    ghosts = sum(1 for info in dump.nodes.values() if info.node is None)
    click.echo(f"nodes\t{len(dump.nodes) - ghosts}")
    click.echo(f"ghost/placeholder nodes\t{ghosts}")
    click.echo(f"pods\t{cache.pod_count()}")
    click.echo(f"assumed pods\t{len(dump.assumed_pods)}")
    click.echo(f"stream length\t{cache.stream_length()}")
    click.echo(f"generation\t{dump.generation}")


def _register() -> None:
    # Commands living in their own modules (they import Settings from here).
    from schedcache.cli_inspect import (
        checkpoint,
        compact,
        diff,
        dump,
        events,
        get,
        history,
        replay,
        verify,
    )
    from schedcache.cli_serve import metrics_command, worker

    for command in (dump, get, events, history, replay, verify, checkpoint, compact, diff):
        main.add_command(command)
    for command in (worker, metrics_command):
        main.add_command(command)


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
