"""The built wheel carries the Lua library: installed into a fresh venv, outside the source
tree, its console script loads every function."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*command: str | Path, cwd: Path) -> str:
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"{command}: {result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_installed_wheel_loads_every_lua_function(tmp_path):
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, ROOT, cwd=tmp_path)
    (wheel,) = dist.glob("schedcache-*.whl")
    lua_files = sorted(path.name for path in (ROOT / "lua").glob("*.lua"))
    with zipfile.ZipFile(wheel) as archive:
        packaged = sorted(
            Path(name).name for name in archive.namelist() if name.startswith("schedcache/lua/")
        )
    assert packaged == lua_files

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", wheel, cwd=tmp_path)
    location = run(python, "-c", "import schedcache; print(schedcache.__file__)", cwd=tmp_path)
    assert Path(location.strip()).is_relative_to(env_dir), "the source tree was imported"

    listed = run(env_dir / "bin" / "schedcache", "scripts", cwd=tmp_path).split()
    commands = [path.stem for path in (ROOT / "lua").glob("*.lua") if not path.name.startswith("_")]
    for name in ["sc_version", *(f"sc_{command}" for command in commands)]:
        assert name in listed
    demo = run(env_dir / "bin" / "schedcache", "demo", "--pods", "10", "--nodes", "3", cwd=tmp_path)
    assert "Summary" in demo
