"""Connecting to Redis: a real server from a URL, or the embedded fakeredis default."""

from __future__ import annotations

import codecs
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.cluster import ClusterNode
from redis.connection import URL_QUERY_ARGUMENT_PARSERS, parse_url
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel

from schedcache.errors import CacheError, ValidationError
from schedcache.store.commands import MAX_TIMEOUT, seconds
from schedcache.store.routing import ClusterClient
from schedcache.store.urls import EMBEDDED as EMBEDDED
from schedcache.store.urls import ENV_URL as ENV_URL
from schedcache.store.urls import describe as describe
from schedcache.store.urls import password_options

if TYPE_CHECKING:
    import fakeredis

# The Redis version fakeredis pretends to be: the oldest server schedcache supports.
EMBEDDED_VERSION = (7, 0)


def embedded_client(server: fakeredis.FakeServer | None = None) -> redis.Redis:
    """An in-process fakeredis client (with Lua), on a fresh server unless one is given.
    fakeredis is imported here, by the embedded backend only: it costs a command that talks to
    a real Redis 60 ms of start-up."""
    import fakeredis

    server = server or fakeredis.FakeServer(version=EMBEDDED_VERSION)
    return fakeredis.FakeRedis(server=server)


SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "redis+cluster", "rediss+cluster")


class ConnectionFailed(CacheError):
    """The Redis settings are wrong or the server cannot be reached (the URL is named, with
    any password masked)."""


class NoAnswer(ConnectionFailed):
    """Redis took the connection but did not answer a call within the socket timeout (a
    server stopped, swapping or busy in a long script), told apart from one that cannot be
    reached. ``where`` is the URL as :func:`describe` shows it, ``timeout`` the seconds,
    ``setting`` what set them (the CLI names its option; :data:`URL_TIMEOUT` when the URL's
    ``?socket_timeout=`` did, which overrides the keyword and the option). Each try: redis-py
    sends a call that timed out once more, so the whole wait is about twice that (found in
    review)."""

    def __init__(self, where: str, timeout: float, setting: str = "connect()'s timeout") -> None:
        self.where = where
        self.timeout = timeout
        self.setting = setting
        super().__init__(self._message())

    def _message(self) -> str:
        waited = f"each try waited {self.timeout:g} s ({self.setting})"
        return f"Redis at {self.where} did not answer: {waited}"

    def set_by(self, setting: str) -> None:
        """Name ``setting`` as what set the timeout (a command line's option: its user never
        called connect()), unless the URL's ``?socket_timeout=`` did. In place, so that what
        failed inside (``__context__``, which a caller may look at) stays."""
        if self.setting != URL_TIMEOUT:
            self.setting = setting
            self.args = (self._message(),)


def connect(
    url: str | None = None,
    *,
    timeout: float = 5.0,
    connect_timeout: float = 2.0,
    check: bool = True,
    **options: Any,
) -> redis.Redis | ClusterClient:
    """A Redis client for ``url``; ``None`` reads ``SCHEDCACHE_REDIS_URL``, else embedded.

    * ``redis://[user:password@]host:port/db``, ``unix:///path/redis.sock?db=0``;
    * ``rediss://`` for TLS: ``?ssl_ca_certs=/ca.pem`` (and ``ssl_certfile``, ``ssl_keyfile``
      for client certificates), in the URL or as keyword options;
    * ``redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/db]``: the
      primary that the Sentinels name, found again after a failover (``?sentinel_password=``
      when the Sentinels themselves need one);
    * ``redis+cluster://[user:password@]host:port[,host:port...]`` (``rediss+cluster://`` with
      TLS): Redis Cluster, through :class:`ClusterClient`.

    ``timeout`` and ``connect_timeout`` are socket timeouts in seconds (more than 0, at most
    an hour; anything else is a :class:`ValidationError`). With ``check`` (the
    default) the server is pinged at once, so wrong or unreachable settings fail here, not at
    the first command. Replies stay bytes: pod and node objects are stored as msgpack, so
    ``decode_responses=True``, an ``encoding`` other than UTF-8 (which the cache writes names
    in anyway: ``encoding="utf-8"``, in any spelling, is taken) and ``encoding_errors`` are
    refused before connecting: a :class:`ValidationError` as keywords, a
    :class:`ConnectionFailed` in the URL.
    """
    url, scheme = checked_url(url, timeout, connect_timeout, options)
    if url == EMBEDDED:
        return embedded_client()
    timeouts = {"socket_timeout": timeout, "socket_connect_timeout": connect_timeout}
    if not scheme.endswith("+cluster"):
        options.setdefault("retry", inner_retry())
    try:
        if scheme == "redis+sentinel":
            client: redis.Redis | ClusterClient = _sentinel_client(url, timeouts, options)
        elif scheme.endswith("+cluster"):
            client = _cluster_client(url, scheme == "rediss+cluster", timeouts, options)
        else:
            if check and scheme == "rediss":
                handshake_within(url, connect_timeout, options)
            client = redis.Redis.from_url(url, **timeouts, **options)
        if check:
            client.ping()
    except CONNECT_ERRORS as error:
        raise connection_failed(url, options, error, timeout) from None
    return client


def handshake_within(url: str, connect_timeout: float, options: dict[str, Any]) -> None:
    """Ping a ``rediss://`` server once, the TLS handshake included, within ``connect_timeout``.

    A server that does not speak TLS never answers the handshake (it waits for the end of a
    command line), and redis-py bounds the handshake by the socket timeout, resent once: 11 s
    to learn that the URL should say ``redis://``. This probe fails in ``connect_timeout``."""
    probe_options = {**options, "retry": Retry(NoBackoff(), 0)}
    probe = redis.Redis.from_url(
        url, socket_timeout=connect_timeout, socket_connect_timeout=connect_timeout, **probe_options
    )
    try:
        probe.ping()
    except redis.TimeoutError as error:
        raise redis.TimeoutError(
            f"no TLS handshake within {connect_timeout:g} s ({error}): is it a plain Redis "
            "without TLS? Use redis:// for that"
        ) from None
    finally:
        probe.close()


# What a wrong URL, option or unreachable server raises while connecting (TypeError: an option
# redis-py does not know, a typo or ssl_* on redis://).
CONNECT_ERRORS = (redis.RedisError, RedisClusterException, ValueError, TypeError, OSError)


def checked_url(
    url: str | None, timeout: float, connect_timeout: float, options: dict[str, Any]
) -> tuple[str, str]:
    """The URL to use (``None``: ``$SCHEDCACHE_REDIS_URL``, else embedded) and its scheme
    ("" for embedded); the timeouts, client ``options`` and the scheme checked (sync and
    asyncio alike)."""
    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        # 0 would make the socket non-blocking, nan/inf block or fail at random.
        if seconds(value, subject="connect", field=name, maximum=MAX_TIMEOUT) == 0:
            raise ValidationError("connect", name, "must be more than 0 seconds")
    for name, value in options.items():
        # As in a URL (found in review: decode_responses=True was taken, and every command
        # that read an object then failed with "expected a bytes reply").
        if _unusable(name, value):
            why = BYTES_REPLIES + UTF8_ONLY * (name == "encoding")
            raise ValidationError("connect", name, f"{value!r} cannot be used: {why}")
    if url is not None and not isinstance(url, str):
        raise ValidationError("connect", "url", f"{url!r} is not a URL (a string)")
    url = url or os.environ.get(ENV_URL) or EMBEDDED
    if url == EMBEDDED:
        return url, ""
    scheme = scheme_of(url)
    unusable = _unusable_part(url, scheme)
    if unusable is not None:
        raise ConnectionFailed(unusable)
    return url, scheme


def scheme_of(url: str) -> str:
    """The scheme of a server's URL; one schedcache cannot use is refused naming those it can.
    Only a scheme's own characters are quoted: text before a missing or misplaced ``://``
    may hold a password (found in review: ``redis:/:secret@host`` was quoted whole)."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in SCHEMES:
        if not scheme:
            what = "no scheme (no '://')"
        elif _SCHEME_CHARS.fullmatch(scheme):
            what = f"unsupported scheme {scheme!r}"
        else:
            what = "an unsupported scheme"
        raise ConnectionFailed(
            f"{describe(url)}: {what}; use one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
            + " (or 'embedded')"
        )
    return scheme


_SCHEME_CHARS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*", re.ASCII)

# Client options a URL or connect()'s keywords may name that the cache cannot work with: it
# reads Redis' replies as bytes and writes names as UTF-8 (found in review: decode_responses=
# true made every command end in a traceback); decode_responses only when true.
UNUSABLE_OPTIONS = frozenset({"decode_responses", "encoding", "encoding_errors"})
BYTES_REPLIES = "schedcache reads Redis' replies as bytes itself"
UTF8_ONLY = " and writes names as UTF-8 (only 'utf-8' may be named)"


def _unusable(name: str, value: object) -> bool:
    """Whether client option ``name`` (lower case) set to ``value`` is one the cache cannot
    work with: decode_responses only when true, encoding unless it is UTF-8 (redis-py's
    default: found in review, encoding="utf-8" was refused)."""
    if name == "decode_responses":
        return bool(value)
    if name == "encoding":
        return not is_utf8(value)
    return name in UNUSABLE_OPTIONS


def is_utf8(value: object) -> bool:
    """Whether ``value`` names UTF-8 in a spelling Python's codecs take (utf-8, UTF8,
    utf_8); not utf-8-sig, which is another codec."""
    if not isinstance(value, str):
        return False
    try:
        return codecs.lookup(value).name == "utf-8"
    except LookupError:
        return False


# Client options whose value is an object: from a URL's text they end in an AttributeError at
# connect, or already when the connection is built (found in review).
OBJECT_OPTIONS = frozenset(
    {
        "retry",
        "socket_keepalive_options",
        "connection_class",
        "redis_connect_func",
        "credential_provider",
        "event_dispatcher",
        "cache",
        "cache_config",
        "maint_notifications_config",
        "oss_cluster_maint_notifications_handler",
    }
)
_FALSE = frozenset({"", "0", "f", "false", "n", "no"})  # (redis-py's to_bool reads these so)


def _unusable_part(url: str, scheme: str) -> str | None:
    """What ``url`` (a server's) says that cannot be honoured, found without connecting: an
    option the cache cannot work with, a Sentinel or Cluster URL that does not read, a
    database or a ``#fragment`` that would be dropped without a word (found in review:
    ``/1x`` used database 0, ``/0/1`` database 1, a Cluster URL's ``/5`` database 0)."""
    if _credentials_break_the_url(url):
        return f"{describe(url)}: {BROKEN_CREDENTIALS}"
    problem = _unusable_option(url)
    if problem is not None:
        return problem
    try:
        _no_fragment(url)
        if scheme == "redis+sentinel":
            sentinel_settings(url)
        elif scheme.endswith("+cluster"):
            cluster_settings(url)
        else:
            _single_server_database(url, scheme)
    except (ValueError, TypeError) as error:
        return f"{describe(url)}: {_without_secrets(str(error), url, {})}"
    return None


def _credentials_break_the_url(url: str) -> bool:
    """Whether the text before the URL's last ``@`` (its user:password, all that describe()
    masks) holds a ``/``, ``?`` or ``#``: redis-py and url_parts() would take a piece of the
    password for a host, port, path or option, and their messages quote it (found in review:
    ``admin:K3y@ssw0rd.invalid?x@host`` dialled ``ssw0rd.invalid``, ``admin:2024?Open=Sesame@``
    was refused as the unknown option 'Open')."""
    credentials = _credentials(url)
    return credentials is not None and any(mark in credentials for mark in "/?#")


def _credentials(url: str) -> str | None:
    """The text between ``://`` and the URL's last ``@`` (its user:password), or None."""
    rest = url.split("://", 1)[-1]
    return rest.rsplit("@", 1)[0] if "@" in rest else None


BROKEN_CREDENTIALS = (
    "a '/', '?' or '#' before the last '@' breaks the URL apart; percent-encode them in user "
    "names and passwords (%2F, %3F, %23), and an '@' anywhere else (%40)"
)


def _no_fragment(url: str) -> None:
    """Refuse (ValueError) a ``#``: every reader drops it or takes it into a name or a
    password (found in review: ``redis+sentinel://h/mymaster#x`` asked for the master
    ``mymaster#x``)."""
    if "#" in url:
        raise ValueError(
            "a '#' part means nothing in a Redis URL (a '#' in a password is written %23)"
        )


def _single_server_database(url: str, scheme: str) -> None:
    """Refuse (ValueError) a database a single server's URL names that redis-py would not use
    as written."""
    parts = urlsplit(url)
    named = parse_qs(parts.query).get("db", [])
    if len(set(named)) > 1:  # (redis-py takes the first, Sentinel's reader the last)
        raise ValueError(f"two databases named: {' and '.join(f'?db={db}' for db in named)}")
    query_db = named[0] if named else None
    path = unquote(parts.path).strip("/")
    if scheme == "unix":
        path = ""  # (the socket's path, not a database)
    database_index(path or None, query_db)


def database_index(path_db: str | None, query_db: str | None) -> int:
    """The database a URL names in its path and/or ``?db=``, 0 when neither; ValueError for
    one that is not a number, or two that differ."""
    named = [text for text in (path_db, query_db) if text is not None]
    for text in named:
        if not _DIGITS.fullmatch(text):
            raise ValueError(f"database {text!r} is not a number (/0, /1, ...)")
    if len({int(text) for text in named}) > 1:
        raise ValueError(f"two databases named: /{path_db} and ?db={query_db}")
    return int(named[0]) if named else 0


_DIGITS = re.compile(r"[0-9]+")


# A URL's options that are seconds redis-py waits: held to what --timeout and connect()'s
# timeout take (found in review: ?socket_timeout=inf ended in a traceback, =0 or =-1 read as
# an unreachable server, =nan hung connect_async).
SECONDS_OPTIONS = frozenset({"socket_timeout", "socket_connect_timeout"})


def _seconds_problem(value: str) -> str | None:
    """Why a URL's timeout ``value`` cannot be used, or None: a number of seconds in
    (0, MAX_TIMEOUT], as --timeout."""
    try:
        number = float(value)
    except ValueError:
        return f"{value!r} is not a number of seconds"
    if not math.isfinite(number) or not 0 < number <= MAX_TIMEOUT:
        return f"{value!r}: must be more than 0 and at most {MAX_TIMEOUT:g} seconds"
    return None


def _unusable_option(url: str) -> str | None:
    query = url.partition("?")[2]
    for name, values in parse_qs(query, keep_blank_values=True).items():
        key = name.lower()
        # (redis-py takes the first, a check here the last: found in review. Two databases
        # are the database checks' own message.)
        if len(values) > 1 and key != "db":
            times = "twice" if len(values) == 2 else f"{len(values)} times"
            return f"{describe(url)}: option {name!r} given {times}; give it once"
        if key in SECONDS_OPTIONS:
            problem = _seconds_problem(values[0])
            if problem is not None:
                return f"{describe(url)}: option {name!r}: {problem}"
        # (decode_responses as redis-py's to_bool reads the text; the keywords' own check)
        value: object = values[0]
        if key == "decode_responses":
            value = values[0].strip().lower() not in _FALSE
        if _unusable(key, value):
            why = BYTES_REPLIES + UTF8_ONLY * (key == "encoding")
            return f"{describe(url)}: option {name!r} cannot be used: {why}"
        if key in OBJECT_OPTIONS:
            return f"{describe(url)}: option {name!r} takes an object and cannot be given in a URL"
    return None


def url_problem(url: str) -> str | None:
    """What is wrong with how ``url`` is written (its scheme, a port that is not a number, a
    Sentinel URL without its master name, an unknown option), None when it reads. Found
    without connecting, so a caller can tell a URL written wrong from a server that does not
    answer (the CLI makes the first a usage error, exit 2)."""
    if url == EMBEDDED:
        return None
    try:
        scheme = scheme_of(url)
        unusable = _unusable_part(url, scheme)
        if unusable is not None:
            return unusable
        if scheme in ("redis", "rediss", "unix"):  # (Sentinel and Cluster URLs: read above)
            if scheme == "unix" and not parse_url(url).get("path"):
                return f"{describe(url)}: no socket path (unix:///path/to/redis.sock)"
            # The client's connection built, not connected: redis-py checks its options only
            # there (found in review: ?foo=1, ?protocol=9 or a bad ssl_cert_reqs read as an
            # unreachable server).
            redis.ConnectionPool.from_url(url).make_connection()
    except ConnectionFailed as error:
        return str(error)
    except TypeError as error:
        unknown = re.search(r"unexpected keyword argument '([^']+)'", str(error))
        if unknown is not None:
            return f"{describe(url)}: " + _without_secrets(
                f"unknown option {unknown[1]!r}", url, {}
            )
        return f"{describe(url)}: {_without_secrets(str(error), url, {})}"
    except (ValueError, redis.RedisError) as error:
        return f"{describe(url)}: {_without_secrets(str(error), url, {})}"
    except Exception as error:  # an option redis-py takes but cannot build from text
        reason = _without_secrets(f"{type(error).__name__}: {error}", url, {})
        return f"{describe(url)}: an option cannot be used as written ({reason})"
    return None


def connection_failed(
    url: str, options: dict[str, Any], error: Exception, timeout: float | None = None
) -> ConnectionFailed:
    """The error for a failed connect, naming the URL with any password masked: a
    :class:`NoAnswer` for a call that ran past ``timeout`` (the socket timeout), once
    connected (found in review: read as "cannot reach Redis at URL")."""
    # (not the connect timeout's TimeoutError, nor the TLS handshake's: cannot reach). A
    # cluster client that found no startup node to answer raises its own error, from the last
    # node's (found in review: "cannot reach" for a startup node that took the connection).
    failed: BaseException = error
    if isinstance(error, RedisClusterException) and str(error).startswith(NO_STARTUP_NODE):
        failed = error.__cause__ or error
    timed_out = isinstance(failed, redis.TimeoutError) and str(failed).startswith(SOCKET_TIMEOUTS)
    if timed_out and timeout is not None:
        # (redis-py takes a URL's ?socket_timeout= over the keyword: name the one it used)
        from_url = url_socket_timeout(url)
        if from_url is not None:
            return NoAnswer(describe(url), from_url, URL_TIMEOUT)
        return NoAnswer(describe(url), timeout)
    if isinstance(error, redis.ResponseError) and "DB index is out of range" in str(error):
        # (the server answered: it is reachable, but has fewer databases than the URL names)
        return ConnectionFailed(
            f"Redis at {describe(url)} has no database {_database(url, options)} (its "
            "'databases' setting is lower)"
        )
    reason = _without_secrets(str(error), url, options)
    if isinstance(error, MasterNotFoundError):  # its text ends with the client's repr
        reason = reason.split(" : ")[0] + ": no Sentinel answered, or none knows that name"
    return ConnectionFailed(f"cannot reach Redis at {describe(url)}: {reason}")


URL_TIMEOUT = "the URL's socket_timeout"


def url_socket_timeout(url: str) -> float | None:
    """The ``?socket_timeout=`` of a single server's URL (``redis://``, ``rediss://``,
    ``unix://``), which redis-py uses instead of the ``socket_timeout`` keyword; None when the
    URL has none or it does not read (Sentinel and Cluster URLs refuse the option)."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return None
    try:
        value = parse_url(url).get("socket_timeout")
    except (ValueError, TypeError):
        return None
    return float(value) if isinstance(value, int | float) else None


# How redis-py's TimeoutError begins for a call that ran past the socket timeout (sync and
# asyncio): "Timeout reading from HOST:PORT", "Timeout writing to socket"; "Timeout connecting
# to server" is the connect timeout's.
SOCKET_TIMEOUTS = ("Timeout reading", "Timeout writing")
# How redis-py's cluster clients (sync and asyncio) begin the error of a start at which no
# startup node answered CLUSTER SLOTS; it is raised from the last node's error.
NO_STARTUP_NODE = "Redis Cluster cannot be connected"


def _database(url: str, options: dict[str, Any]) -> int:
    """The database index ``url`` selects (its path or ``?db=``, else the ``db`` option)."""
    if url.startswith("redis+sentinel://"):
        return sentinel_settings(url).db
    return int(parse_url(url).get("db", options.get("db", 0)))


def inner_retry() -> Retry:
    """redis-py's own resend of a call whose connection broke: once, at once. (Its default,
    10 times with up to 1 s between, would run inside each attempt of the cache's
    ``RetryPolicy`` and make the policy's ``within`` meaningless.) The one resend covers a
    pooled connection the server closed while idle."""
    return Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.1), 1)


def _without_secrets(text: str, url: str, options: dict[str, Any]) -> str:
    """``text``, unless it quotes a password or a piece of one: a password with an unencoded
    ``/``, ``?`` or ``#`` breaks the URL apart, and the parser's message quotes the pieces."""
    secrets = password_options(url)
    secrets += [str(v) for k, v in options.items() if k.endswith("password") and v]
    credentials = _credentials(url)
    if credentials is not None:
        secrets.append(credentials.partition(":")[2])
    # Decoded too: a message may quote a piece with its percent-escapes undone (found in
    # review: the database refusal quoted "def@host" of the password "abc/d%65f").
    secrets += [unquote(secret) for secret in secrets]
    pieces = {piece for secret in secrets for piece in re.split(r"[/?#&]", secret) if piece}
    if any(piece in text for piece in pieces):
        return WITHHELD
    return text


WITHHELD = (
    "the error quotes part of a password, so it is not shown; percent-encode any "
    "'/', '?', '#', '@' or '&' in user names and passwords (%2F, %3F, %23, %40, %26)"
)


@dataclass(frozen=True)
class UrlParts:
    """``scheme://[user:password@]host:port[,host:port...][/path][?query]``, taken apart."""

    username: str | None
    password: str | None
    hosts: list[tuple[str, int]]
    path: list[str]
    query: dict[str, str]


def url_parts(url: str, default_port: int) -> UrlParts:
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    location, _, path = rest.partition("/")
    username = password = None
    if "@" in location:
        credentials, location = location.rsplit("@", 1)
        user, has_password, secret = credentials.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    hosts = []
    for host in filter(None, location.split(",")):
        # (a bracketed IPv6 address without a port takes the default: found in review)
        bare = ":" not in host or host.endswith("]")
        name, _, port = (host, "", str(default_port)) if bare else host.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"bad port in {host!r}")
        hosts.append((name.strip("[]"), int(port)))
    if not hosts:
        raise ValueError("no host:port given")
    options = parse_qs(query)
    for name, values in options.items():
        if len(set(values)) > 1:  # (its values unquoted: it may be a password)
            raise ValueError(f"option {name!r} given twice, with different values")
    return UrlParts(
        username,
        password,
        hosts,
        [unquote(p) for p in path.split("/") if p],
        {k: v[-1] for k, v in options.items()},
    )


@dataclass(frozen=True)
class SentinelSettings:
    """What a ``redis+sentinel://`` URL says (sync and asyncio clients are built from it)."""

    hosts: list[tuple[str, int]]
    master: str
    db: int
    username: str | None
    password: str | None
    sentinel_password: str | None


def sentinel_settings(url: str) -> SentinelSettings:
    parts = url_parts(url, default_port=26379)
    if not parts.path:
        raise ValueError("no master name: redis+sentinel://host:port/<master name>")
    query = dict(parts.query)
    sentinel_password = query.pop("sentinel_password", None)
    _drop_utf8_encoding(query)
    if len(parts.path) > 2:  # (found in review: dropped without a word)
        raise ValueError(
            f"{'/'.join(parts.path[2:])!r} after the database: "
            "redis+sentinel://host:port/<master name>[/db]"
        )
    db = database_index(parts.path[1] if len(parts.path) > 1 else None, query.pop("db", None))
    if query:
        raise ValueError(f"unknown options {sorted(query)}")
    return SentinelSettings(
        parts.hosts, parts.path[0], db, parts.username, parts.password, sentinel_password
    )


def _sentinel_client(url: str, timeouts: dict[str, float], options: dict[str, Any]) -> redis.Redis:
    primary: redis.Redis = sentinel_primary(Sentinel, inner_retry(), url, timeouts, options)
    return primary


def sentinel_primary(
    sentinel_class: Any, retry: Any, url: str, timeouts: dict[str, float], options: dict[str, Any]
) -> Any:
    """The client of the primary Sentinel names for ``url``, with ``sentinel_class`` (redis-py's
    sync or asyncio ``Sentinel``) and its ``retry``: one reading of the URL for both."""
    settings = sentinel_settings(url)
    sentinel_kwargs: dict[str, Any] = {**timeouts, "retry": retry}
    if settings.sentinel_password is not None:
        sentinel_kwargs["password"] = settings.sentinel_password
    sentinel = sentinel_class(
        settings.hosts,
        sentinel_kwargs=sentinel_kwargs,
        username=settings.username,
        password=settings.password,
        db=settings.db,
        **timeouts,
        **options,
    )
    return sentinel.master_for(settings.master)


def cluster_settings(url: str) -> tuple[UrlParts, dict[str, Any]]:
    """The hosts and credentials of a ``redis+cluster://`` URL, and its ``ssl_*`` options."""
    parts = url_parts(url, default_port=6379)
    if parts.path and (len(parts.path) > 1 or database_index(parts.path[0], None) != 0):
        # (found in review: /5 was dropped without a word, and every key went to database 0)
        raise ValueError(
            f"{'/' + '/'.join(parts.path)!r}: Redis Cluster has database 0 only (no path)"
        )
    # As redis-py reads them from a single server's URL: ssl_check_hostname=false is False.
    tls_options: dict[str, Any] = {
        k: cast(Callable[[str], Any], URL_QUERY_ARGUMENT_PARSERS.get(k, str))(parts.query.pop(k))
        for k in list(parts.query)
        if k.startswith("ssl_")
    }
    _drop_utf8_encoding(parts.query)
    if parts.query:
        raise ValueError(f"unknown options {sorted(parts.query)}")
    return parts, tls_options


def _drop_utf8_encoding(query: dict[str, str]) -> None:
    """A Sentinel or Cluster URL's ``?encoding=utf-8`` is taken, as a single server's is:
    UTF-8 is the clients' default (any other encoding is refused before this reads it)."""
    if is_utf8(query.get("encoding")):
        del query["encoding"]


def _cluster_client(
    url: str, tls: bool, timeouts: dict[str, Any], options: dict[str, Any]
) -> ClusterClient:
    client: ClusterClient = cluster_client(ClusterClient, ClusterNode, url, tls, timeouts, options)
    return client


def cluster_client(
    client_class: Any,
    node_class: Any,
    url: str,
    tls: bool,
    timeouts: dict[str, Any],
    options: dict[str, Any],
) -> Any:
    """A cluster client for ``url`` with ``client_class`` and ``node_class`` (redis-py's sync
    or asyncio ones): one reading of the URL for both."""
    parts, tls_options = cluster_settings(url)
    return client_class(
        startup_nodes=[node_class(host, port) for host, port in parts.hosts],
        username=parts.username,
        password=parts.password,
        ssl=tls,
        **tls_options,
        **timeouts,
        **options,
    )
