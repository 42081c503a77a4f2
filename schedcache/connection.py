"""Connecting to Redis: a real server from a URL, or the embedded fakeredis default."""

from __future__ import annotations

import os

import fakeredis
import redis

ENV_URL = "SCHEDCACHE_REDIS_URL"
EMBEDDED = "embedded"
# The Redis version fakeredis pretends to be: the oldest server schedcache supports.
EMBEDDED_VERSION = (7, 0)


def embedded_client(server: fakeredis.FakeServer | None = None) -> redis.Redis:
    """An in-process fakeredis client (with Lua), on a fresh server unless one is given."""
    server = server or fakeredis.FakeServer(version=EMBEDDED_VERSION)
    return fakeredis.FakeRedis(server=server)


def connect(url: str | None = None, **options: object) -> redis.Redis:
    """A Redis client for ``url``; ``None`` reads ``SCHEDCACHE_REDIS_URL``, else embedded.

    Replies stay bytes: pod and node objects are stored as msgpack.
    """
    url = url or os.environ.get(ENV_URL) or EMBEDDED
    if url == EMBEDDED:
        return embedded_client()
    return redis.Redis.from_url(url, **options)


def describe(url: str | None) -> str:
    """The URL for messages and logs, with any password masked."""
    url = url or os.environ.get(ENV_URL) or EMBEDDED
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0] if ":" in credentials else ""
        return f"{scheme}://{user}:***@{host}"
    return url
