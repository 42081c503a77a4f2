"""Which Redis commands the library's Lua functions call, found in the ``lua/*.lua`` sources.

ACL rules (``schedcache acl``) and the library's own permission check (``sc_permitted``) are
derived from this set, so a command a new function calls is granted and checked without anyone
keeping a list. A command name is never computed in Lua: every ``redis.call``/``redis.pcall``
names its command as a quoted upper-case literal, or takes it from a parameter whose callers
pass one (``typed_read(key, 'zset', 'ZRANGE', ...)``). So every quoted upper-case literal that
Redis knows as a command is one the library may call (``COUNT``, ``LIMIT``, ``PX`` are
arguments, not commands, and are not in the table); lines that only ask ``redis.acl_check_cmd``
whether a command is allowed are skipped (they run nothing). ``tests/test_acl.py`` checks that
every call site has that shape.

The command table (names, arity, flags, ACL categories) is the one fakeredis ships, a copy of
Redis 7's ``COMMAND INFO``: no server is needed to derive rules.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

QUOTED_WORD = re.compile(r"'([A-Z][A-Z_]*)'")


@dataclass(frozen=True)
class CommandInfo:
    """One command of Redis' table: ``name`` as ACL rules spell it (``function|load``)."""

    name: str
    arity: int  # N: exactly N words with the command; -N: at least N
    flags: frozenset[str]
    categories: frozenset[str]

    @property
    def writes(self) -> bool:
        return "write" in self.flags

    @property
    def min_args(self) -> int:
        """The fewest arguments after the command word that Redis accepts."""
        return abs(self.arity) - 1


@functools.cache
def command_table() -> dict[str, CommandInfo]:
    """Redis' commands by lower-case name, subcommands as ``container|sub``."""
    text = (resources.files("fakeredis") / "commands.json").read_text(encoding="utf-8")
    table: dict[str, CommandInfo] = {}
    for entry in json.loads(text).values():
        info = CommandInfo(entry[0], entry[1], frozenset(entry[2]), frozenset(entry[6]))
        table[info.name] = info
    return table


def lua_commands(files: list[Path]) -> dict[str, CommandInfo]:
    """The commands the Lua ``files`` may call, by lower-case name (sorted)."""
    table = command_table()
    found: set[str] = set()
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            if "acl_check_cmd(" in line:
                continue
            found.update(w.lower() for w in QUOTED_WORD.findall(line) if w.lower() in table)
    return {name: table[name] for name in sorted(found)}


def lua_table(commands: dict[str, CommandInfo]) -> str:
    """``{ {'DEL', 1}, ... }``: each command with the number of arguments it needs at least,
    as ``sc_permitted`` checks them (``redis.acl_check_cmd`` with fewer arguments than a
    command's arity crashes Redis 7.0: redis/redis#14843)."""
    return "{ " + ", ".join(f"{{'{n.upper()}', {c.min_args}}}" for n, c in commands.items()) + " }"
