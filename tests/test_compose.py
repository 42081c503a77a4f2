"""docker-compose.yml runs commands the CLI has, and its walkthrough works as its comments say.

Docker is not needed: each schedcache service's ``command`` (appended to the image's
``ENTRYPOINT ["schedcache"]``) and ``environment`` are run through click's CliRunner, against
the test Redis instead of the stack's ``redis://redis:6379/0`` and with this test's own cache
name instead of ``demo``. ``docker compose run --rm SERVICE ARGS`` replaces the service's
command with ARGS and keeps its environment; the comment lines that show it are run too.
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from schedcache import Cache
from schedcache.cli.app import main
from tests.conftest import REAL_REDIS_URL, real_client

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES = {name: s for name, s in COMPOSE["services"].items() if s.get("build")}
STACK_URL = "redis://redis:6379/0"
STACK_CACHE = "demo"


def walkthrough() -> list[tuple[str, list[str]]]:
    """The ``docker compose run --rm SERVICE [ARGS]`` lines of the file's header comments."""
    runs = re.findall(r"^#\s+docker compose run --rm (\S+)([^#\n]*)", COMPOSE_TEXT, flags=re.M)
    return [(service, shlex.split(args)) for service, args in runs]


def test_the_image_runs_schedcache():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["schedcache"\]$', dockerfile, flags=re.M)


def test_every_compose_command_parses_with_the_cli():
    assert SERVICES, "no schedcache service in docker-compose.yml"
    runner = CliRunner()
    for name, service in SERVICES.items():
        argv = service["command"]
        # --help after the full command line: click rejects unknown subcommands and option
        # names (exit 2) and exits 0 without connecting to Redis. Values are not converted.
        result = runner.invoke(main, [*argv, "--help"], env=service.get("environment"))
        assert result.exit_code == 0, f"service {name}: {argv}: {result.output}"


def test_every_schedcache_service_finds_redis_and_the_cache_in_its_environment():
    # So that `docker compose run --rm cli <anything>`, which replaces the command, still
    # talks to the stack's cache.
    for name, service in SERVICES.items():
        environment = service.get("environment") or {}
        assert environment.get("SCHEDCACHE_REDIS_URL") == STACK_URL, name
        assert environment.get("SCHEDCACHE_CACHE") == STACK_CACHE, name


def test_every_schedcache_service_runs_as_deploy_runs_it():
    # The image's non-root user (no `user:` override) and a read-only root filesystem with a
    # writable /tmp, as deploy/'s pods (tests/test_deploy.py): what works here works there.
    for name, service in SERVICES.items():
        assert "user" not in service, name
        assert service.get("read_only") is True and "/tmp" in service.get("tmpfs", []), name


@pytest.fixture
def stack() -> Iterator[Any]:
    """``run(service, args=None)``: the service as ``docker compose run --rm`` would run it,
    on the test Redis and a cache of this test's own."""
    client = real_client()
    name = f"compose-{uuid.uuid4().hex[:8]}"

    def local(argv: list[str]) -> list[str]:
        """``argv`` with the stack's URL and ``--cache demo`` made this test's."""
        out = [REAL_REDIS_URL if arg == STACK_URL else arg for arg in argv]
        for index, arg in enumerate(out[:-1]):
            if arg == "--cache" and out[index + 1] == STACK_CACHE:
                out[index + 1] = name
        return [f"--cache={name}" if arg == f"--cache={STACK_CACHE}" else arg for arg in out]

    def run(service: str, args: list[str] | None = None) -> Result:
        spec = SERVICES[service]
        argv = local(spec["command"] if args is None else args)
        environment = {
            "SCHEDCACHE_REDIS_URL": REAL_REDIS_URL,
            "SCHEDCACHE_CACHE": name,
            **{k: str(v) for k, v in spec["environment"].items() if not k.startswith("SCHED")},
        }
        return CliRunner(env=environment).invoke(main, argv)

    run.cache = Cache(client, name)  # type: ignore[attr-defined]
    yield run
    run.cache.clear()  # type: ignore[attr-defined]


def test_the_walkthrough_shows_the_demos_cache(stack):
    steps = walkthrough()
    assert ("demo", []) in steps and ("cli", ["dump", "-o", "wide"]) in steps
    worker = stack("expiry", [*SERVICES["expiry"]["command"], "--once"])
    assert worker.exit_code == 0, worker.output
    for service, args in steps:
        result = stack(service, args or None)
        assert result.exit_code == 0, f"{service} {args}: {result.output}"
        if args[:1] == ["dump"]:
            names = [line.split()[0] for line in result.stdout.splitlines()[1:-1]]
            assert names == [f"node-{k}" for k in range(12)]
            claimed = stack.cache.pod_count()
            assert claimed > 100 and f"assumed pods: {claimed} " in result.stdout
    # The one-shot demo can run again (it resets its own cache, named in its command).
    again = stack("demo")
    assert again.exit_code == 0, again.output
    stats = stack("cli")
    counts = dict(line.split("\t") for line in stats.stdout.splitlines())
    assert counts["nodes"] == "12" and int(counts["pods"]) == stack.cache.pod_count() > 100
    assert stack.cache.verify() == []
