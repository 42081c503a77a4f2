"""``schedcache completion bash|zsh|fish``: the shell completion script, as ``kubectl
completion`` prints one (``source <(schedcache completion bash)``). Click writes the script; it
asks the program itself for the candidates through ``_SCHEDCACHE_COMPLETE``, and the completers
here offer what kubectl offers: node names, pod names and namespaces, read from the cache."""

from __future__ import annotations

from collections.abc import Callable

import click
import redis
from click.shell_completion import get_completion_class
from redis.exceptions import RedisClusterException

from schedcache.cache import Cache
from schedcache.cli.settings import Settings
from schedcache.errors import CacheError
from schedcache.feed.reconcile import held

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL: `source <(schedcache completion bash)` in
    ~/.bashrc, `schedcache completion zsh > "${fpath[1]}/_schedcache"`, or
    `schedcache completion fish > ~/.config/fish/completions/schedcache.fish`."""
    root = ctx.find_root()
    program = "schedcache"  # the console script the shell runs (also under kubectl's plugin)
    maker = get_completion_class(shell)
    if maker is None:  # pragma: no cover  # click registers all three
        raise click.ClickException(f"no completion for {shell}")
    click.echo(maker(root.command, {}, program, "_SCHEDCACHE_COMPLETE").source())


# What can go wrong reading the cache while the shell waits: no candidates then, never a trace.
COMPLETION_ERRORS = (CacheError, redis.RedisError, RedisClusterException, OSError)


def _cached(ctx: click.Context, read: Callable[[Cache], list[str]], incomplete: str) -> list[str]:
    """``read(cache)``'s names that start with ``incomplete``, sorted; none when the command
    line names no shared Redis or the cache cannot be read."""
    settings = Settings.for_completion(ctx)
    if settings is None:
        return []
    try:
        names = read(settings.cache())
    except COMPLETION_ERRORS:
        return []
    return sorted(n for n in set(names) if n.startswith(incomplete))


def complete_kinds(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return [kind for kind in ("nodes", "pods") if kind.startswith(incomplete)]


def complete_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """NAME of `get`/`describe`: node names, or the names of the pods in the namespace that -n
    gives (default: default), as kubectl completes them."""
    if ctx.params.get("kind") == "node":
        return _cached(ctx, lambda cache: list(held(cache, "nodes")), incomplete)
    if ctx.params.get("kind") != "pod":
        return []
    namespace = ctx.params.get("namespace") or "default"
    return _cached(
        ctx,
        lambda cache: [p.name for p in cache.list_pods() if p.namespace == namespace],
        incomplete,
    )


def complete_namespaces(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """-n/--namespace: the namespaces of the cache's pods."""
    return _cached(ctx, lambda cache: [p.namespace for p in cache.list_pods()], incomplete)
