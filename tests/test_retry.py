"""RetryPolicy: the waits it allows, and settings it refuses (no Redis involved)."""

from __future__ import annotations

import time

import pytest

from schedcache.errors import ValidationError
from schedcache.store.retry import NO_RETRY, RetryPolicy


def test_delays_double_up_to_the_cap_and_stop_at_the_attempts():
    policy = RetryPolicy(attempts=6, within=60.0, first_delay=0.1, max_delay=0.5)
    assert list(policy.delays()) == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]


def test_delays_stop_before_the_time_budget_is_spent():
    """The budget counts the waits the caller really sleeps."""
    policy = RetryPolicy(attempts=100, within=0.25, first_delay=0.1, max_delay=0.1)
    slept = []
    for delay in policy.delays():
        time.sleep(delay)
        slept.append(delay)
    assert slept == [0.1, 0.1]  # a third wait would end past 0.25 s


def test_no_retry_allows_no_resend():
    assert list(NO_RETRY.delays()) == []


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"attempts": -1}, "attempts"),
        ({"attempts": "3"}, "attempts"),
        ({"attempts": 2.5}, "attempts"),
        ({"within": -1}, "within"),
        ({"first_delay": "0.1"}, "first_delay"),
        ({"max_delay": True}, "max_delay"),
    ],
)
def test_nonsense_settings_are_refused_naming_the_field(settings, field):
    with pytest.raises(ValidationError, match=rf"retry policy: {field}: "):
        RetryPolicy(**settings)
