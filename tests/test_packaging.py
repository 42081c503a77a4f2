"""What a user gets from ``pip install schedcache``: the built wheel carries the Lua library, and
installed into a fresh venv (no system site-packages) and run outside the source tree, its
console script loads every function and runs the demo.

Building uses an isolated build environment and installing fetches the dependencies from the
index (pip's own cache makes reruns quick). Takes about half a minute with a warm pip cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from schedcache.store.library import function_names

ROOT = Path(__file__).resolve().parent.parent
LUA_FILES = sorted((ROOT / "lua").glob("*.lua"))
TIMEOUT = 300  # seconds per step; the whole test usually takes well under a minute


def clean_env() -> dict[str, str]:
    """The environment without anything that could make the venv import the source tree or
    talk to another Redis than the embedded default."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SCHEDCACHE_REDIS_URL"):
        env.pop(name, None)
    return env


def run(*command: str | Path, cwd: Path) -> str:
    started = time.perf_counter()
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    print(f"{time.perf_counter() - started:6.1f}s  {' '.join(map(str, command))}")
    assert result.returncode == 0, (
        f"{command} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_source_tree(tmp_path):
    assert LUA_FILES, "no lua/*.lua in the source tree"

    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, ROOT, cwd=tmp_path)
    (wheel,) = dist.glob("schedcache-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for path in LUA_FILES:
            packaged = f"schedcache/lua/{path.name}"
            assert packaged in names, f"{packaged} is missing from {wheel.name}"
            assert archive.read(packaged) == path.read_bytes(), f"{packaged} differs"
        entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
        # (the console script starts in run, which answers a Ctrl-C while the CLI loads)
        assert "schedcache = schedcache.cli:run" in archive.read(entry_points).decode()

    env_dir = tmp_path / "venv"
    run(sys.executable, "-m", "venv", env_dir, cwd=tmp_path)
    python = env_dir / "bin" / "python"
    run(
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        wheel,
        cwd=tmp_path,
    )

    location = run(
        python,
        "-c",
        "import schedcache, pathlib; print(pathlib.Path(schedcache.__file__))",
        cwd=tmp_path,
    )
    installed = Path(location.strip()).resolve()
    assert installed.is_relative_to(env_dir.resolve()), f"not the venv's copy: {installed}"
    assert not installed.is_relative_to(ROOT), f"the source tree was imported: {installed}"
    lua_dir = run(
        python, "-c", "from schedcache.store.library import lua_dir; print(lua_dir())", cwd=tmp_path
    )
    assert Path(lua_dir.strip()) == installed.parent / "lua"

    script = env_dir / "bin" / "schedcache"
    listed = run(script, "scripts", cwd=tmp_path).split()
    for name in function_names():  # the source tree's build: the wheel ships the same files
        assert name in listed, f"{name} not listed by `schedcache scripts`: {listed}"

    demo = run(script, "demo", "--pods", "10", "--nodes", "3", cwd=tmp_path)
    assert "Summary" in demo
