"""Check that a folder of wheels is closed under its requirements for CPython 3.12 on Linux.

.dev/run.sh installs the carried wheels with ``--no-deps``: a requirement nobody carried would
only show on the 16-core machine, as an ImportError minutes into the one command. This walks
from schedcache's own requirements (pyproject's dependencies, the kube and extender extras)
through every wheel's ``Requires-Dist`` (markers evaluated for 3.12 / Linux, extras followed)
and fails naming each requirement that no wheel satisfies, except those the machine has
(``PRESENT``). Stdlib plus pip's vendored ``packaging``.

    python3 bench/device/closure.py .dev/whl
"""

from __future__ import annotations

import sys
import tomllib
import zipfile
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # pip's own copy
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]

# What the 16-core machine has installed already (numpy is not carried: 18 MB).
PRESENT = {"numpy"}
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
}


def wheels(folder: Path) -> dict[str, tuple[str, list[Requirement]]]:
    """name -> (version, its Requires-Dist) of every wheel in the folder."""
    found = {}
    for path in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(path) as whl:
            meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
            text = whl.read(meta).decode()
        head = text.split("\n\n")[0].splitlines()
        fields = [f for f in (line.split(": ", 1) for line in head) if len(f) == 2]
        values = {k: v for k, v in fields if k in ("Name", "Version")}
        requires = [Requirement(v) for k, v in fields if k == "Requires-Dist"]
        found[canonicalize_name(values["Name"])] = (values["Version"], requires)
    return found


def missing(folder: Path, roots: list[Requirement]) -> list[str]:
    carried = wheels(folder)
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    todo = [(r, "pyproject.toml") for r in roots]
    while todo:
        requirement, parent = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in PRESENT:
            continue
        if name not in carried:
            problems.append(f"{requirement} (wanted by {parent}): no wheel")
            continue
        version, requires = carried[name]
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement} (wanted by {parent}): carried {version}")
        for extra in ["", *requirement.extras]:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for sub in requires:
                env = {**default_environment(), **TARGET, "extra": extra}
                # An extra's pass adds only what that extra marks (the base pass did the rest).
                wanted = sub.marker.evaluate(env) if sub.marker else not extra
                if wanted:
                    todo.append((sub, f"{name}=={version}"))
    return sorted(set(problems))


def main() -> None:
    folder = Path(sys.argv[1])
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    roots = [*project["dependencies"], *extras.get("kube", []), *extras.get("extender", [])]
    problems = missing(folder, [Requirement(r) for r in roots])
    for problem in problems:
        print(f"closure.py: {problem}", file=sys.stderr)
    if problems:
        raise SystemExit(f"closure.py: {len(problems)} requirement(s) not carried in {folder}")
    print(f"closure.py: {len(wheels(folder))} wheels, every requirement carried or present")


if __name__ == "__main__":
    main()
