"""``schedcache worker compact``: the retention worker from the command line."""

from __future__ import annotations

from click.testing import CliRunner

from schedcache.cli.app import main
from tests.conftest import backend_url
from tests.factories import make_node, make_pod


def run(request, backend, cache, *args):
    url = backend_url(backend, request)
    if url == "embedded":  # the embedded backend lives in this process: share its client
        return None
    return CliRunner().invoke(main, ["--redis", url, "--cache", cache.name, *args])


def test_compact_once_trims_old_events_and_keeps_the_audit_clean(request, backend, cache):
    cache.add_node(make_node("n1", "4", "8Gi"))
    for i in range(5):
        cache.add_pod(make_pod(f"p{i}", "n1"))
    result = run(request, backend, cache, "worker", "compact", "--keep", "0.001s", "--once")
    if result is None:  # embedded: each CLI run has a cache of its own, empty
        refused = CliRunner().invoke(main, ["worker", "compact", "--keep", "1m", "--once"])
        assert refused.exit_code == 2 and "--embedded to run on it anyway" in refused.output
        args = ["--embedded", "worker", "compact", "--keep", "1m", "--once"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        assert "removed 0 events; stream 0 events" in result.output
        return
    assert result.exit_code == 0, result.output
    assert "removed" in result.output
    assert cache.stream_length() < 6
    assert cache.verify() == []
    assert cache.replay().nodes == cache.dump().nodes


def test_compact_refuses_a_bad_keep_with_one_error_line(request, backend, cache):
    before = cache.client.keys(f"{cache.keys.prefix}*")
    for bad in ("nan", "-1h", "1x", "h", "0"):
        result = run(request, backend, cache, "worker", "compact", "--keep", bad, "--once")
        if result is None:
            result = CliRunner().invoke(main, ["worker", "compact", "--keep", bad, "--once"])
        assert result.exit_code == 2, (bad, result.output)
        assert "Traceback" not in result.output
    assert cache.client.keys(f"{cache.keys.prefix}*") == before


def test_bad_keeps_are_named_as_what_they_should_be(request, backend, cache):
    # Found in review (mended): "'5x' is not a number of seconds" for an option that takes
    # durations, the bound printed as 3.1536e+08, and a count past a C long reaching Redis as
    # "value is not an integer or out of range" (exit 1).
    before = cache.client.keys(f"{cache.keys.prefix}*")
    cases = [
        (["worker", "compact", "--keep", "5x", "--once"], "is not a duration (e.g. 90s"),
        (["worker", "compact", "--keep", "-1", "--once"], "at most 315360000 seconds"),
        (["worker", "compact", "--keep-events", str(2**63), "--once"], "0<=x<=9223372036854775807"),
        (["compact", "--keep", str(2**63)], "0<=x<=9223372036854775807"),
    ]
    for args, message in cases:
        result = run(request, backend, cache, *args)
        if result is None:
            result = CliRunner().invoke(main, ["--embedded", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
    assert cache.client.keys(f"{cache.keys.prefix}*") == before
