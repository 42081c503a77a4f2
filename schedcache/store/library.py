"""The Lua commands as one Redis Functions library: assembling, loading, versioning.

The library is built from ``lua/*.lua`` (shipped inside the wheel as ``schedcache/lua``):
``_helpers.lua`` and the other ``_*.lua`` shared parts first, then one file per command, then
``_register.lua``. Functions (not EVAL) because they survive restarts and failovers, work in
cluster pipelines and are what fakeredis reproduces faithfully (see DESIGN §5).
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path

import redis

from schedcache.errors import LibraryNotLoaded, SchemaMismatch
from schedcache.store.commandset import CommandInfo, lua_commands, lua_table
from schedcache.store.keys import (
    SCHEMA_VERSION as SCHEMA_VERSION,  # re-exported (the CLI prints it)
)

LIBRARY_NAME = "schedcache"
FIRST_PARTS = ("_helpers.lua",)
LAST_PARTS = ("_register.lua",)


def lua_dir() -> Path:
    """Where the ``.lua`` files are: inside the installed package, else the source tree."""
    packaged = Path(str(resources.files("schedcache"))) / "lua"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "lua"


def lua_files() -> list[Path]:
    """The library's files in load order."""
    directory = lua_dir()
    names = sorted(p.name for p in directory.glob("*.lua"))
    if not names:
        raise FileNotFoundError(f"no Lua files in {directory}")
    shared = [n for n in names if n.startswith("_") and n not in FIRST_PARTS + LAST_PARTS]
    commands = [n for n in names if not n.startswith("_")]
    return [directory / n for n in (*FIRST_PARTS, *shared, *commands, *LAST_PARTS)]


@functools.cache
def _code() -> tuple[str, str]:
    """The concatenated ``.lua`` files and the digest that tells one build from another."""
    body = "".join(
        f"\n-- ==== {path.name} ====\n{path.read_text(encoding='utf-8')}" for path in lua_files()
    )
    return body, hashlib.sha1(body.encode()).hexdigest()[:12]


def library_source() -> str:
    """The library text. Its first lines define ``LIBRARY_VERSION`` (the schema version and a
    digest of the code, answered by ``sc_version``), ``SCHEMA_VERSION`` (written as ``v`` in
    every event) and ``LIBRARY_COMMANDS`` (what the functions call, checked by
    ``sc_permitted``): all come from Python, so the Lua files hold no version or list of
    their own."""
    body, _ = _code()
    return (
        f"#!lua name={LIBRARY_NAME}\n"
        f"local LIBRARY_VERSION = '{library_version()}'\n"
        f"local SCHEMA_VERSION = '{SCHEMA_VERSION}'\n"
        f"local LIBRARY_COMMANDS = {lua_table(library_commands())}\n"
        f"{body}"
    )


def library_commands() -> dict[str, CommandInfo]:
    """The Redis commands the library's functions call (``schedcache.store.commandset``)."""
    return lua_commands(lua_files())


def library_version() -> str:
    """``"<schema version> <digest>"``, as ``sc_version`` answers it."""
    return f"{SCHEMA_VERSION} {_code()[1]}"


def command_names() -> list[str]:
    """The commands the library registers (file names without ``.lua``)."""
    return [p.stem for p in lua_files() if not p.name.startswith("_")]


def function_names() -> list[str]:
    """Every function the library registers: one per command file, ``sc_version`` and
    ``sc_permitted`` (``lua/_register.lua``)."""
    return ["sc_version", "sc_permitted", *(f"sc_{name}" for name in command_names())]


def is_missing_function(error: redis.ResponseError) -> bool:
    return "function not found" in str(error).lower()


def ensure_loaded(client: redis.Redis) -> None:
    """Load the library unless the server already has exactly this one.

    A library of an older schema version, or of the same version built from other code, is
    replaced; a newer schema version is left alone and reported, so an old client cannot
    downgrade a library that newer replicas rely on.
    """
    try:
        loaded = client.fcall_ro("sc_version", 0)
    except redis.ResponseError as error:
        if not is_missing_function(error):
            raise
        loaded = None
    if not needs_loading(loaded):
        return
    try:
        client.function_load(library_source(), replace=True)
    except redis.exceptions.NoPermissionError as error:
        raise load_refused(loaded, error) from None


def needs_loading(loaded: object) -> bool:
    """Whether a server whose ``sc_version`` answered ``loaded`` (None: no library) needs this
    library loaded; :class:`SchemaMismatch` when it has a newer schema (the sync and asyncio
    loaders decide alike)."""
    if loaded is None:
        return True
    text = loaded.decode() if isinstance(loaded, bytes) else str(loaded)
    if text == library_version():
        return False
    version = int(text.split(" ", 1)[0])
    if version > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"the server has schedcache library version {version}, newer than this "
            f"client's {SCHEMA_VERSION}: upgrade the client"
        )
    return True


def load_refused(loaded: object, error: Exception) -> LibraryNotLoaded:
    """The error when this Redis user may not load the library."""
    return LibraryNotLoaded(
        f"the server {'has another' if loaded else 'lacks the'} schedcache library "
        f"(this client needs {library_version()}) and this Redis user may not load it "
        f"({error}): an admin runs `schedcache scripts` once (docs/security.md)"
    )
