"""Many tenants on one Redis (issue 44): what one tenant's processes expose to others and how
they share a server (/metrics on loopback by default, ...)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from schedcache.cli.app import main
from tests.conftest import REAL_REDIS_URL
from tests.servers import free_port


def listening_addresses(port: int) -> set[str]:
    """The local addresses a TCP socket listens on at ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


@pytest.mark.parametrize(
    "argv",
    [
        ["metrics", "--port", "{port}"],
        ["worker", "expiry", "--metrics-port", "{port}"],
    ],
    ids=["metrics", "worker expiry"],
)
def test_metrics_listen_on_loopback_unless_told(argv: list[str], tmp_path: Path) -> None:
    for address, expected in ((None, {"0100007F"}), ("0.0.0.0", {"00000000"})):
        port = free_port()
        words = [word.format(port=port) for word in argv]
        if address is not None:
            words += ["--address" if argv[0] == "metrics" else "--metrics-address", address]
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "schedcache.cli",
                "--redis",
                REAL_REDIS_URL,
                "--cache",
                f"bind-{port}",
                *words,
            ],
            env={**os.environ},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 20
            while not listening_addresses(port) and time.monotonic() < deadline:
                assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
                time.sleep(0.05)
            assert listening_addresses(port) == expected, (address, listening_addresses(port))
        finally:
            process.terminate()
            process.wait(timeout=10)


def test_every_metrics_address_option_defaults_to_loopback() -> None:
    """sync's as well (it needs an API server to run: its option is checked here)."""
    seen = []
    for command in (main.commands["sync"], main.commands["metrics"]):
        seen += [p for p in command.params if p.name in ("metrics_address", "address")]
    worker = main.commands["worker"]
    assert isinstance(worker, click.Group)
    seen += [p for p in worker.commands["expiry"].params if p.name == "metrics_address"]
    assert len(seen) == 3 and {p.default for p in seen} == {"127.0.0.1"}
