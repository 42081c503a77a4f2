"""What a log line keeps of an error (``errors.log_reason``): sync, the extender's pending pods'
watch and the reference scheduler log an unreachable API server or Redis through it."""

from __future__ import annotations

import logging

import pytest
import urllib3

from schedcache.errors import REASON_CHARS, log_reason
from schedcache.extender.pending import PendingPods


def refused() -> urllib3.exceptions.MaxRetryError:
    """The error kubernetes' client raises for an API server that refuses the connection."""
    pool = urllib3.HTTPSConnectionPool("127.0.0.1", 1, retries=urllib3.Retry(total=0))
    try:
        pool.request("GET", "/api/v1/nodes?limit=500&resourceVersion=0&watch=false")
    except urllib3.exceptions.MaxRetryError as error:
        return error
    raise AssertionError("port 1 answered")


def test_a_long_error_keeps_its_end_where_the_reason_is():
    # Found in review (mended): cut at 200 characters from its start, urllib3's message lost
    # "Connection refused", which comes last.
    error = refused()
    assert len(str(error)) > REASON_CHARS
    reason = log_reason(error)
    assert "Connection refused" in reason and reason.startswith("HTTPSConnectionPool(")
    assert len(reason) <= REASON_CHARS


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ValueError("short\nsecond line"), "short"),
        (ValueError(""), "ValueError"),
        (ValueError("x" * REASON_CHARS), "x" * REASON_CHARS),
    ],
)
def test_a_short_error_is_its_first_line(error, expected):
    assert log_reason(error) == expected


def test_the_pending_pods_watch_logs_the_reason(caplog, monkeypatch):
    """The extender's watch of pending pods, its API server refusing: the log line says why."""

    class Refusing:
        def list_pod_for_all_namespaces(self, *_, **__):
            raise refused()

    pending = PendingPods(Refusing(), stale_after=5.0)
    monkeypatch.setattr(pending.stop, "wait", lambda _=None: pending.stop.set() or True)
    with caplog.at_level(logging.WARNING, logger="schedcache.extender.pending"):
        pending.run()
    lines = [r.getMessage() for r in caplog.records if "API server unavailable" in r.getMessage()]
    assert lines and "Connection refused" in lines[0]
