"""Connecting to Redis: a real server from a URL, or the embedded fakeredis default."""

from __future__ import annotations

import os
from typing import Any

import fakeredis
import redis

from schedcache.errors import CacheError

ENV_URL = "SCHEDCACHE_REDIS_URL"
EMBEDDED = "embedded"
# The Redis version fakeredis pretends to be: the oldest server schedcache supports.
EMBEDDED_VERSION = (7, 0)


def embedded_client(server: fakeredis.FakeServer | None = None) -> redis.Redis:
    """An in-process fakeredis client (with Lua), on a fresh server unless one is given."""
    server = server or fakeredis.FakeServer(version=EMBEDDED_VERSION)
    return fakeredis.FakeRedis(server=server)


SCHEMES = ("redis", "rediss", "unix")


class ConnectionFailed(CacheError):
    """The Redis settings are wrong or the server cannot be reached (the URL is named, with
    any password masked)."""


def connect(
    url: str | None = None,
    *,
    timeout: float = 5.0,
    connect_timeout: float = 2.0,
    check: bool = True,
    **options: Any,
) -> redis.Redis:
    """A Redis client for ``url``; ``None`` reads ``SCHEDCACHE_REDIS_URL``, else embedded.

    ``redis://``, ``rediss://`` (TLS: pass ``ssl_ca_certs``, ``ssl_certfile``,
    ``ssl_keyfile``), ``unix://``; user and password in the URL for ACL users. ``timeout`` and
    ``connect_timeout`` are socket timeouts in seconds. With ``check`` (the default) the server
    is pinged at once, so wrong or unreachable settings fail here, not at the first command.
    Replies stay bytes: pod and node objects are stored as msgpack.
    """
    url = url or os.environ.get(ENV_URL) or EMBEDDED
    if url == EMBEDDED:
        return embedded_client()
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in SCHEMES:
        raise ConnectionFailed(
            f"{describe(url)}: unsupported scheme {scheme or url!r}; use "
            "redis://, rediss:// or unix:// (or 'embedded')"
        )
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=connect_timeout, **options
        )
        if check:
            client.ping()
    except (redis.RedisError, ValueError, OSError) as error:
        raise ConnectionFailed(f"cannot reach Redis at {describe(url)}: {error}") from None
    return client


def describe(url: str | None) -> str:
    """The URL for messages and logs, with any password masked."""
    url = url or os.environ.get(ENV_URL) or EMBEDDED
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        if ":" in credentials:  # user:password -> user:***
            return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"
    return url
