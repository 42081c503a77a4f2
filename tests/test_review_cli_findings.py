"""Found in review (mended) of the stop's CLI changes: each test failed before its mend.

A URL written wrong never shows its password and is a usage error (exit 2) when found without
connecting, options redis-py takes but the cache cannot use included; ``events --count`` past
what XREVRANGE takes is a usage error; ``load`` of more than memory holds ends in one line.
The events test runs on every backend (the fixtures of tests/conftest.py), the URL tests
connect to nothing (port 1 refuses).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from schedcache import Cache
from schedcache.cli.app import main
from schedcache.store.connection import ENV_URL, url_problem
from tests.conftest import REAL_REDIS_URL, real_client
from tests.factories import keyspace, make_node
from tests.test_cli_fuzz import cli

__all__ = ["cli"]  # the fixture (a populated cache behind the CLI), defined there

SECRET = "hunter2"


@pytest.mark.parametrize(
    "url",
    [
        f"redis:/:{SECRET}@127.0.0.1:1/0",  # one slash short
        f"redis//u:{SECRET}@127.0.0.1:1/0",  # the colon missing
        f":{SECRET}@127.0.0.1:1",  # no scheme at all
    ],
)
@pytest.mark.parametrize("where", ["option", "environment"])
def test_a_url_without_its_scheme_separator_never_shows_its_password(url, where, monkeypatch):
    # scheme_of() quotes the whole URL as the "scheme" and describe() masks nothing without
    # "://": the usage error prints the password in clear.
    monkeypatch.delenv(ENV_URL, raising=False)
    if where == "option":
        result = CliRunner().invoke(main, ["--redis", url, "stats"])
    else:
        result = CliRunner(env={ENV_URL: url}).invoke(main, ["stats"])
    assert result.exit_code == 2, result.output
    assert SECRET not in result.output


def test_a_read_from_url_never_shows_its_password(monkeypatch):
    monkeypatch.delenv(ENV_URL, raising=False)
    result = CliRunner().invoke(main, ["--read-from", f"http://u:{SECRET}@127.0.0.1:1", "stats"])
    assert result.exit_code == 2, result.output
    assert SECRET not in result.output


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?foo=bar",
        "redis://127.0.0.1:1/0?ssl_cert_reqs=none",
        "redis://127.0.0.1:1/0?protocol=9",
        "rediss://127.0.0.1:1/0?ssl_cert_reqs=bogus",
        "unix://",
        # redis-py takes it; on a reachable server every command then ends in a traceback
        # ("TypeError: expected a bytes reply from Redis, got str", UnicodeDecodeError).
        "redis://127.0.0.1:1/0?decode_responses=true",
    ],
)
def test_a_redis_url_written_wrong_is_a_usage_error_not_an_unreachable_server(url, monkeypatch):
    # url_problem() promises "an unknown option" is found without connecting, and does so for
    # Sentinel and Cluster URLs (exit 2); for redis:// it passes, and connect()'s TypeError
    # reads "cannot reach Redis at ...: AbstractConnection.__init__() got an unexpected keyword
    # argument 'foo'", exit 1, though nothing was tried.
    monkeypatch.delenv(ENV_URL, raising=False)
    result = CliRunner().invoke(main, ["--redis", url, "stats"])
    assert result.exit_code == 2, result.output
    assert "cannot reach" not in result.output
    assert "AbstractConnection" not in result.output


@pytest.mark.parametrize("count", ["99999999999999999999", "9223372036854775808"])
def test_events_count_past_what_redis_takes_is_a_usage_error(cli, cache: Cache, count):
    # Count("events", min=1) has no max: Redis answers XREVRANGE ... COUNT 1e20 with "value is
    # not an integer or out of range", printed bare as "Error: ..." with exit 1, naming no option.
    before = keyspace(cache.client, cache.keys.pattern)
    result = cli("events", "--count", count)
    assert result.exit_code == 2, result.output
    assert "--count" in result.output
    assert keyspace(cache.client, cache.keys.pattern) == before


def test_decode_responses_in_a_reachable_url_ends_in_no_traceback(monkeypatch):
    # Real Redis only (the embedded fakeredis takes no URL). Today: exit 1 with a whole Python
    # traceback ending "TypeError: expected a bytes reply from Redis, got str".
    cache = Cache(real_client(), "review-decode")  # fails with the usual hint without a server
    cache.add_node(make_node("n1", "4", "8Gi"))
    monkeypatch.delenv(ENV_URL, raising=False)
    separator = "&" if "?" in REAL_REDIS_URL else "?"
    url = f"{REAL_REDIS_URL}{separator}decode_responses=true"
    try:
        result = CliRunner().invoke(main, ["--redis", url, "--cache", "review-decode", "stats"])
    finally:
        cache.clear()
    assert result.exit_code in (1, 2), result.output
    assert not isinstance(result.exception, (TypeError, UnicodeDecodeError)), result.exception


def test_load_of_more_than_memory_holds_ends_in_one_error_line(tmp_path, monkeypatch):
    """``load /dev/zero`` read until a MemoryError, which ended in a traceback."""
    from schedcache.cli import load as load_module

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.setattr(load_module, "decode_input", exhausted)
    manifest = tmp_path / "big.yaml"
    manifest.write_text("kind: Node\n")
    result = CliRunner().invoke(main, ["load", str(manifest)])
    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, MemoryError)
    assert "too large to read and parse in this process's memory: nothing was loaded" in (
        result.output
    )


# -- Found in the second review (mended) ------------------------------------------------------


@pytest.mark.parametrize(
    "option",
    [
        "maint_notifications_config=1",  # raised AttributeError in url_problem itself
        "oss_cluster_maint_notifications_handler=1",
        "retry=x",  # passed url_problem, then an AttributeError traceback at connect
        "socket_keepalive_options=x",
    ],
)
def test_an_option_that_takes_an_object_is_a_usage_error(option, monkeypatch):
    monkeypatch.delenv(ENV_URL, raising=False)
    url = f"redis://:{SECRET}@127.0.0.1:1/0?{option}"
    assert url_problem(url) is not None
    result = CliRunner().invoke(main, ["--redis", url, "stats"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and SECRET not in result.output


@pytest.mark.parametrize("option", ["foo=1", "decode_responses=true"])
def test_a_read_from_url_gets_the_checks_of_redis(option, monkeypatch):
    monkeypatch.delenv(ENV_URL, raising=False)
    url = f"redis://u:{SECRET}@127.0.0.1:1?{option}"
    result = CliRunner().invoke(main, ["--read-from", url, "stats"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--read-from'" in result.stderr and SECRET not in result.output


def test_decode_responses_false_is_the_default_and_taken():
    assert url_problem("redis://127.0.0.1:1/0?decode_responses=false") is None
    assert url_problem("redis://127.0.0.1:1/0?decode_responses=1") is not None
