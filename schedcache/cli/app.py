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

import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

import click
import redis
from click.core import ParameterSource
from redis.exceptions import RedisClusterException

from schedcache.cli.failures import lost_redis
from schedcache.cli.params import (
    HELP_ASKED,
    Seconds,
    check_cache_option,
    check_cache_variable,
    check_redis_url,
)
from schedcache.cli.settings import ENV_CACHE, ENV_TIMEOUT, Settings
from schedcache.cli.startup import COMMAND_NAMES, command_of, interrupted
from schedcache.cli.text import one_line, printable
from schedcache.errors import CacheError, ValidationError
from schedcache.ops import logs
from schedcache.store.connection import (
    ENV_URL,
    connect,
    url_problem,
)
from schedcache.store.retry import DEFAULT_RETRY, MAX_RETRY_WINDOW
from schedcache.store.routing import PRIMARY, read_from_setting

__all__ = ["ENV_CACHE", "Settings", "connect", "main"]

# Each subcommand's module, imported when its command runs (or help lists it), so `get` never
# pays for `whatif`'s imports (start-up time). The modules import Settings from
# schedcache.cli.settings, never this module: no import circle.


def _acl() -> ModuleType:
    import schedcache.cli.acl as module

    return module


def _admin() -> ModuleType:
    import schedcache.cli.admin as module

    return module


def _completion() -> ModuleType:
    import schedcache.cli.completion as module

    return module


def _demo() -> ModuleType:
    import schedcache.cli.demo as module

    return module


def _describe() -> ModuleType:
    import schedcache.cli.describe as module

    return module


def _extender() -> ModuleType:
    import schedcache.cli.extender as module

    return module


def _get() -> ModuleType:
    import schedcache.cli.get as module

    return module


def _inspection() -> ModuleType:
    import schedcache.cli.inspection as module

    return module


def _load() -> ModuleType:
    import schedcache.cli.load as module

    return module


def _serve() -> ModuleType:
    import schedcache.cli.serve as module

    return module


def _sync() -> ModuleType:
    import schedcache.cli.sync as module

    return module


def _whatif() -> ModuleType:
    import schedcache.cli.whatif as module

    return module


COMMANDS: dict[str, tuple[Callable[[], ModuleType], str]] = {
    "acl": (_acl, "acl"),
    "checkpoint": (_inspection, "checkpoint"),
    "compact": (_inspection, "compact"),
    "completion": (_completion, "completion"),
    "demo": (_demo, "demo"),
    "describe": (_describe, "describe"),
    "diff": (_inspection, "diff"),
    "dump": (_inspection, "dump"),
    "events": (_inspection, "events"),
    "explain": (_inspection, "explain"),
    "extender": (_extender, "extender"),
    "get": (_get, "get"),
    "history": (_inspection, "history"),
    "load": (_load, "load"),
    "metrics": (_serve, "metrics_command"),
    "migrate": (_admin, "migrate"),
    "replay": (_inspection, "replay"),
    "scheduler": (_extender, "scheduler"),
    "scripts": (_admin, "scripts"),
    "stats": (_admin, "stats"),
    "sync": (_sync, "sync"),
    "verify": (_inspection, "verify"),
    "whatif": (_whatif, "whatif"),
    "worker": (_serve, "worker"),
}
assert COMMANDS.keys() == COMMAND_NAMES, "schedcache.cli.startup names every command"


# -- what the whole command line shares -------------------------------------------------------

# Failures a user can cause or meet (bad input, a refused command, Redis down or refusing):
# reported as one line. BrokenPipeError is left to click (output piped into `head`).
EXPECTED = (CacheError, redis.RedisError, RedisClusterException)
# click 8.2 on raises the usage screen of a group called with no arguments as this error (8.1
# printed it and exited): kept as it is, not joined into one line (found in review).
NO_ARGS_IS_HELP: tuple[type[click.ClickException], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)


class SchedcacheGroup(click.Group):
    """The top-level group: takes its own (global) options anywhere on the command line, and
    turns expected failures into one ``Error:`` line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Help reads no cache: a bad $SCHEDCACHE_CACHE refuses no `COMMAND --help` (found in
        # review; params.check_cache_variable).
        options = args[: args.index("--")] if "--" in args else args
        ctx.meta[HELP_ASKED] = "--help" in options
        try:
            return super().parse_args(ctx, hoist_global_options(self, args, ctx))
        except click.ClickException as error:
            raise printable_error(error) from None
        except KeyboardInterrupt:  # (hoisting imports the subcommand's module)
            interrupted(command_of(args))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as error:  # usage errors of subcommands too
            raise printable_error(error) from None
        except EXPECTED as error:
            raise click.ClickException(one_line(lost_redis(ctx, error))) from None
        except OSError as error:
            if isinstance(error, BrokenPipeError):
                raise
            raise click.ClickException(one_line(error)) from None
        except KeyboardInterrupt:
            interrupted(ctx.invoked_subcommand)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The subcommand ``cmd_name``, its module imported on first use."""
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in COMMANDS:
            load, attribute = COMMANDS[cmd_name]
            command = getattr(load(), attribute)
            assert isinstance(command, click.Command), cmd_name
            _add_epilogs(command, global_options_epilog(self))
            self.commands[cmd_name] = command
        return command


def printable_error(error: click.ClickException) -> click.ClickException:
    """``error`` with a one-line printable message: click quotes bad arguments as given (an
    unknown option ``--\x1b[2J`` would reach the terminal raw)."""
    if isinstance(error, NO_ARGS_IS_HELP):
        return error  # the usage screen itself (our own text), printed whole
    if isinstance(error, click.BadParameter):
        name_the_variable(error)
    error.message = one_line(error.message)  # type: ignore[misc]  # Final in click's stubs
    return error


def name_the_variable(error: click.BadParameter) -> None:
    """A bad value that came from an option's environment variable names the variable too
    (``'--timeout' (from $SCHEDCACHE_TIMEOUT)``): the user never typed the option, and must
    learn which setting to mend. For every option with an envvar, global or a subcommand's."""
    param, ctx = error.param, error.ctx
    if param is None or ctx is None or param.name is None or error.param_hint is not None:
        return
    if ctx.get_parameter_source(param.name) is not ParameterSource.ENVIRONMENT:
        return
    names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
    # (click reads the first of them that is set and not empty)
    variable = next((name for name in names if os.environ.get(name)), None)
    if variable is not None:
        error.param_hint = f"{param.get_error_hint(ctx)} (from ${variable})"


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


def hoist_global_options(
    group: click.Group, args: list[str], ctx: click.Context | None = None
) -> list[str]:
    """``args`` with the group's own options moved in front of the subcommand, so that
    ``schedcache load --redis URL FILE`` means ``schedcache --redis URL load FILE``.

    The walk follows the subcommands, so the value of a subcommand's own option is never taken
    for a global option, and stops at ``--``. A global option that ends the line without its
    value is click's usage error here: moved in front, it would take the subcommand's name."""
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
            elif _takes_value(option) and not inline and global_option is not None:
                # (`schedcache stats --cache` would run as `schedcache --cache stats`). Not while
                # the shell asks for candidates: the line ends where the user pressed TAB (found
                # in review: `schedcache --cache <TAB>` printed a traceback).
                if ctx is not None and ctx.resilient_parsing:
                    continue
                raise click.BadOptionUsage(token, f"Option '{token}' requires an argument.", ctx)
        elif not token.startswith("-") and isinstance(command, click.Group):
            # None: click reports the unknown name
            command = command.get_command(click.Context(command), token)
    return front + rest


def check_read_from(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        read_from_setting(value, "--read-from")
    except ValidationError as error:
        raise click.BadParameter(printable(error.reason), ctx, param) from None
    # A replica's URL is read as --redis's (found in review: none of its checks applied).
    problem = url_problem(value) if "://" in value else None
    if problem is not None:
        raise click.BadParameter(printable(problem), ctx, param)
    return value


# invoke_without_command: the callback sees a command line of options alone, to answer it with
# the usage screen; the two settings after it undo what it changes besides (click's usage
# screen for no arguments at all, and COMMAND shown as optional).
@click.group(
    cls=SchedcacheGroup,
    invoke_without_command=True,
    no_args_is_help=True,
    subcommand_metavar="COMMAND [ARGS]...",
)
@click.option(
    "--redis",
    "url",
    envvar=ENV_URL,
    default=None,
    metavar="URL",
    callback=check_redis_url,
    help="Redis URL (redis://, rediss://, unix://, redis+sentinel://, redis+cluster://; "
    f"see docs/deployment.md); default: ${ENV_URL}, else embedded fakeredis.",
)
@click.option(
    "--cache",
    "cache_name",
    envvar=ENV_CACHE,
    default="default",
    show_default=True,
    callback=check_cache_option,
    help=f"Cache name; default: ${ENV_CACHE} (not for demo), else 'default'.",
)
@click.option(
    "--timeout",
    type=Seconds(open_min=True),
    default=5.0,
    show_default=True,
    envvar=ENV_TIMEOUT,
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
    default="info",
    show_default=True,
    # (lower case: the help lists the choices so, and showed the default as INFO)
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="The least severe log records written (to stderr), any case.",
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
    if ctx.invoked_subcommand is None:  # `schedcache --cache X`: options, no command
        usage_screen(ctx)
    check_cache_variable(ctx, cache_name)  # (demo ignores $SCHEDCACHE_CACHE, a bad one too)
    logs.configure(log_level, log_format)
    given = ctx.get_parameter_source("cache_name") == ParameterSource.COMMANDLINE
    ctx.obj = Settings(url, cache_name, timeout, retry_for, wait_replicas, wait_timeout, given)
    ctx.obj.embedded = embedded
    ctx.obj.read_from = read_from


def usage_screen(ctx: click.Context) -> NoReturn:
    """The usage screen, ended as click ends a group called with no arguments at all (8.2 on:
    exit 2; 8.1: exit 0), so options without a command read the same as nothing (they ended
    in a bare "Missing command.")."""
    if hasattr(click.exceptions, "NoArgsIsHelpError"):
        raise click.exceptions.NoArgsIsHelpError(ctx)
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()


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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
