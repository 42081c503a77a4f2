"""What the repository holds: source, not the data a Redis started in it leaves behind."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


# -- the image: what it is built from is fixed ----------------------------------------------


def dockerfile_bases() -> list[str]:
    """The base image of every stage, ``ARG`` defaults substituted."""
    text = (ROOT / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.M))
    bases = re.findall(r"^FROM (\S+)", text, flags=re.M)
    return [re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], base) for base in bases]


def test_the_base_image_is_named_by_tag_and_digest():
    for base in dockerfile_bases():
        assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", base), base


def test_every_package_of_the_image_is_pinned():
    """constraints.txt pins each dependency the image installs (those of the package and of
    its kube and extender extras) to one version their specifiers allow, and the build uses
    it."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip wheel .*--constraint constraints\.txt '\.\[kube,extender\]'", dockerfile)
    assert "constraints.txt" in re.findall(r"^COPY (.*) \./$", dockerfile, flags=re.M)[0]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            pin = Requirement(line)
            (spec,) = pin.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(pin.name)] = spec.version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *(
        req for extra in ("kube", "extender") for req in project["optional-dependencies"][extra]
    )]  # fmt: skip
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned in constraints.txt: rerun .ci/lock-image"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]}: {text}"
