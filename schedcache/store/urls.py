"""How a Redis URL is shown: with any password masked, for messages and logs. A module of its
own, below both ``connection`` (which reads URLs) and ``routing`` (whose replica URL a message
may name), so neither imports the other for it."""

from __future__ import annotations

import os
import re
from urllib.parse import unquote_plus

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
    return _OPTION.sub(_masked, url)


def password_options(url: str) -> list[str]:
    """The values of ``url``'s password options, as written (an unencoded ``&`` and what
    follows it without an ``=`` included)."""
    return [option[3] for option in _OPTION.finditer(url) if _is_password(option[2])]


def _masked(option: re.Match[str]) -> str:
    return f"{option[1]}{option[2]}=***" if _is_password(option[2]) else option[0]


def _is_password(name: str) -> bool:
    # By its name decoded, as redis-py reads it (found in review: ?%70assword= connected with
    # that password and was shown in clear).
    return unquote_plus(name).lower() in PASSWORDS


PASSWORDS = frozenset({"password", "sentinel_password", "ssl_password"})
# One option, "?name=value" or "&name=value"; the value runs on over "&" pieces without an "="
# (found in review: ?password=Open&Sesame was shown as ?password=***&Sesame).
_OPTION = re.compile(r"([?&])([^&=#]*)=([^&#]*(?:&[^&=#]*(?=&|#|$))*)")
