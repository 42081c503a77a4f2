"""ACL rules per role, derived from the code: what ``schedcache acl CACHE --role ROLE`` prints.

Two sources, both read from the code, never kept by hand:

* the Lua functions' commands (``schedcache.store.commandset``). A role that may ``FCALL`` gets
  every one of them: ``FCALL`` reaches every function, and a function denied a command after
  its first write would leave that write behind. The reader only calls read functions with
  ``FCALL_RO`` (where Redis refuses writes), so it gets their read commands only;
* the plain commands the Python side sends, found in the package's syntax trees: redis-py
  command methods called on a Redis client or pipeline (``client.xrange(...)``,
  ``pipe.hset(...)``), commands spelt out (``execute_command("WAIT", ...)``, ``("FCALL", ...)``
  tuples), and transactions (``pipeline()`` is ``MULTI``/``EXEC``). Which parts of the
  package a role runs (``ROLE_PARTS``) decides which of their writes it gets; every role may
  read what any part reads. Admin work (loading the library, ``Cache.clear``) stays the
  admin's.

The rules grant no ``SELECT``: every restricted user's cache lives in database 0, where a
cache name is one set of keys (ACL key patterns ignore the database, docs/security.md).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from schedcache.errors import ValidationError
from schedcache.store.commandset import command_table
from schedcache.store.keys import Keys
from schedcache.store.library import library_commands

PACKAGE = Path(__file__).resolve().parents[1]

ROLES = ("reader", "feeder", "scheduler", "worker", "admin")

# The parts of the package (paths under schedcache/) whose writes each role makes. Reads are
# every role's; the admin runs everything.
ROLE_PARTS: dict[str, tuple[str, ...]] = {
    "reader": (),
    "feeder": ("feed/", "store/"),
    "scheduler": ("scheduler/", "extender/", "ops/leases.py", "ops/queue.py", "store/", "aio/"),
    "worker": ("ops/", "history/", "store/", "aio/"),
    "admin": ("",),
}
# Functions whose commands are the admin's alone: loading the library, SCAN (it lists every
# key name on the server: Cache.clear, and is_empty, which does without it when refused),
# CONFIG GET (it shows the server's passwords too: the eviction check says it cannot tell).
ADMIN_FUNCTIONS = frozenset(
    {"ensure_loaded", "clear", "is_empty", "scripts", "loaded_libraries", "check_eviction"}
)
# Variables that hold a Redis client or pipeline where the package sends plain commands.
REDIS_RECEIVER = re.compile(
    r"(^|[._])(client|pipe|server|replica|primary|connection|admin)(\(\))?$|route\.get\(\)$"
)
# Calls whose first argument spells a command out.
COMMAND_SENDERS = frozenset({"execute_command", "_server", "send_command", "call", "reply"})
# redis-py methods named otherwise than the command they send.
METHOD_ALIASES = {
    "delete": "del",
    "scan_iter": "scan",
    "config_get": "config|get",
    "function_load": "function|load",
}
# Parts of the package that are not a deployed role's: the demo and simulations (embedded, or
# an admin's server: they read INFO).
NOT_DEPLOYED = ("sim/",)
# Options that add what redis-py's cluster client and replica reads ask (docs/security.md).
CLUSTER_COMMANDS = ("cluster|slots", "command")
REPLICA_READ_COMMANDS = ("role", "readonly")


@dataclass(frozen=True)
class Use:
    """One plain command sent from ``path`` (relative to the package) inside ``function``."""

    command: str
    path: str
    function: str

    @property
    def admin_only(self) -> bool:
        return self.function in ADMIN_FUNCTIONS or self.command.startswith("function|")


def command_name(word: str) -> str | None:
    """The ACL name of a command spelt ``word`` (a method or a command word), if it is one."""
    word = word.lower()
    word = METHOD_ALIASES.get(word, word)
    table = command_table()
    for name in (word, word.replace("_", "|", 1)):
        if name in table or name in METHOD_ALIASES.values():
            return name
    return word if _documented_command(word) else None


def _documented_command(word: str) -> bool:
    """Whether redis-py's method ``word`` sends the command ``word`` (its docstring links to
    the command's page): the commands fakeredis does not implement (WAIT, ROLE, ...)."""
    method = getattr(redis.Redis, word, None)
    return f"redis.io/commands/{word}" in (getattr(method, "__doc__", None) or "")


def _constant_word(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isupper():
        return node.value
    return None


def _spelt(words: list[ast.expr]) -> str | None:
    """``("FUNCTION", "LOAD", ...)`` -> ``function|load``; ``("WAIT", ...)`` -> ``wait``."""
    first = _constant_word(words[0]) if words else None
    if first is None:
        return None
    second = _constant_word(words[1]) if len(words) > 1 else None
    if second is not None and f"{first}|{second}".lower() in command_table():
        return f"{first}|{second}".lower()
    return command_name(first)


def _uses_in(tree: ast.AST, path: str) -> Iterator[Use]:
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            for command in _commands_of(node):
                yield Use(command, path, function.name)


def _commands_of(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Tuple) and node.elts:
        spelt = _spelt(node.elts)
        if spelt is not None:
            yield spelt
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return
    method, receiver = node.func.attr, ast.unparse(node.func.value)
    if method in COMMAND_SENDERS:
        spelt = _spelt(node.args)
        if spelt is not None:
            yield spelt
    elif method == "pipeline" and not _no_transaction(node):
        yield from ("multi", "exec")
    elif REDIS_RECEIVER.search(receiver):
        name = command_name(method)
        if name is not None:
            yield name


def _no_transaction(call: ast.Call) -> bool:
    return any(
        keyword.arg == "transaction"
        and isinstance(keyword.value, ast.Constant)
        and keyword.value.value is False
        for keyword in call.keywords
    )


@functools.cache
def python_uses() -> tuple[Use, ...]:
    """Every plain command the package sends, where and in which function."""
    found: set[Use] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        found.update(_uses_in(ast.parse(path.read_text(encoding="utf-8")), relative))
    return tuple(sorted(found, key=lambda use: (use.command, use.path, use.function)))


def _writes(command: str) -> bool:
    info = command_table().get(command)
    return info is not None and info.writes


def role_commands(role: str, *, cluster: bool = False, replica_reads: bool = False) -> list[str]:
    """The commands ``role`` needs, sorted (``function|load`` spelling)."""
    if role not in ROLES:
        raise ValidationError("acl", "role", f"{role!r} must be one of {', '.join(ROLES)}")
    parts = ROLE_PARTS[role]
    needed: set[str] = {"ping", "fcall_ro"}
    for use in python_uses():
        if use.path.startswith(NOT_DEPLOYED) or (use.admin_only and role != "admin"):
            continue
        if use.command in REPLICA_READ_COMMANDS and not replica_reads:
            continue
        if not _writes(use.command) or any(use.path.startswith(part) for part in parts):
            needed.add(use.command)
    lua = library_commands()
    if role == "reader":
        needed |= {name for name, info in lua.items() if not info.writes}
        needed.discard("fcall")
        needed -= {name for name in needed if _writes(name)}
        # A reader's transactions read only: a snapshot's catch-up (store/plain_head.py).
        needed -= {"watch", "unwatch"}
    else:
        needed |= {"fcall", *lua}
    if cluster:
        needed.update(CLUSTER_COMMANDS)
    if replica_reads:
        needed.update(REPLICA_READ_COMMANDS)
    return sorted(needed)


def acl_rules(cache: str, role: str, *, cluster: bool = False, replica_reads: bool = False) -> str:
    """The rules ``ACL SETUSER <user>`` takes for ``role`` on ``cache`` (no password: the
    operator adds ``>PASSWORD``)."""
    commands = role_commands(role, cluster=cluster, replica_reads=replica_reads)
    return " ".join(
        ["reset", "on", f"~{Keys(cache).pattern}", "resetchannels", "-@all"]
        + [f"+{command}" for command in commands]
    )
