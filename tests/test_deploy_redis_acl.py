"""The redis-single overlay's Redis with ACL users (issue 39 item 9), run here on a real server.

``redis.sh`` is started as its manifest starts it (the environment the StatefulSet gives), with
password files standing in for the Secret schedcache-redis-users: nothing is served without a
password, each component's user (rules made by ``schedcache acl``) runs its part with nothing
denied, and the rotation docs/kubernetes.md shows works as written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from schedcache import Cache, connect
from schedcache.cli.app import main
from schedcache.ops.acl import acl_rules
from schedcache.ops.expiry import ExpiryWorker
from tests.factories import make_node, make_pod
from tests.servers import free_port
from tests.test_deploy import COMPONENT_USERS, render

ROOT = Path(__file__).resolve().parent.parent
OVERLAY = ROOT / "deploy/overlays/redis-single"
USERS = ("admin", "feeder", "scheduler", "worker")


def rules_file() -> dict[str, str]:
    """users.acl.rules: user -> rules."""
    rules = {}
    for line in (OVERLAY / "users.acl.rules").read_text().splitlines():
        if line and not line.startswith("#"):
            user, text = line.split(" ", 1)
            rules[user] = text
    return rules


def test_the_users_rules_are_what_schedcache_acl_prints_for_the_deployed_cache() -> None:
    import yaml

    config = yaml.safe_load((ROOT / "deploy/base/config.yaml").read_text())
    cache = config["data"]["SCHEDCACHE_CACHE"]
    rules = rules_file()
    for user in ("feeder", "scheduler", "worker"):
        assert rules[user] == acl_rules(cache, user), user
    assert rules["probe"] == "reset on nopass resetchannels -@all +ping"
    # and the components log in as those users (deploy/overlays/redis-single/kustomization.yaml)
    assert set(COMPONENT_USERS.values()) <= set(rules)
    for obj in render("deploy/overlays/redis-single"):
        if obj["kind"] == "StatefulSet":
            (redis_container,) = obj["spec"]["template"]["spec"]["containers"]
            env = {e["name"]: e.get("value") for e in redis_container["env"]}
            assert env["RULES"] == "/scripts/users.acl.rules"


@dataclass
class Redis:
    port: int
    process: subprocess.Popen[bytes]
    passwords: dict[str, str]

    def url(self, user: str, password: str | None = None) -> str:
        secret = self.passwords[user] if password is None else password
        return f"redis://{user}:{secret}@127.0.0.1:{self.port}/0"

    def admin(self) -> redis.Redis:
        return redis.Redis.from_url(self.url("admin"))


def start(tmp_path: Path, passwords: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    users = tmp_path / "users"
    users.mkdir(exist_ok=True)
    for user, password in passwords.items():
        (users / user).write_text(password)
    port = free_port()
    env = {
        **os.environ,
        "RULES": str(OVERLAY / "users.acl.rules"),
        "USERS": str(users),
        "RUN": str(tmp_path),
        "DATA": str(tmp_path),
        "REDIS_PORT": str(port),
        "BIND": "127.0.0.1",
    }
    process = subprocess.Popen(
        ["sh", str(OVERLAY / "redis.sh")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    return process, port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Redis]:
    assert shutil.which("redis-server"), "these tests start redis-server: install it"
    passwords = {user: os.urandom(12).hex() for user in USERS}
    process, port = start(tmp_path, passwords)
    probe = redis.Redis(port=port, username="probe", password="any", socket_timeout=2)
    deadline = time.monotonic() + 10
    while True:
        try:
            if probe.ping():
                break
        except (redis.ConnectionError, redis.ResponseError):
            assert process.poll() is None, process.stdout.read()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "redis.sh did not start"
            time.sleep(0.05)
    yield Redis(port, process, passwords)
    process.kill()
    process.wait(timeout=10)


def test_nothing_is_served_without_a_password_and_protected_mode_is_on(server: Redis) -> None:
    anonymous = redis.Redis(port=server.port, socket_timeout=2)
    with pytest.raises(redis.exceptions.AuthenticationError):
        anonymous.ping()  # the default user is off
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(server.url("feeder", "wrong")).ping()
    probe = redis.Redis(port=server.port, username="probe", password="x")
    with pytest.raises(redis.exceptions.NoPermissionError):
        probe.get("{default}:gen")  # the probe may only PING
    assert server.admin().config_get("protected-mode") == {"protected-mode": "yes"}
    acl = server.admin().acl_list()
    assert any(line.startswith("user default off") for line in acl)


def test_each_component_runs_its_part_as_its_own_user(server: Redis, tmp_path: Path) -> None:
    admin = server.admin()
    loaded = CliRunner().invoke(main, ["--redis", server.url("admin"), "scripts"])
    assert loaded.exit_code == 0, loaded.output  # deploy/jobs/scripts, as the admin
    admin.acl_log_reset()
    feeder = Cache(connect(server.url("feeder")), "default", replica="sync-0")
    with feeder.batch() as batch:
        batch.add_node(make_node("n1", "4", "8Gi"))
        batch.add_pod(make_pod("fed", "n1", "100m", "64Mi"))
    scheduler = Cache(connect(server.url("scheduler")), "default", replica="extender-0")
    due = make_pod("due", "n1", "100m", "64Mi")
    scheduler.assume_pod(due, check_fit=True)
    scheduler.finish_binding(due, now=float(scheduler.client.time()[0]) - 3600)
    worker = Cache(connect(server.url("worker")), "default", replica="worker-0")
    assert ExpiryWorker(worker).run_once() == ["due"]
    worker.checkpoint()
    worker.compact()
    assert worker.verify() == []
    assert [e for e in admin.acl_log() if e["object"] != "client|setinfo"] == []
    with pytest.raises(redis.exceptions.NoPermissionError):
        Cache(connect(server.url("feeder")), "other").add_node(make_node("x"))


def test_a_password_rotation_as_docs_kubernetes_md_shows_it(server: Redis) -> None:
    """Add the new password beside the old, roll the component, take the old away."""
    admin, old, new = server.admin(), server.passwords["feeder"], os.urandom(12).hex()
    admin.execute_command("ACL", "SETUSER", "feeder", f">{new}")
    for password in (old, new):  # both work while the pods roll
        assert connect(server.url("feeder", password)).ping()
    admin.execute_command("ACL", "SETUSER", "feeder", f"<{old}")
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(server.url("feeder", old)).ping()
    assert connect(server.url("feeder", new)).ping()


def test_a_user_without_a_password_in_the_secret_stops_the_start(tmp_path: Path) -> None:
    process, _ = start(tmp_path, {"admin": "a", "feeder": "f", "scheduler": "s"})
    assert process.wait(timeout=10) == 1
    assert b"no password for worker" in process.stdout.read()  # type: ignore[union-attr]
