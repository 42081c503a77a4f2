"""The errors of Redis as the CLI says them: a lost connection named as a failed connect
names it, a command the user's ACL rules deny named with where the roles' rules come from.
Shared by the command group (every command's last catch) and the commands that add what
they had done (``load``'s counts)."""

from __future__ import annotations

import re

import click
import redis

from schedcache.cli.settings import TIMEOUT_SETTING, Settings
from schedcache.errors import CacheError
from schedcache.store.connection import EMBEDDED, NoAnswer, connection_failed


def lost_redis(ctx: click.Context, error: Exception) -> Exception:
    """A connection lost in the middle of a command (``events -f`` waiting, a long read) named
    as a failed connect names it, ``cannot reach Redis at URL: ...``; a call past the socket
    timeout, there or at connect, as ``Redis at URL did not answer: each try waited N s`` naming
    --timeout (or the URL's ``?socket_timeout=``, which redis-py takes over it); a command the
    user's ACL rules deny as :func:`denied_command` names it; other errors as they are
    (RetriesExhausted says itself what went unanswered)."""
    settings = ctx.obj if isinstance(ctx.obj, Settings) else None
    if isinstance(error, redis.exceptions.NoPermissionError):
        return denied_command(settings, error)
    lost = isinstance(error, (redis.ConnectionError, redis.TimeoutError))
    if lost and not isinstance(error, CacheError) and settings is not None:
        error = connection_failed(settings.url or EMBEDDED, {}, error, settings.timeout)
    if isinstance(error, NoAnswer):
        error.set_by(TIMEOUT_SETTING)
    return error


DENIED = re.compile(r"no permissions to run the '([^']+)' command")


def denied_command(settings: Settings | None, error: Exception) -> Exception:
    """A command this Redis user's ACL rules deny, named with where the rules of each role
    come from (found in review: redis-py's own wording, a pipeline's "Command # 1 (XTRIM
    ...) of pipeline caused error: ...", reached the user)."""
    found = DENIED.search(str(error))
    if found is None:
        return error
    cache = settings.cache_name if settings is not None else "CACHE"
    return click.ClickException(
        f"this Redis user may not run {found.group(1).upper()} (its ACL rules deny it): "
        f"`schedcache acl {cache} --role ROLE` prints what each role may run, and "
        "docs/security.md which role runs which command"
    )
