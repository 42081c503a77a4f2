"""``schedcache load``: kubectl's output (lists or watch events) fed into the cache."""

from __future__ import annotations

import sys
from typing import Any

import click
import redis
from rich.console import Console

from schedcache.cli.failures import lost_redis
from schedcache.cli.render import progress
from schedcache.cli.settings import Settings
from schedcache.cli.startup import INTERRUPTED
from schedcache.cli.text import plural, printable
from schedcache.errors import RetriesExhausted
from schedcache.feed.loader import LoadReport, load_documents
from schedcache.model.manifests import decode_input, entries, parse_documents
from schedcache.store.connection import EMBEDDED, describe


@click.command()
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
    by the cache, or when the input holds no object at all (an empty file).

    Objects the cache already holds as read are skipped (unchanged: no command, no event), so
    running the same load again writes nothing new. Ctrl-C stops a load with the counts so far
    and exit status 130; running it again finishes it.
    """
    name = printable(getattr(source, "name", "<stdin>"))  # the path; - is <stdin>
    try:
        documents = parse_documents(decode_input(source.read(), name), source=name)
        if not documents:
            raise click.ClickException(
                f"{name} holds no object (empty, or only comments and document separators): "
                "nothing was loaded"
            )
        cache = settings.cache(replica="loader")
        total = sum(1 for _ in entries(documents))
    except MemoryError:  # (found in review: `load /dev/zero` ended in a traceback)
        raise click.ClickException(
            f"{name} is too large to read and parse in this process's memory: nothing was "
            "loaded (load it in parts)"
        ) from None
    except KeyboardInterrupt:
        # (before the first write: found in review, click's "Aborted!" and exit 1 here)
        click.echo("interrupted while reading the input: nothing was applied", err=True)
        sys.exit(INTERRUPTED)
    report = LoadReport()
    try:
        with progress(Console(stderr=True), total, "loading") as advance:
            load_documents(
                cache,
                documents,
                batch_size=batch_size,
                progress=advance,
                prune=prune,
                report=report,
            )
    except KeyboardInterrupt:
        print_load_report(report, verbose)
        click.echo(f"interrupted: {stopped_text(report, total)}", err=True)
        sys.exit(INTERRUPTED)
    except (redis.ConnectionError, redis.TimeoutError) as error:
        # (found in review: the library's advice, "settle them with batch.settle(...)", and no
        # counts; a load is settled by running it again)
        print_load_report(report, verbose)
        lost = lost_text(settings, error).rstrip(".")
        raise click.ClickException(f"{lost}; {stopped_text(report, total)}") from None
    print_load_report(report, verbose)
    if not report.ok:
        where = "" if settings.is_shared() else " into the embedded Redis, gone at exit"
        raise click.ClickException(
            f"{plural(len(report.invalid), 'object')} invalid, {len(report.rejected)} rejected "
            f"(listed above); the rest was loaded{where}"
        )
    settings.note_if_embedded("what was loaded")


def lost_text(settings: Settings, error: Exception) -> str:
    """Which Redis a load lost, and how: it stopped answering (each call resent as --retry-for
    allows), or the connection failed as a connect fails (lost_redis)."""
    if isinstance(error, RetriesExhausted):
        resent = (
            "each call resent for as long as --retry-for allows"
            if settings.retry_for
            else "--retry-for 0: not resent"
        )
        return f"Redis at {describe(settings.url or EMBEDDED)} stopped answering ({resent})"
    return str(lost_redis(click.get_current_context(), error))


def stopped_text(report: LoadReport, total: int) -> str:
    """What a load stopped midway (Ctrl-C, Redis lost) leaves behind, and how to go on."""
    applied = sum(report.applied.values())
    unsure = (
        f" (and up to {report.in_flight} more: the batch in flight may have been applied)"
        if report.in_flight
        else ""
    )
    return (
        f"{applied} of {total} objects applied{unsure}; run the same load again to finish: "
        "what the cache already holds is skipped as unchanged"
    )


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
