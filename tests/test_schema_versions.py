"""Streams written by earlier event-schema versions still replay (recorded samples)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from schedcache import Cache
from tests.record_stream import summarize, summary

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("sample", sorted(p.name for p in FIXTURES.glob("stream-v*.jsonl")))
def test_recorded_stream_replays_to_its_recorded_state(cache: Cache, sample):
    lines = [json.loads(line) for line in (FIXTURES / sample).read_text().splitlines()]
    *entries, last = lines
    for entry in entries:
        fields = dict(entry["fields"])
        if entry["data"] is not None:
            fields["data"] = base64.b64decode(entry["data"])
        cache.client.xadd(cache.keys.events, fields)
    version = int(sample.removeprefix("stream-v").removesuffix(".jsonl"))
    assert {event.version for event in cache.events()} == {version}
    state = cache.replay()
    replayed = summarize(state.nodes, state.assumed_pods, state.generation)
    assert replayed == last["expected"]


def test_summary_helper_matches_a_live_cache(cache: Cache):
    from tests.record_stream import history

    history(cache)
    assert (
        summary(cache)
        == json.loads((FIXTURES / "stream-v1.jsonl").read_text().splitlines()[-1])["expected"]
    )
