"""docker-compose.yml only runs commands the CLI has, with options it accepts."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from schedcache.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_every_compose_command_parses_with_the_cli():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    commands = {
        name: service["command"]
        for name, service in compose["services"].items()
        if service.get("build")
    }
    assert commands, "no schedcache service in docker-compose.yml"
    runner = CliRunner()
    for name, argv in commands.items():
        # --help after the full command line: click rejects unknown subcommands and option
        # names (exit 2) and exits 0 without connecting to Redis. Values are not converted.
        result = runner.invoke(main, [*argv, "--help"])
        assert result.exit_code == 0, f"service {name}: {argv}: {result.output}"


def test_compose_redis_keeps_an_append_only_file():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert compose["services"]["redis"]["image"].startswith("redis:7")


def test_compose_runs_the_expiry_worker_and_publishes_its_metrics():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    expiry = compose["services"]["expiry"]
    command = expiry["command"]
    assert command[command.index("worker") + 1] == "expiry"
    port = command[command.index("--metrics-port") + 1]
    assert f"{port}:{port}" in expiry["ports"]
    assert expiry["depends_on"]["redis"]["condition"] == "service_healthy"
