"""``schedcache scripts``, ``migrate`` and ``stats``: the library on the server, the schema,
and the cache's counts."""

from __future__ import annotations

import click
import redis

from schedcache.cli.settings import Settings
from schedcache.cli.text import one_line, plural
from schedcache.errors import CacheError
from schedcache.feed.progress import read_progress, truncated_pods
from schedcache.store.library import (
    LIBRARY_PREFIX,
    SCHEMA_VERSION,
    ensure_loaded,
    function_names,
    library_name,
)
from schedcache.store.migrate import migrate as migrate_cache
from schedcache.store.queued import queue_lengths
from schedcache.store.routing import primaries


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


@click.command()
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


@click.command()
@click.pass_obj
def migrate(settings: Settings) -> None:
    """Bring a cache written by an older schedcache (schema 1) to this schema, in place.

    Converts each node's pod set into the sorted set schema 2 keeps, a slice of nodes per call;
    safe to run again. Run it before replicas and feeders start (docs/storage.md,
    "Upgrading from schema 1"). A cache that holds nothing is refused, as the read commands
    refuse it: a misspelled --cache must not be reported migrated."""
    cache = settings.existing_cache()
    converted = migrate_cache(cache.store)
    click.echo(
        f"cache {cache.name}: {plural(converted, 'node pod set')} converted; "
        f"the cache is at schema {SCHEMA_VERSION}"
    )
    settings.note_if_embedded("the migration")


@click.command()
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
