"""What the command line decides before it has loaded: how a Ctrl-C ends a command.

The console scripts start in :func:`schedcache.cli.run`, which imports the rest of the command
line (click, redis-py, the cache: about half a second) only after it can answer a Ctrl-C; this
module holds what that answer needs, and imports nothing (found in review: a Ctrl-C in that
half second printed a Python traceback).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # (typing is not imported for it: see schedcache/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C

# Every subcommand's name (schedcache.cli.app.COMMANDS maps each to its module).
COMMAND_NAMES = frozenset(
    {
        *("acl", "checkpoint", "compact", "completion", "demo", "describe", "diff", "dump"),
        *("events", "explain", "extender", "get", "history", "load", "metrics", "migrate"),
        *("replay", "scheduler", "scripts", "stats", "sync", "verify", "whatif", "worker"),
    }
)

# The commands that run until stopped: SIGINT or SIGTERM ends them with status 0 (README),
# also a Ctrl-C before their own handlers are set (found in review: 130 in their first second).
LONG_RUNNING = frozenset({"sync", "scheduler", "extender", "metrics", "worker"})


def command_of(args: Sequence[str]) -> str | None:
    """The subcommand a command line names, as a Ctrl-C before it is parsed reads it: the first
    argument that is a command's name."""
    return next((arg for arg in args if arg in COMMAND_NAMES), None)


def interrupted_status(command: str | None) -> int:
    """The exit status of a Ctrl-C that ``command`` did not handle itself: 130 as a shell
    reports it; 0 for a command that runs until stopped, as its own handlers end it."""
    return 0 if command in LONG_RUNNING else INTERRUPTED


def interrupted(command: str | None) -> NoReturn:
    """Ctrl-C that no command handled itself (``load`` says how far it got): the line after the
    terminal's ^C, and exit status 130 as a shell reports it, where click says "Aborted!" with
    status 1, as for a failure; 0 for ``command`` that runs until stopped, as its own handlers
    end it. (sys.stderr, not click's echo: click may not be loaded yet.)"""
    sys.stderr.write("\n")
    sys.stderr.flush()
    sys.exit(interrupted_status(command))


def exit_status_decided() -> None:
    """The process ends with the status its command decided: a Ctrl-C from here on is ignored.

    For the console scripts and ``python -m schedcache.cli`` only (not :func:`interrupted`,
    which tests run in-process). Found in review, three ways a Ctrl-C changed a decided status:

    * Python gives SIGINT back to its default action while the interpreter tears down (a few
      milliseconds after the last line), so a Ctrl-C then ended an ``Error:``'s exit 1 with
      -2 (a shell's 130); an ignored SIGINT stays ignored. (The long-running commands end
      by os._exit and ignore their stop signals first: cli/lifecycle.py.)
    * Before that, a KeyboardInterrupt in an exit handler printed "Exception ignored" and a
      traceback.
    * ``python -m`` (CPython's runpy path, 3.11 to 3.13) ends by SIGINT, whatever the status,
      a process in which a KeyboardInterrupt ever left code run from a string (dataclasses
      and namedtuple build their methods so: a Ctrl-C while the command line loads), even one
      the command line caught: 130 (or 0) became -2, where the console script gave 130.
      Running a string resets the flag CPython keeps for it (CPython 3.14 no longer sets it
      there: then this changes nothing)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exec("")  # resets CPython's "unhandled KeyboardInterrupt" (see above)
