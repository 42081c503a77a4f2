"""The Lua commands as one Redis Functions library: assembling, loading, versioning.

The library is built from ``lua/*.lua`` (shipped inside the wheel as ``schedcache/lua``):
``_helpers.lua`` and the other ``_*.lua`` shared parts first, then one file per command, then
``_register.lua``. Functions (not EVAL) because they survive restarts and failovers, work in
cluster pipelines and are what fakeredis reproduces faithfully (see DESIGN §5).

**Versions side by side.** Redis function names are global to a server, so the library's name
and every function's name carry the build's tag (``v<schema>_<digest>``): ``schedcache_v5_…``
registers ``sc_add_pod_v5_…``. Tenants of one server on two releases each run their own build,
and upgrade one at a time; loading a build never replaces another. The tag is added here and in
``_register.lua`` (``FUNCTION_SUFFIX``), once: a function registered through ``function_name``
in Lua, and called through :func:`function_name` here, is versioned without more.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path

import redis

from schedcache.errors import LibraryNotLoaded
from schedcache.store.commandset import CommandInfo, lua_commands, lua_table
from schedcache.store.keys import (
    SCHEMA_VERSION as SCHEMA_VERSION,  # re-exported (the CLI prints it)
)

LIBRARY_PREFIX = "schedcache"  # every build's library is named schedcache_<tag>
FIRST_PARTS = ("_arrivals.lua", "_helpers.lua")
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
        f"#!lua name={library_name()}\n"
        f"local LIBRARY_VERSION = '{library_version()}'\n"
        f"local FUNCTION_SUFFIX = '_{library_tag()}'\n"
        f"local SCHEMA_VERSION = '{SCHEMA_VERSION}'\n"
        f"local LIBRARY_COMMANDS = {lua_table(library_commands())}\n"
        f"{body}"
    )


def library_tag() -> str:
    """``v<schema version>_<digest>``: what tells this build's library and functions apart."""
    return f"v{SCHEMA_VERSION}_{_code()[1]}"


def library_name() -> str:
    """This build's library name (``FUNCTION LIST``, ``FUNCTION DELETE``)."""
    return f"{LIBRARY_PREFIX}_{library_tag()}"


def function_name(command: str) -> str:
    """The name this build registers ``command`` under (``sc_add_pod_v5_…``): what every
    ``FCALL``/``FCALL_RO`` calls."""
    return f"sc_{command}_{library_tag()}"


def library_commands() -> dict[str, CommandInfo]:
    """The Redis commands the library's functions call (``schedcache.store.commandset``)."""
    return lua_commands(lua_files())


@functools.cache
def library_write_commands() -> frozenset[str]:
    """The commands the library's functions call that write (upper case, as ``sc_permitted``
    names them): a user denied all of them is a reader by design."""
    return frozenset(name.upper() for name, info in library_commands().items() if info.writes)


def library_version() -> str:
    """``"<schema version> <digest>"``, as ``sc_version`` answers it."""
    return f"{SCHEMA_VERSION} {_code()[1]}"


def command_names() -> list[str]:
    """The commands the library registers (file names without ``.lua``)."""
    return [p.stem for p in lua_files() if not p.name.startswith("_")]


def function_names() -> list[str]:
    """Every function the library registers: one per command file, ``sc_version`` and
    ``sc_permitted`` (``lua/_register.lua``), each with this build's tag."""
    return [function_name(name) for name in ("version", "permitted", *command_names())]


def is_missing_function(error: redis.ResponseError) -> bool:
    return "function not found" in str(error).lower()


def ensure_loaded(client: redis.Redis) -> None:
    """Load this build's library unless the server already has it. Other builds' libraries
    (other names) are left as they are: other tenants, or this one's processes not yet
    upgraded, run them."""
    try:
        loaded = client.fcall_ro(function_name("version"), 0)
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
    """Whether a server whose ``sc_version_<tag>`` answered ``loaded`` (None: not loaded) needs
    this library loaded (the sync and asyncio loaders decide alike): the name carries the
    digest, so an answer is this build unless someone loaded other code under its name."""
    if loaded is None:
        return True
    text = loaded.decode() if isinstance(loaded, bytes) else str(loaded)
    return text != library_version()


def load_refused(loaded: object, error: Exception) -> LibraryNotLoaded:
    """The error when this Redis user may not load the library."""
    return LibraryNotLoaded(
        f"the server {'has other code as' if loaded else 'lacks'} the schedcache library "
        f"{library_name()} (this client's build, {library_version()}) and this Redis user may "
        f"not load it ({error}): an admin runs `schedcache scripts` of this version once "
        "(docs/security.md)"
    )
