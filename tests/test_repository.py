"""What the repository holds: source, not the data a Redis started in it leaves behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What redis-server writes in its working directory: the RDB snapshot, AOF files (Redis 7
# keeps them in a directory), and the nodes file of a Cluster node.
REDIS_DATA = ("dump.rdb", "x.rdb", "appendonly.aof", "appendonlydir/appendonly.aof.1.base.rdb")


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_no_redis_data_file_is_committed():
    tracked = git("ls-files").splitlines()
    data = [path for path in tracked if path.endswith((".rdb", ".aof")) or "appendonlydir" in path]
    assert data == []


def test_gitignore_keeps_redis_data_files_out():
    """A test or a demo run from the repository's root leaves these behind; ``git add -A``
    must not pick them up (checked in the root and in a subdirectory)."""
    paths = [*REDIS_DATA, *(f"tests/{path}" for path in REDIS_DATA)]
    ignored = git("check-ignore", "--no-index", *paths).splitlines()
    assert sorted(ignored) == sorted(paths)
