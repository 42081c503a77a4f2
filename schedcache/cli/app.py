"""The ``schedcache`` command line.

Every command takes the global options ``--redis URL`` (default: ``SCHEDCACHE_REDIS_URL``, else
an embedded in-process fakeredis), ``--cache NAME`` (default: ``SCHEDCACHE_CACHE``, else
``default``) and the connection settings, before or after the subcommand, as kubectl takes its
flags anywhere.

No command ends in a traceback for something that can go wrong in use: a bad argument is a
usage error (exit 2), and a bad file, a refused command, a Redis error or an unreachable server
is one ``Error:`` line on stderr (exit 1). Anything else escaping is a bug.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

import click
import redis
from click.core import ParameterSource
from redis.exceptions import RedisClusterException
from rich.console import Console

from schedcache.cache import Cache
from schedcache.cli.params import Seconds
from schedcache.cli.render import (
    node_table,
    one_line,
    print_table,
    printable,
    progress,
    replica_table,
    summary_table,
)
from schedcache.errors import CacheError, ValidationError
from schedcache.feed.loader import LoadReport, load_documents
from schedcache.feed.progress import read_progress, truncated_pods
from schedcache.model.manifests import decode_input, entries, parse_documents
from schedcache.ops import logs
from schedcache.sim.demo import DEMO_CACHE, DemoReport, run_demo
from schedcache.sim.simulation import MODES, SimulationReport, run_replicas
from schedcache.store.commands import MAX_TTL
from schedcache.store.connection import EMBEDDED, ENV_URL, connect, describe
from schedcache.store.keys import Keys
from schedcache.store.library import (
    LIBRARY_PREFIX,
    SCHEMA_VERSION,
    ensure_loaded,
    function_names,
    library_name,
)
from schedcache.store.migrate import migrate as migrate_cache
from schedcache.store.queued import queue_lengths
from schedcache.store.retry import DEFAULT_RETRY, MAX_RETRY_WINDOW, NO_RETRY
from schedcache.store.routing import PRIMARY, primaries, read_from_setting
from schedcache.store.store import Client

ENV_CACHE = "SCHEDCACHE_CACHE"
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
    cache_given: bool = False  # --cache on the command line (not the env var or the default)
    embedded: bool = False  # --embedded: the embedded backend on purpose
    read_from: str = PRIMARY  # --read-from: where snapshot updates read

    def is_shared(self) -> bool:
        """A real Redis that other processes can reach (not the embedded default)."""
        return bool(self.url) and self.url != EMBEDDED

    def note_if_embedded(self, effect: str) -> None:
        """Say on stderr that ``effect`` is gone with this process (the embedded backend), so
        a command that wrote something never reads as kept when it was not."""
        if not self.is_shared():
            click.echo(
                f"note: {effect} went to the embedded in-process Redis (no --redis, no "
                f"${ENV_URL}), which is gone now that the command exits: nothing was kept",
                err=True,
            )

    def refuse_evicting(self, cache: Cache) -> None:
        """A long-running process does not start on a Redis that may evict its cache's keys
        (exit 1, naming the policy); when the policy cannot be read it says so and goes on."""
        check = cache.store.eviction()
        if check.evicts:
            raise click.ClickException(check.problem(cache.name))
        if check.policy is None and self.is_shared():
            click.echo(f"note: maxmemory-policy not checked: {check.why}", err=True)

    def refuse_embedded(self, command: str) -> None:
        """A long-running server on the embedded backend serves a Redis nobody else can
        reach: a usage error unless --embedded asks for exactly that."""
        if not self.is_shared() and not self.embedded:
            raise click.UsageError(
                f"{command} runs until stopped, and without --redis (or ${ENV_URL}) it would "
                "serve an embedded in-process Redis that no other process can reach: give "
                "--redis URL, or --embedded to run on it anyway"
            )

    def client(self) -> Client:
        return connect(self.url, timeout=self.timeout)

    def existing_cache(self, **options: Any) -> Cache:
        """The named cache for a read command: one that holds nothing does not exist (a
        misspelled --cache must not read as an empty cluster)."""
        cache = self.cache(**options)
        if cache.is_empty():
            raise click.ClickException(
                f"cache {cache.name!r} does not exist on {describe(self.url)} (nothing was ever "
                "written to it: is --cache right?)"
            )
        return cache

    def cache(self, client: Client | None = None, **options: Any) -> Cache:
        """The named cache with these settings (``options``: ttl, replica, ...)."""
        retry = replace(DEFAULT_RETRY, within=self.retry_for) if self.retry_for else NO_RETRY
        return Cache(
            client or self.client(),
            options.pop("name", self.cache_name),
            retry=retry,
            wait_replicas=self.wait_replicas,
            wait_timeout=self.wait_timeout,
            read_from=self.read_from,
            **options,
        )


# -- what the whole command line shares -------------------------------------------------------

# Failures a user can cause or meet (bad input, a refused command, Redis down or refusing):
# reported as one line. BrokenPipeError is left to click (output piped into `head`).
EXPECTED = (CacheError, redis.RedisError, RedisClusterException)


class SchedcacheGroup(click.Group):
    """The top-level group: takes its own (global) options anywhere on the command line, and
    turns expected failures into one ``Error:`` line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, hoist_global_options(self, args))
        except click.ClickException as error:
            raise printable_error(error) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as error:  # usage errors of subcommands too
            raise printable_error(error) from None
        except EXPECTED as error:
            raise click.ClickException(one_line(error)) from None
        except OSError as error:
            if isinstance(error, BrokenPipeError):
                raise
            raise click.ClickException(one_line(error)) from None


def printable_error(error: click.ClickException) -> click.ClickException:
    """``error`` with a one-line printable message: click quotes bad arguments as given (an
    unknown option ``--\x1b[2J`` would reach the terminal raw)."""
    error.message = one_line(error.message)  # type: ignore[misc]  # Final in click's stubs
    return error


def _takes_value(option: click.Option) -> bool:
    return not option.is_flag and not option.count


def _option(command: click.Command | None, token: str) -> click.Option | None:
    """The option of ``command`` that ``token`` (``--name``, ``--name=v``, ``-o``, ``-owide``)
    starts with, if any."""
    if command is None:
        return None
    name = token.split("=", 1)[0] if token.startswith("--") else token[:2]
    for param in command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def hoist_global_options(group: click.Group, args: list[str]) -> list[str]:
    """``args`` with the group's own options moved in front of the subcommand, so that
    ``schedcache load --redis URL FILE`` means ``schedcache --redis URL load FILE``.

    The walk follows the subcommands, so the value of a subcommand's own option is never taken
    for a global option, and stops at ``--``."""
    front: list[str] = []
    rest: list[str] = []
    command: click.Command | None = group
    index = 0
    while index < len(args):
        token = args[index]
        if token == "--":
            rest += args[index:]
            break
        global_option = _option(group, token) if token.startswith("--") else None
        option = global_option or (_option(command, token) if token.startswith("-") else None)
        target = front if global_option is not None else rest
        target.append(token)
        index += 1
        if option is not None:
            inline = "=" in token if token.startswith("--") else len(token) > 2
            if _takes_value(option) and not inline and index < len(args):
                target.append(args[index])
                index += 1
        elif not token.startswith("-") and isinstance(command, click.Group):
            command = command.commands.get(token)  # None: click reports the unknown name
    return front + rest


def check_cache_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        Keys(value)
    except ValidationError as error:
        raise click.BadParameter(printable(error.reason), ctx, param) from None
    return value


def check_read_from(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        read_from_setting(value, "--read-from")
    except ValidationError as error:
        raise click.BadParameter(printable(error.reason), ctx, param) from None
    return value


@click.group(cls=SchedcacheGroup)
@click.option(
    "--redis",
    "url",
    envvar=ENV_URL,
    default=None,
    metavar="URL",
    help="Redis URL (redis://, rediss://, unix://, redis+sentinel://, redis+cluster://; "
    f"see docs/deployment.md); default: ${ENV_URL}, else embedded fakeredis.",
)
@click.option(
    "--cache",
    "cache_name",
    envvar=ENV_CACHE,
    default="default",
    show_default=True,
    callback=check_cache_name,
    help=f"Cache name; default: ${ENV_CACHE}, else 'default'.",
)
@click.option(
    "--timeout",
    type=Seconds(open_min=True),
    default=5.0,
    show_default=True,
    envvar="SCHEDCACHE_TIMEOUT",
    help="Socket timeout for each Redis call, seconds (more than 0, at most 3600).",
)
@click.option(
    "--retry-for",
    type=Seconds(maximum=MAX_RETRY_WINDOW),
    default=DEFAULT_RETRY.within,
    show_default=True,
    envvar="SCHEDCACHE_RETRY_FOR",
    help="Keep resending a command while Redis does not answer for this many seconds "
    f"(exactly once: resent commands are never applied twice); 0 = no retries, at most "
    f"{MAX_RETRY_WINDOW:g}.",
)
@click.option(
    "--wait-replicas",
    type=click.IntRange(min=0, max=1000),
    default=0,
    show_default=True,
    envvar="SCHEDCACHE_WAIT_REPLICAS",
    help="Answer a command only once this many replicas have it (WAIT).",
)
@click.option(
    "--wait-timeout",
    type=Seconds(open_min=True),
    default=1.0,
    show_default=True,
    envvar="SCHEDCACHE_WAIT_TIMEOUT",
    help="Longest wait for --wait-replicas, seconds.",
)
@click.option(
    "--read-from",
    default=PRIMARY,
    show_default=True,
    envvar="SCHEDCACHE_READ_FROM",
    metavar="primary|replica|URL",
    callback=check_read_from,
    help="Where snapshot updates read: the primary, a replica of it (found from the primary, "
    "Sentinel or Cluster), or the replica at this redis:// URL; writes and claims always go "
    "to the primary (docs/storage.md).",
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
@click.option(
    "--embedded",
    is_flag=True,
    help="Run a long-running command (worker, metrics, extender) on the embedded in-process "
    "Redis anyway; without --redis they refuse.",
)
@click.version_option(package_name="schedcache")
@click.pass_context
def main(
    ctx: click.Context,
    url: str | None,
    cache_name: str,
    timeout: float,
    retry_for: float,
    wait_replicas: int,
    wait_timeout: float,
    read_from: str,
    log_level: str,
    log_format: str,
    embedded: bool,
) -> None:
    """kube-scheduler's cache on Redis, shared by scheduler replicas.

    The options listed below are global: they may come before or after the subcommand
    (`schedcache dump -o wide --cache prod`). Without --redis (or $SCHEDCACHE_REDIS_URL) every
    command runs on an embedded in-process Redis that is gone when it exits.
    """
    logs.configure(log_level, log_format)
    given = ctx.get_parameter_source("cache_name") == ParameterSource.COMMANDLINE
    ctx.obj = Settings(url, cache_name, timeout, retry_for, wait_replicas, wait_timeout, given)
    ctx.obj.embedded = embedded
    ctx.obj.read_from = read_from


# -- demo ---------------------------------------------------------------------------------------


@main.command()
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
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=1, show_default=True)
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


# -- load ---------------------------------------------------------------------------------------


@main.command()
@click.argument("source", metavar="FILE|-", type=click.File("rb"))
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10_000),
    default=500,
    show_default=True,
    help="Objects per batch.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Also remove the cache's nodes and pods (of the kinds listed) that the lists no longer "
    "hold, as a relist does. Needs full lists, not watch events.",
)
@click.option("-v", "--verbose", is_flag=True, help="List every skipped object, not only counts.")
@click.pass_obj
def load(settings: Settings, source: Any, batch_size: int, prune: bool, verbose: bool) -> None:
    """Ingest kubectl output: `get nodes,pods -o json` (a List) or `get pods --watch -o json`.

    Bound pods become add_pod/update_pod/remove_pod, nodes add_node/update_node/remove_node.
    Without --prune a load only adds, updates and (for DELETED events) removes: objects missing
    from the file stay in the cache. Every invalid object is reported with its position, kind,
    namespace/name and the field at fault, and skipped; the others are loaded. Skipped objects
    (pending or terminated pods, other kinds) are counted per reason (-v lists them). A pod with
    more labels than the cache stores is loaded without them, still counting on its node, as
    sync stores it (truncated: N). The exit status is 1 when any object was invalid or rejected
    by the cache.
    """
    documents = parse_documents(decode_input(source.read()))
    cache = settings.cache(replica="loader")
    total = sum(1 for _ in entries(documents))
    with progress(Console(stderr=True), total, "loading") as advance:
        report = load_documents(
            cache, documents, batch_size=batch_size, progress=advance, prune=prune
        )
    print_load_report(report, verbose)
    if not report.ok:
        where = "" if settings.is_shared() else " into the embedded Redis, gone at exit"
        raise click.ClickException(
            f"{len(report.invalid)} objects invalid, {len(report.rejected)} rejected (listed "
            f"above); the rest was loaded{where}"
        )
    settings.note_if_embedded("what was loaded")


def print_load_report(report: LoadReport, verbose: bool) -> None:
    applied = ", ".join(f"{count} {name}" for name, count in sorted(report.applied.items()))
    click.echo(f"applied: {applied or 'nothing'}")
    if report.pruned:
        pruned = ", ".join(f"{n} {what}" for what, n in sorted(report.pruned.items()))
        click.echo(f"pruned: {pruned}")
    if report.truncated:
        click.echo(f"truncated: {report.truncated} (pods stored without their labels)")
    reasons = ", ".join(f"{n} {why}" for why, n in report.skipped_by_reason().most_common())
    click.echo(f"skipped: {len(report.skipped)}" + (f" ({reasons})" if reasons else ""))
    if verbose:
        for item in report.skipped:
            click.echo(f"  {printable(item)}")
    for title, lines in (("invalid", report.invalid), ("rejected", report.rejected)):
        click.echo(f"{title}: {len(lines)}")
        for line in lines:
            click.echo(f"  {printable(line)}")


# -- scripts, stats -------------------------------------------------------------------------------


def loaded_libraries(server: redis.Redis) -> dict[str, set[str]]:
    """The schedcache libraries (every build's) loaded on ``server``, with their functions."""
    loaded = {}
    for library in server.function_list(library=f"{LIBRARY_PREFIX}*"):
        entries = dict(zip(library[::2], library[1::2], strict=True))
        functions = set()
        for function in entries[b"functions"]:
            details = dict(zip(function[::2], function[1::2], strict=True))
            functions.add(details[b"name"].decode())
        loaded[entries[b"library_name"].decode()] = functions
    return loaded


@main.command()
@click.option(
    "--unload",
    "unload",
    metavar="LIBRARY",
    multiple=True,
    help="Delete another build's library (as `scripts` lists it) once no process runs it.",
)
@click.pass_obj
def scripts(settings: Settings, unload: tuple[str, ...]) -> None:
    """Load this version's Lua library into Redis (on every primary of a Redis Cluster), list
    the functions it registers, and the libraries of other versions loaded beside it."""
    expected = set(function_names())
    for name in unload:
        if name == library_name() or not name.startswith(f"{LIBRARY_PREFIX}_"):
            raise click.BadParameter(
                f"{name!r} is not another build's schedcache library (this one is "
                f"{library_name()})",
                param_hint="--unload",
            )
    others: set[str] = set()
    for server in primaries(settings.client()):
        try:
            ensure_loaded(server)
            for name in unload:
                if name in loaded_libraries(server):
                    server.function_delete(name)
            libraries = loaded_libraries(server)
        except (CacheError, redis.exceptions.NoPermissionError) as error:
            raise click.ClickException(
                f"{one_line(error)} — loading the library takes a Redis user allowed FUNCTION "
                "LOAD and FUNCTION LIST (an admin; docs/security.md)"
            ) from None
        registered = libraries.get(library_name(), set())
        others |= set(libraries) - {library_name()}
        missing = expected - registered
        if missing:
            raise click.ClickException(
                f"functions missing after load: {', '.join(sorted(missing))}"
            )
    for name in sorted(registered):
        click.echo(name)
    for other in sorted(others):
        click.echo(f"also loaded: {other} (another version's; --unload it once none runs it)")
    click.echo(f"{library_name()} (schema v{SCHEMA_VERSION}): {len(registered)} functions loaded")
    settings.note_if_embedded("the library")


@main.command()
@click.pass_obj
def migrate(settings: Settings) -> None:
    """Bring a cache written by an older schedcache (schema 1) to this schema, in place.

    Converts each node's pod set into the sorted set schema 2 keeps, a slice of nodes per call;
    safe to run again. Run it before replicas and feeders start (docs/storage.md,
    "Upgrading from schema 1")."""
    cache = settings.cache()
    converted = migrate_cache(cache.store)
    click.echo(
        f"cache {cache.name}: {converted} node pod set{'' if converted == 1 else 's'} converted; "
        f"the cache is at schema {SCHEMA_VERSION}"
    )
    settings.note_if_embedded("the migration")


@main.command()
@click.pass_obj
def stats(settings: Settings) -> None:
    """Counts of the cache: nodes, pods, assumed pods, stream length, generation, feeders'
    progress, pending pods in the scheduling queue per scheduler name."""
    cache = settings.existing_cache()
    dump = cache.dump()
    ghosts = sum(1 for info in dump.nodes.values() if info.node is None)
    click.echo(f"nodes\t{len(dump.nodes) - ghosts}")
    click.echo(f"ghost/placeholder nodes\t{ghosts}")
    click.echo(f"pods\t{cache.pod_count()}")
    click.echo(f"assumed pods\t{len(dump.assumed_pods)}")
    click.echo(f"truncated pods\t{truncated_pods(dump)}")
    click.echo(f"stream length\t{cache.stream_length()}")
    click.echo(f"generation\t{dump.generation}")
    for fed in read_progress(cache):
        click.echo(f"sync {fed.resource}\trv {fed.version}, {fed.age():.1f} s ago, by {fed.by}")
    for scheduler, states in queue_lengths(cache.client, cache.keys).items():
        parts = ", ".join(f"{count} {state}" for state, count in states.items())
        click.echo(f"queue {scheduler}\t{sum(states.values())} pending pods ({parts})")


def _register() -> None:
    # Commands living in their own modules (they import Settings from here).
    from schedcache.cli.acl import acl
    from schedcache.cli.completion import completion
    from schedcache.cli.describe import describe
    from schedcache.cli.extender import extender, scheduler
    from schedcache.cli.get import get
    from schedcache.cli.inspection import (
        checkpoint,
        compact,
        diff,
        dump,
        events,
        explain,
        history,
        replay,
        verify,
    )
    from schedcache.cli.serve import metrics_command, worker
    from schedcache.cli.sync import sync
    from schedcache.cli.whatif import whatif

    for command in (dump, get, events, history, explain, replay, verify, checkpoint, compact, diff):
        main.add_command(command)
    for command in (worker, metrics_command, sync, extender, scheduler, whatif, describe):
        main.add_command(command)
    for command in (completion, acl):
        main.add_command(command)


def global_options_epilog(group: click.Group) -> str:
    """The line each subcommand's help ends with: which global options it also takes."""
    names = [
        p.opts[0] for p in group.params if isinstance(p, click.Option) and p.opts[0] != "--help"
    ]
    return (
        f"Global options, before or after the subcommand: {', '.join(names)} (schedcache --help)."
    )


def _add_epilogs(command: click.Command, epilog: str) -> None:
    command.epilog = command.epilog or epilog
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_epilogs(sub, epilog)


_register()
for _command in main.commands.values():
    _add_epilogs(_command, global_options_epilog(main))

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
