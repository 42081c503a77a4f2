"""How a Redis URL is shown: with any password masked, for messages and logs. A module of its
own, below both ``connection`` (which reads URLs) and ``routing`` (whose replica URL a message
may name), so neither imports the other for it."""

from __future__ import annotations

import os
import re

from schedcache.errors import ValidationError

ENV_URL = "SCHEDCACHE_REDIS_URL"
EMBEDDED = "embedded"


def describe(url: str | None) -> str:
    """The URL for messages and logs, with any password masked (``user:***@``, and the
    ``password``/``sentinel_password``/``ssl_password`` query options)."""
    if url is not None and not isinstance(url, str):
        raise ValidationError("connect", "url", f"{url!r} is not a URL (a string)")
    url = url or os.environ.get(ENV_URL) or EMBEDDED
    head, credentials, host = userinfo(url)
    if credentials is not None and ":" in credentials:  # user:password -> user:***
        url = f"{head}{credentials.split(':', 1)[0]}:***@{host}"
    return PASSWORD_OPTION.sub(r"\1***", url)


def userinfo(url: str) -> tuple[str, str | None, str]:
    """``url`` as the text before its ``user:password``, that text (None without one), and
    the text after its ``@``.

    A password with an unencoded ``/``, ``?`` or ``#`` breaks the URL apart, so the ``@`` is
    looked for past them (with "://" or without: a URL written wrong may still hold a
    password); but an ``@`` after the ``?`` or ``#`` of a location that holds no credentials
    (``host:6379/0?client_name=a@b``) is the query's or fragment's own (found in review: that
    URL was shown as ``redis://host:***@b``)."""
    head, separator, rest = url.partition("://")
    if not separator or "@" not in rest:  # no "://", or the "@" before it
        head, separator, rest = "", "", url
    at = rest.rfind("@")
    query = _QUERY.search(rest)
    if query is not None and query.start() < at:  # an "@" in the query, or in a password
        before = rest.rfind("@", 0, query.start())
        if before >= 0 or _LOCATION.fullmatch(rest[: query.start()]):
            at = before  # the credentials before the query, or none
    if at < 0:
        return url, None, ""
    return head + separator, rest[:at], rest[at + 1 :]


PASSWORD_OPTION = re.compile(r"([?&](?:sentinel_|ssl_)?password=)([^&]*)", re.IGNORECASE)
_QUERY = re.compile(r"[?#]")
# What may stand before a URL's query when no credentials do: hosts (``host:port``, ``[::1]``,
# comma-separated) and a path (a database index, a master name, a socket's path).
_HOST = r"(?:\[[0-9A-Fa-f:.%\w]*\]|[^:/@\[\],]*)(?::[0-9]*)?"
_LOCATION = re.compile(rf"(?:{_HOST}(?:,{_HOST})*)?(?:/[^@]*)?")
