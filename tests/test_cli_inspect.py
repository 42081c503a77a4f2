"""``schedcache dump``, ``get pod``, ``events``, ``worker expiry`` and metrics, on both backends.

The CLI is pointed at the test's own Redis client (fakeredis or real), so what it prints can be
compared with the library's view of the same cache.
"""

from __future__ import annotations

import json
import logging
import re

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from schedcache import Cache, Node
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.ops.logs import JsonFormatter, KeyValueFormatter
from schedcache.store.metrics import CacheCollector
from tests.factories import make_node, make_pod, node_manifest


@pytest.fixture
def run_cli(client, cache_name, monkeypatch):
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)

    def run(*args: str):
        return CliRunner().invoke(main, ["--cache", cache_name, *args], catch_exceptions=False)

    return run


def populate(cache: Cache) -> None:
    cache.add_node(make_node("n1", "4", "8Gi", labels={"topology.kubernetes.io/zone": "a"}))
    cache.add_node(make_node("gone", "2", "1Gi"))
    cache.add_pod(make_pod("web-0", "n1", "500m", "1Gi", namespace="prod"))
    cache.add_pod(make_pod("db-0", "gone", "1", "1Gi", namespace="prod"))
    cache.remove_node("gone")
    cache.assume_pod(make_pod("web-1", "n1", "250m", "1Gi", namespace="prod"))
    cache.add_pod(make_pod("early", "later", "100m", "1Mi"))


def test_dump_json_matches_the_cache(cache, run_cli):
    populate(cache)
    result = run_cli("dump", "-o", "json")
    assert result.exit_code == 0
    document = json.loads(result.output)
    assert document["generation"] == cache.generation()
    assert set(document["nodes"]) == {"n1", "gone", "later"}
    assert document["nodes"]["gone"]["ghost"] is True
    assert document["nodes"]["n1"]["requested"] == {"milli_cpu": 750, "memory": 2 << 30}
    assert document["nodes"]["n1"]["pods"] == ["prod/web-0", "prod/web-1"]
    assert document["assumed_pods"] == ["web-1"]


def test_dump_wide_is_a_table(cache, run_cli):
    populate(cache)
    result = run_cli("dump", "-o", "wide")
    lines = result.output.splitlines()
    assert lines[0].split()[:4] == ["NAME", "STATUS", "ZONE", "PODS"]
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert rows["n1"][2:4] == ["a", "2/110"]
    assert rows["gone"][1] == "Ghost" and rows["later"][1] == "Placeholder"
    assert "assumed pods: 1" in lines[-1]


def status_node(name: str, ready: str | None, cordoned: bool = False) -> Node:
    manifest = node_manifest(name, "1", "1Gi")
    manifest["status"]["conditions"] = [] if ready is None else [{"type": "Ready", "status": ready}]
    if cordoned:
        manifest["spec"] = {"unschedulable": True}
    return Node.from_k8s(manifest)


def test_dump_wide_status_follows_conditions_and_cordons_like_kubectl(cache, run_cli):
    for name, ready, cordoned in (
        ("up", "True", False),
        ("down", "False", False),
        ("unsure", "Unknown", False),
        ("silent", None, False),
        ("cordoned", "True", True),
    ):
        cache.add_node(status_node(name, ready, cordoned))
    result = run_cli("dump", "-o", "wide")
    assert result.exit_code == 0, result.output
    status = {line.split()[0]: line.split()[1] for line in result.output.splitlines()[1:-1]}
    assert status == {
        "up": "Ready",
        "down": "NotReady",
        "unsure": "Unknown",
        "silent": "Unknown",
        "cordoned": "Ready,SchedulingDisabled",
    }


def test_replay_wide_prints_the_same_table_as_dump(cache, run_cli):
    populate(cache)
    cache.add_node(status_node("cordoned", "True", cordoned=True))
    dumped = run_cli("dump", "-o", "wide")
    replayed = run_cli("replay", "-o", "wide")
    assert replayed.exit_code == 0, replayed.output
    assert replayed.output.splitlines()[:-1] == dumped.output.splitlines()[:-1]
    assert replayed.output.splitlines()[0].split()[:2] == ["NAME", "STATUS"]
    assert replayed.output.splitlines()[-1].startswith(dumped.output.splitlines()[-1])


def test_get_pod_by_name_and_uid(cache, run_cli):
    populate(cache)
    by_name = json.loads(run_cli("get", "pod", "web-1", "-n", "prod", "-o", "json").output)
    assert by_name["status"]["schedcache"]["state"] == "assumed"
    assert by_name["spec"]["nodeName"] == "n1" and by_name["metadata"]["name"] == "web-1"
    assert json.loads(run_cli("get", "pod", "prod/web-1", "-o", "json").output) == by_name
    assert json.loads(run_cli("get", "pod", "web-1", "-o", "json").output) == by_name  # uid
    missing = run_cli("get", "pod", "nope", "-n", "prod")
    assert missing.exit_code == 1
    assert missing.output == 'Error from server (NotFound): pods "nope" not found\n'


def test_events_lists_the_stream_and_the_last_n(cache, run_cli):
    populate(cache)
    everything = run_cli("events", "--no-headers").output.splitlines()
    assert len(everything) == cache.stream_length()
    assert [line.split()[1] for line in everything[:3]] == ["NodeAdded", "NodeAdded", "PodAdded"]
    # Pods by namespace/name, their uid as a field; nodes by name.
    assert everything[0].split()[4] == "n1"
    assert everything[2].split()[4] == "prod/web-0" and "uid=web-0" in everything[2].split()
    last_two = run_cli("events", "--count", "2", "--no-headers").output.splitlines()
    assert [line.split() for line in last_two] == [line.split() for line in everything[-2:]]
    since = everything[-3].split()[0]
    after = run_cli("events", "--since", since, "--no-headers").output.splitlines()
    assert [line.split() for line in after] == [line.split() for line in everything[-2:]]


@pytest.mark.parametrize("since", ["1_0s", "1_0", "0x10", "nan", "infs", "5 m", "s"])
def test_events_since_refuses_what_is_no_plain_duration(cache, run_cli, since):
    """Python's float() takes ``1_0`` (10) and ``0x..`` is no number: a duration is digits, a
    point, an exponent and a unit; refused before anything is read."""
    populate(cache)
    result = run_cli("events", "--since", since)
    assert result.exit_code == 2, result.output
    assert "is neither an event id" in result.output and "nor a duration" in result.output


@pytest.mark.parametrize("count", ["abc", "0", "-1", "1_0", "2.5"])
def test_events_count_that_is_no_whole_number_of_events_says_what_it_should_be(
    cache, run_cli, count
):
    # Found in review (mended): click's "'abc' is not a valid integer range".
    populate(cache)
    result = run_cli("events", "--count", count)
    assert result.exit_code == 2, result.output
    assert (
        f"Invalid value for '--count': '{count}' is not a whole number of events (from 1 to "
        "9223372036854775807)" in result.output
    )


def test_events_since_takes_a_duration_with_blanks_around_it(cache, run_cli):
    populate(cache)
    everything = run_cli("events", "--no-headers").output.splitlines()
    recent = run_cli("events", "--since", " 1h ", "--no-headers")
    assert recent.exit_code == 0 and recent.output.splitlines() == everything


def test_worker_expiry_once(make_cache, run_cli):
    cache = make_cache(ttl=1.0)
    pod = make_pod("p", "n1", "10m", "1Mi")
    cache.assume_pod(pod)
    seconds, _ = cache.client.time()
    cache.finish_binding(pod, now=seconds - 60)
    result = run_cli("--embedded", "worker", "expiry", "--once")  # the URL is the default
    assert result.exit_code == 0 and "expired 1 pod" in result.output
    assert cache.pod_count() == 0


def test_cache_sizes_are_read_at_scrape_time(cache):
    populate(cache)
    registry = CollectorRegistry()
    registry.register(CacheCollector(cache))
    text = generate_latest(registry).decode()
    name = cache.name
    assert f'schedcache_cache_size{{cache="{name}",type="nodes"}} 3.0' in text
    assert f'schedcache_cache_size{{cache="{name}",type="pods"}} 4.0' in text
    assert f'schedcache_cache_size{{cache="{name}",type="assumed_pods"}} 1.0' in text
    assert f'schedcache_stream_length{{cache="{name}"}} {cache.stream_length()}.0' in text


def test_command_counters_count_applied_and_rejected(cache):
    from schedcache.store.metrics import COMMANDS

    applied = COMMANDS.labels("add_node", "applied")._value.get()
    rejected = COMMANDS.labels("remove_node", "rejected")._value.get()
    cache.add_node(make_node("n1"))
    with pytest.raises(KeyError):
        cache.remove_node("nope")
    assert COMMANDS.labels("add_node", "applied")._value.get() == applied + 1
    assert COMMANDS.labels("remove_node", "rejected")._value.get() == rejected + 1


def test_log_formats():
    record = logging.makeLogRecord(
        {
            "name": "schedcache.ops.expiry",
            "levelname": "INFO",
            "msg": "expired %d pods",
            "args": (3,),
        }
    )
    record.cache = "prod a"
    line = KeyValueFormatter().format(record)
    assert 'level=info logger=schedcache.ops.expiry msg="expired 3 pods" cache="prod a"' in line
    assert json.loads(JsonFormatter().format(record))["msg"] == "expired 3 pods"


def test_history_names_pods_and_refuses_unknown_objects(cache, run_cli):
    populate(cache)
    pod = run_cli("history", "pod", "prod/web-1")
    assert pod.exit_code == 0, pod.output
    assert [line.split()[1] for line in pod.output.splitlines()] == ["PodAssumed"]
    assert pod.output.split()[4] == "prod/web-1"
    node = run_cli("history", "node", "n1")
    assert node.exit_code == 0 and "prod/web-0" in node.output
    for args, message in (
        (("history", "node", "nonode"), "Error: node nonode has no events in cache"),
        (("history", "pod", "nope/nope"), "Error: pod nope/nope has no events in cache"),
        (("history", "pod", "no-such-uid"), "Error: pod no-such-uid has no events in cache"),
    ):
        result = run_cli(*args)
        assert result.exit_code == 1 and result.stderr.startswith(message), result.output
        assert result.stdout == ""


def test_history_aligns_its_columns_and_names_pods_in_uid_only_events(cache, run_cli):
    """Before: one line per event joined by three spaces, so the columns wandered with each
    TYPE's length, and a BindingFinished line showed the pod's uid where `events` showed its
    namespace/name."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    pod = make_pod("web-0", "n1", "500m", "1Gi", namespace="prod")
    cache.assume_pod(pod)
    cache.finish_binding(pod)
    cache.add_pod(pod)
    for args in (("history", "pod", "prod/web-0"), ("history", "node", "n1")):
        result = run_cli(*args)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        types = [line.split()[1] for line in lines]
        assert {"PodAssumed", "BindingFinished", "PodAdded"} <= set(types), lines
        pod_lines = [line for line in lines if line.split()[1] != "NodeAdded"]
        assert all(line.split()[4] == "prod/web-0" for line in pod_lines), lines
        columns = {tuple(m.start() for m in re.finditer(r"\S+", line))[:5] for line in lines}
        assert len(columns) == 1, lines  # ID, TYPE, AGE, REPLICA, object: each at one column


def test_history_of_objects_whose_events_were_compacted_away(cache, run_cli):
    populate(cache)
    cache.checkpoint()
    cache.compact()
    for args in (
        ("history", "pod", "prod/web-0"),
        ("history", "pod", "web-0"),
        ("history", "node", "n1"),
    ):
        result = run_cli(*args)
        assert result.exit_code == 0, result.output
        assert result.stdout == ""
        assert (
            result.stderr.startswith("note: events before ") and "compacted away" in result.stderr
        )
    unknown = run_cli("history", "node", "nonode")
    assert unknown.exit_code == 1 and unknown.stderr.startswith("Error: node nonode has no events")


def test_history_and_explain_read_a_bare_name_as_kubectl_does(cache, run_cli):
    """Found in review: `history pod web-0` and `explain pod web-1` said the pod had no events
    or claim (a bare reference was read as a uid only), where `get pod web-0` showed it. A
    bare NAME that is no uid the cache knows is now default/NAME; a uid still is a uid."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    added = make_pod("web-0", "n1", "100m", "1Gi")  # namespace default
    cache.add_pod(added)
    claimed = make_pod("web-1", "n1", "100m", "1Gi")
    cache.assume_pod(claimed)
    history = run_cli("history", "pod", "web-0")
    assert history.exit_code == 0, history.output
    assert [line.split()[1] for line in history.stdout.splitlines()] == ["PodAdded"]
    by_uid = run_cli("history", "pod", added.uid)
    assert by_uid.exit_code == 0 and by_uid.stdout == history.stdout
    explained = run_cli("explain", "pod", "web-1")
    assert explained.exit_code == 0, explained.output
    assert explained.stdout.startswith("claim ") and " on n1: " in explained.stdout
    unknown = run_cli("history", "pod", "web-9")
    assert unknown.exit_code == 1 and unknown.stdout == ""
    assert unknown.stderr.startswith("Error: pod web-9 has no events in cache")
    assert "give NAMESPACE/NAME" in unknown.stderr
