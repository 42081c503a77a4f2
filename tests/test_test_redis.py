"""How the test session finds its real Redis (tests/servers.py: choose_test_redis), checked
without touching the running session's own server: the probes are passed in, and the one
server started here is a separate throwaway one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import (
    RedisChoice,
    choose_test_redis,
    redis_answers,
    server_url,
    start_test_redis,
)

ROOT = Path(__file__).resolve().parent.parent


def test_the_environment_variable_wins_and_is_never_second_guessed():
    # Even when nothing answers there: a typo must fail loudly, not fall back elsewhere.
    choice = choose_test_redis("redis://10.0.0.1:7000/3", have_redis_server=True)
    assert choice == RedisChoice(url="redis://10.0.0.1:7000/3")


def test_without_a_named_redis_the_session_starts_its_own():
    assert choose_test_redis(None, have_redis_server=True) == RedisChoice(start=True)
    assert choose_test_redis("", have_redis_server=True) == RedisChoice(start=True)


def test_without_redis_server_the_problem_is_one_line_saying_how_to_get_one():
    choice = choose_test_redis(None, have_redis_server=False)
    assert not choice.start and choice.url is None
    assert "\n" not in choice.problem
    # The suite never probes 6379 (someone's Redis): the message does not send anyone there.
    assert "6379" not in choice.problem and "no redis-server on PATH" in choice.problem
    for hint in ("apt-get install redis-server", "brew install redis", "SCHEDCACHE_TEST_REDIS_URL"):
        assert hint in choice.problem


def test_a_started_test_redis_answers_and_is_gone_after_kill(tmp_path):
    server = start_test_redis(tmp_path / "redis")
    try:
        url = server_url(server)
        assert redis_answers(url)
        assert server.client().info("server")["redis_version"] >= "7"
    finally:
        server.kill()
    assert not redis_answers(url, timeout=0.2)


def test_a_session_without_redis_fails_every_real_redis_test_with_that_line(tmp_path):
    """A pytest run in a subprocess whose PATH has no redis-server and whose URL answers
    nowhere: the real-Redis test fails (not skips) with the install hint."""
    test = tmp_path / "test_needs_redis.py"
    test.write_text("def test_real(client):\n    client.ping()\n")
    env = {k: v for k, v in os.environ.items() if k != "SCHEDCACHE_TEST_REDIS_URL"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, no redis-server
    env["PYTHONPATH"] = str(ROOT)
    # A named URL where nothing answers must fail with the same kind of one-line message.
    env["SCHEDCACHE_TEST_REDIS_URL"] = "redis://127.0.0.1:1/0"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",  # the suite's fixtures, for a test file outside tests/
            f"{test}::test_real[redis]",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    # A fixture that fails is an error in pytest's count: a failure, never a skip.
    assert "1 error" in result.stdout and "skipped" not in result.stdout
    assert "no Redis server answers at redis://127.0.0.1:1/0" in result.stdout
    assert "apt-get install redis-server" in result.stdout


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0"])
def test_redis_answers_is_false_for_a_dead_port(url):
    assert not redis_answers(url, timeout=0.2)
