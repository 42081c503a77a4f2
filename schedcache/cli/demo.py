"""``schedcache demo``: a simulated cluster scheduled by replicas, and what the cache saw."""

from __future__ import annotations

import click
from rich.console import Console

from schedcache.cache import Cache
from schedcache.cli.params import Seconds
from schedcache.cli.render import (
    node_table,
    print_table,
    progress,
    replica_table,
    summary_table,
)
from schedcache.cli.settings import Settings
from schedcache.cli.text import printable
from schedcache.sim.demo import DEMO_CACHE, DemoReport, run_demo
from schedcache.sim.simulation import MODES, SimulationReport, run_replicas
from schedcache.store.commands import MAX_TTL
from schedcache.store.connection import describe

console = Console()


@click.command()
@click.option(
    "--nodes", type=click.IntRange(1, 10_000), default=6, show_default=True, help="Nodes."
)
@click.option(
    "--pods", type=click.IntRange(0, 1_000_000), default=40, show_default=True, help="Pods."
)
@click.option(
    "--replicas", type=click.IntRange(1, 64), default=2, show_default=True, help="Replicas."
)
@click.option(
    "--ttl",
    type=Seconds(maximum=MAX_TTL),
    default=30.0,
    show_default=True,
    help="Assumed-pod ttl, seconds (0: never expire).",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**63 - 1),
    default=1,
    show_default=True,
    help="Seed of the simulated cluster and its pods (the same seed, the same run).",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="fit",
    show_default=True,
    help="With --redis: how replica processes claim (fit-checked, or strict generations).",
)
@click.option("--keep", is_flag=True, help="Embedded only: add to what the cache holds.")
@click.option(
    "--reset",
    is_flag=True,
    help="Delete everything in the cache named by --cache first (it must be given).",
)
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
    reset: bool,
) -> None:
    """Schedule a simulated cluster and show what the cache saw.

    On the embedded backend the replicas take turns in this process (with binds that fail and
    binds never confirmed, so forgetting and expiry are seen); conflicts need --redis. With
    --redis they are separate processes claiming concurrently with fit-checked claims,
    retrying conflicts on the next best node; their pods stay assumed and expire after --ttl
    unless an informer confirms them.

    The demo never touches a cache that holds anything: it runs on the cache 'demo' unless
    --cache is given on the command line, and refuses a non-empty cache unless that --cache is
    given together with --reset (which deletes the cache's contents, stream and checkpoint
    included). $SCHEDCACHE_CACHE is not used.
    """
    name = settings.cache_name if settings.cache_given else DEMO_CACHE
    if reset and not settings.cache_given:
        raise click.UsageError("--reset deletes a cache: name it with --cache NAME")
    if keep and (reset or settings.is_shared()):
        raise click.UsageError(
            "--keep: with --redis the demo builds its cluster in an empty cache"
            if settings.is_shared()
            else "--keep and --reset contradict each other"
        )
    client = settings.client()
    cache = settings.cache(client, name=name, ttl=ttl, replica="demo-informer")
    where = describe(settings.url)
    if not keep and not reset and holds_anything(cache):
        raise click.ClickException(
            f"cache {name!r} on {where} is not empty, and the demo only runs on an empty "
            f"cache: use another --cache, or --cache {name} --reset to delete its contents first"
        )
    if reset:
        cache.clear()
    if settings.is_shared():
        with console.status(f"{replicas} replica processes scheduling {pods} pods"):
            parallel = run_replicas(
                settings.url or "",
                name,
                replicas=replicas,
                nodes=nodes,
                pods=pods,
                mode=mode,
                seed=seed,
                ttl=ttl,
            )
        print_table(node_table(cache.dump().nodes, f"Nodes of cache {name!r} on {where}"))
        print_parallel_report(parallel, cache, pods)
        if parallel.overcommitted_nodes:
            raise click.ClickException(
                f"overcommitted nodes: {printable(', '.join(parallel.overcommitted_nodes))}"
            )
        return
    with progress(console, pods, "scheduling") as advance:
        report = run_demo(
            cache, nodes=nodes, pods=pods, replicas=replicas, seed=seed, progress=advance
        )
    print_table(node_table(report.nodes, f"Nodes of cache {name!r} on {where}"))
    print_summary(report)


def holds_anything(cache: Cache) -> bool:
    """Whether any key of the cache exists: its main keys first (one round trip), then a SCAN
    for any other (leases, remembered command ids, checkpoint chunks)."""
    return not cache.is_empty()


def print_parallel_report(report: SimulationReport, cache: Cache, pods: int) -> None:
    console.print(replica_table(report))
    console.print(
        summary_table(
            "Summary",
            [
                ("pods to schedule", pods),
                ("claimed", report.claimed),
                ("conflicts (another replica was first)", report.conflicts),
                ("conflicts per successful claim", f"{report.conflict_fraction:.4f}"),
                ("unschedulable (no node fits)", report.unschedulable),
                ("pods per second", f"{report.pods_per_second:,.0f}"),
                ("overcommitted nodes", len(report.overcommitted_nodes)),
                ("events in the stream", cache.stream_length()),
                ("seconds", f"{report.seconds:.2f}"),
            ],
        )
    )


TAKING_TURNS = "n/a, take turns"
TURNS_CAPTION = (
    "The replicas take turns in this process, so they never conflict: run with --redis URL "
    "for replica processes claiming concurrently."
)


def print_summary(report: DemoReport) -> None:
    console.print(
        summary_table(
            "Summary",
            [
                ("pods to schedule", report.pods),
                ("assumed (scheduled)", report.scheduled),
                *((f"  by {replica}", n) for replica, n in sorted(report.per_replica.items())),
                ("confirmed by the informer (add_pod)", report.confirmed),
                ("bind failed (forget_pod)", report.bind_failures),
                ("never confirmed, expired", report.expired),
                ("unschedulable (no node fits)", report.unschedulable),
                ("conflicts (another replica was first)", report.conflicts or TAKING_TURNS),
                ("snapshot updates", report.snapshot_updates),
                ("events in the stream", report.events),
                ("cache generation", report.generation),
                ("seconds", f"{report.seconds:.2f}"),
            ],
            caption=TURNS_CAPTION,
        )
    )
