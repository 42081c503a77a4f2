"""The import direction goes down the layers only: read every module's imports (those under
``TYPE_CHECKING`` and inside functions too) and check each against the table below."""

from __future__ import annotations

import ast
from pathlib import Path

import schedcache

PACKAGE = Path(schedcache.__file__).parent

# Lowest first. A module may import its own unit and any unit of a lower layer; units of one
# layer do not import each other (views, history and ops stand side by side on the store).
LAYERS: list[set[str]] = [
    {"errors"},  # the exceptions every layer raises
    {"model"},  # values: pods, nodes, quantities, NodeInfo; reading manifests
    {"store"},  # one cache's Redis: keys, library, commands, replies, retry, batches, reads
    {"views", "history", "ops"},  # snapshots and the node tree; replay, audit; workers, leases
    {"cache"},  # the kube-style facade
    {"aio"},  # the same for asyncio: a second transport under the same commands
    {"feed", "sim"},  # loading a cache from manifests; the demo and replica simulation
    {"scheduler"},  # the reference scheduler: its loop and the Binding poster (feed's client)
    {"extender"},  # kube-scheduler's extender (its bind posts through the scheduler's binder)
    {"cli"},  # the command line
]
TOP = "__init__"  # schedcache/__init__.py: the public names, from anywhere


def unit_of(module: str) -> str:
    """``schedcache.store.batch`` -> ``store``; ``schedcache.cache`` -> ``cache``."""
    parts = module.split(".")
    assert parts[0] == "schedcache", module
    return parts[1] if len(parts) > 1 else TOP


def layer_of(unit: str) -> int:
    for index, units in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"schedcache.{unit} is in no layer of tests/test_layers.py")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    relative = path.relative_to(package.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1] if len(parts) > 1 else [*parts[:-1], "__init__"]
    return ".".join(parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every schedcache module ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("schedcache")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "schedcache":  # from schedcache import store, errors, ...
                found += [(node.lineno, f"schedcache.{a.name}") for a in node.names]
            elif node.module.startswith("schedcache."):
                found.append((node.lineno, node.module))
    return found


def violations(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, package)
        unit = unit_of(name)
        if unit == TOP or name == "schedcache.__init__":
            continue
        for line, module in imported_modules(path):
            target = unit_of(module)
            if target == unit:
                continue
            if target == TOP:
                out.append(f"{path.name}:{line} imports the package root (import a module)")
            elif layer_of(target) >= layer_of(unit):
                out.append(f"{name}:{line} imports {module}: {unit} may not depend on {target}")
    return out


def test_every_module_is_in_a_layer():
    for path in PACKAGE.rglob("*.py"):
        unit = unit_of(module_name(path))
        if unit != TOP:
            layer_of(unit)


def test_imports_only_go_down_the_layers():
    assert violations() == []


def test_the_check_sees_upward_and_sideways_imports(tmp_path):
    """The check itself works, on a small package of the same shape."""
    package = tmp_path / "schedcache"
    (package / "store").mkdir(parents=True)
    (package / "views").mkdir()
    (package / "store" / "probe.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from schedcache.cache import Cache\n"
    )
    (package / "views" / "probe.py").write_text(
        "def f():\n    from schedcache.history import replay\n"
    )
    (package / "views" / "fine.py").write_text("from schedcache.store import probe\n")
    assert violations(package) == [
        "schedcache.store.probe:3 imports schedcache.cache: store may not depend on cache",
        "schedcache.views.probe:2 imports schedcache.history: views may not depend on history",
    ]


# -- no import circle between files ------------------------------------------------------------


def module_file(module: str, package: Path = PACKAGE) -> Path | None:
    """The file of ``schedcache.x.y`` under ``package`` (a module or a package's __init__)."""
    base = package.parent.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Every file's schedcache imports, each resolved to a file: ``from schedcache.store
    import metrics`` is an edge to ``store/metrics.py``, ``from schedcache.store import
    Store`` one to ``store/__init__.py``. Imports under TYPE_CHECKING and inside functions
    count: a circle hidden in a function is still two files that need each other."""
    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        edges = graph.setdefault(str(path.relative_to(package.parent)), set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("schedcache")]
            elif (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").split(".")[0] == "schedcache"
            ):
                module = str(node.module)
                targets = [
                    f"{module}.{a.name}" if module_file(f"{module}.{a.name}", package) else module
                    for a in node.names
                ]
            for target in targets:
                file = module_file(target, package)
                if file is not None and file != path:
                    edges.add(str(file.relative_to(package.parent)))
    return graph


def import_circles(package: Path = PACKAGE) -> list[list[str]]:
    """The files that import each other, directly or round a longer circle: the strongly
    connected components of more than one file (Tarjan's algorithm, iteratively)."""
    graph = import_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles)


def test_no_two_files_import_each_other():
    assert import_circles() == []


def test_the_facade_stays_small():
    """cache.py holds the commands, the claims and the reads of the live state; the audit
    calls live in history/audit.py."""
    assert len((PACKAGE / "cache.py").read_text().splitlines()) <= 450


def test_the_circle_check_sees_circles_through_functions_and_type_checking(tmp_path):
    package = tmp_path / "schedcache"
    (package / "model").mkdir(parents=True)
    (package / "store").mkdir()
    (package / "model" / "__init__.py").write_text("")
    (package / "model" / "a.py").write_text("def f():\n    from schedcache.model.b import g\n")
    (package / "model" / "b.py").write_text("from schedcache.model import c\n")
    (package / "model" / "c.py").write_text("import schedcache.model.a\n")
    (package / "store" / "__init__.py").write_text("from schedcache.store.x import X\n")
    (package / "store" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from schedcache.store import Y\n"
    )
    (package / "store" / "y.py").write_text("from schedcache.store import x\n")  # no circle
    assert import_circles(package) == [
        ["schedcache/model/a.py", "schedcache/model/b.py", "schedcache/model/c.py"],
        ["schedcache/store/__init__.py", "schedcache/store/x.py"],
    ]
