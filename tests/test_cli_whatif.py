"""``schedcache whatif`` as a user meets it: a moment outside the stream is an error naming the
stream's ends, and the text output gives each unschedulable pod's reason, on every backend."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from schedcache import Cache
from schedcache.cli import app as cli_module
from schedcache.cli.app import main
from schedcache.ops.gangwaits import GangWaits
from schedcache.store.podgroups import PodGroup, sync_pod_group
from tests.factories import make_node, make_pod, pod_manifest


@pytest.fixture
def run_cli(client, cache, cache_name, monkeypatch):
    monkeypatch.setattr(cli_module.Settings, "client", lambda self: client)

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, ["--cache", cache_name, *args])

    return run


def ends(cache: Cache) -> tuple[str, str]:
    ids = [event.id for event in cache.events()]
    return ids[0], ids[-1]


def test_a_moment_outside_the_stream_names_its_first_and_last_event(cache, run_cli):
    cache.add_node(make_node("n1", "1", "1Gi"))
    cache.assume_pod(make_pod("p", "n1", "100m", "1Mi"))
    first, last = ends(cache)
    before = f"{int(first.split('-')[0]) - 1000}-0"
    after = f"{int(last.split('-')[0]) + 1000}-0"
    for moment, side in ((before, "before the first"), (after, "after the last")):
        result = run_cli("whatif", "--at", moment)
        assert result.exit_code == 1
        assert result.stderr.strip() == (
            f"Error: --at {moment} is {side} event of cache {cache.name}: its stream runs "
            f"from {first} to {last}"
        )
    assert "at None" not in run_cli("whatif", "--at", before).output


def test_the_text_output_gives_each_unschedulable_pods_reason(cache, run_cli, tmp_path):
    cache.add_node(make_node("only", "1", "2Gi"))
    _, at = ends(cache)
    pods = tmp_path / "pods.json"
    big = [pod_manifest(f"big{i}", "", "600m", "1Gi", uid=f"big{i}") for i in range(2)]
    pods.write_text(json.dumps({"kind": "List", "apiVersion": "v1", "items": big}))
    result = run_cli("whatif", "--at", at, "--pods", str(pods))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for policy in ("least-allocated", "most-allocated"):
        index = lines.index(f"{policy}: 1 pod unschedulable, first:")
        assert lines[index + 1].split("\t") == [
            "  node_info_cache_test/big1",
            f"policy {policy!r} chose no node; 0/1 nodes are available: 1 Insufficient cpu.",
        ]


def test_whatif_shows_the_groups_waiting_for_members_and_whether_they_fit(cache, run_cli):
    """Issue 41, item 5: gang waits. Before, whatif said nothing of them (a waiting group
    claims nothing, so no placement showed it)."""
    cache.add_node(make_node("n1", "4", "8Gi"))
    _, at = ends(cache)
    cache.assume_pod(make_pod("p", "n1", "100m", "1Mi"))
    cache.run(sync_pod_group(PodGroup("default/g", 3), "5"))
    waits = GangWaits(cache)
    for name, cpu, group in (("g-0", "1", "g"), ("g-1", "1", "g"), ("h-0", "8", "h")):
        pod = make_pod(name, "", cpu, "1Mi", namespace="default", uid=f"uid-{name}")
        waits.join(f"default/{group}", None, pod, 1000)
    result = run_cli("whatif", "--at", at)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index(
        f"gang waits (holding no room); would the pending members fit together at {at}:"
    )
    assert [line.split("\t") for line in lines[start + 1 : start + 3]] == [
        ["  default/g", "2/3 members pending", "fits: yes"],
        [
            "  default/h",
            "1/? members pending (no PodGroup in the cache)",
            "fits: no: member default/h-0: 0/1 nodes are available: 1 Insufficient cpu.",
        ],
    ]
    shown = json.loads(run_cli("whatif", "--at", at, "-o", "json").output)["gang_waits"]
    assert [(w["group"], w["min_member"], w["fits"]) for w in shown] == [
        ("default/g", 3, True),
        ("default/h", None, False),
    ]
    assert sorted(shown[0]["nodes"]) == ["default/g-0", "default/g-1"]
