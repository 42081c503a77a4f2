"""Issue 41's new commands under the documented ACL users (docs/security.md): the feeder syncs
PodGroups; the scheduler claims gangs, keeps gang waits, nominates and denominates, and makes
the extender's timed claim; the reader lists gang waits, nominations and PodGroups (explain,
whatif). Nothing is denied (the ACL LOG stays empty) and the reader writes nothing. Real Redis
only: fakeredis has no ACL users (tests/test_acl.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner

from schedcache import Cache, connect
from schedcache.cli.app import main
from schedcache.model.values import Pod
from schedcache.ops.acl import ROLES
from schedcache.ops.gangwaits import GangWaits
from schedcache.store import nominations
from schedcache.store.podgroups import PodGroup, read_pod_group, sync_pod_group
from tests.factories import make_node, make_pod
from tests.servers import Server, free_port
from tests.test_acl import denials, make_user, url

GROUP = "default/train"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(free_port(), tmp_path_factory.mktemp("acl-gangs"), []).start()
    result = CliRunner().invoke(main, ["--redis", url(server, "default", ""), "scripts"])
    assert result.exit_code == 0, result.output
    yield server
    server.kill()


def member(name: str, node_name: str = "n1") -> Pod:
    labels = {"scheduling.x-k8s.io/pod-group": "train"}
    return make_pod(name, node_name, "100m", "1Mi", labels=labels, namespace="default")


def test_every_role_runs_its_gang_and_nomination_work_with_nothing_denied(
    server: Server,
) -> None:
    name = "tenant-g"
    users = {role: make_user(server, f"g-{role}", name, role) for role in ROLES}
    admin = Cache(connect(users["admin"]), name)
    admin.add_node(make_node("n1", cpu="4", mem="8Gi"))
    server.client().acl_log_reset()

    feeder = Cache(connect(users["feeder"]), name, replica="feeder-0")
    feeder.run(sync_pod_group(PodGroup(GROUP, 2, 30), "5"))

    scheduler = Cache(connect(users["scheduler"]), name, replica="sched-0", lease_ttl=5)
    waits = GangWaits(scheduler)
    waits.join(GROUP, 30, member("w0"), 1000)
    waits.join(GROUP, 30, member("w1"), 1001)
    scheduler.assume_gang([member("w0"), member("w1")], GROUP)
    waits.placed(GROUP, ["w0", "w1"])
    waits.join("default/other", None, member("o0"), 1002)
    waits.restart("default/other", ["o0"])
    waits.join("default/other", None, member("o1"), 1003)
    pre = make_pod("pre", "", cpu="1", mem="1Mi", priority=1000)
    scheduler.run(nominations.nominate_pod(pre, "n1"))
    scheduler.run(nominations.denominate_pod(pre))
    scheduler.run(nominations.nominate_pod(pre, "n1"))
    scheduler.assume_pod(pre.with_node("n1"), check_fit=True, deadline=30.0)  # timed claim

    reader = Cache(connect(users["reader"]), name)
    assert [w.group for w in GangWaits(reader).all()] == ["default/other"]
    assert nominations.read_nomination(reader.store, "pre") is None
    assert read_pod_group(reader.client, reader.keys, GROUP) == PodGroup(GROUP, 2, 30.0)
    for argv in (["explain", "pod", "default/o1"], ["stats"]):
        result = CliRunner().invoke(main, ["--redis", users["reader"], "--cache", name, *argv])
        assert result.exception is None or isinstance(result.exception, SystemExit), argv
        assert "Traceback" not in result.output and "NOPERM" not in result.output, result.output
    wait = server.client().hgetall(reader.keys.gang_wait(GROUP))
    with pytest.raises(redis.exceptions.NoPermissionError):  # refused by Redis: nothing written
        GangWaits(reader).join(GROUP, 30, member("w9"), 1004)
    assert denials(server) == ["g-reader: command hsetnx"]  # the reader's refused write only
    assert server.client().hgetall(reader.keys.gang_wait(GROUP)) == wait
    assert admin.verify() == []
