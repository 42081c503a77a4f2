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
    if "@" in url:  # (with "://" or without: a URL written wrong may still hold a password)
        head, separator, rest = url.partition("://")
        if not separator or "@" not in rest:  # no "://", or the "@" before it
            head, separator, rest = "", "", url
        credentials, host = rest.rsplit("@", 1)
        if ":" in credentials:  # user:password -> user:***
            url = f"{head}{separator}{credentials.split(':', 1)[0]}:***@{host}"
    return PASSWORD_OPTION.sub(r"\1***", url)


PASSWORD_OPTION = re.compile(r"([?&](?:sentinel_|ssl_)?password=)([^&]*)", re.IGNORECASE)
