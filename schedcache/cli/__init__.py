"""The ``schedcache`` command line (``schedcache.cli:main``, ``python -m schedcache.cli``), and
the same as a kubectl plugin (``kubectl-schedcache`` on PATH: ``kubectl schedcache get pods``).

This module is where the console scripts start (:func:`run`), so it imports nothing heavy:
:func:`run` loads the command line (``schedcache.cli.app``) once a Ctrl-C meanwhile ends the
command as a Ctrl-C later does, with status 130 (0 for the commands that run until stopped) and
no traceback. ``main`` is still click's group (``CliRunner().invoke(main, ...)``, or a group of
your own that adds it), imported from ``schedcache.cli.app`` on first use.
"""

from __future__ import annotations

import sys

from schedcache.cli.startup import command_of, exit_status_decided, interrupted

TYPE_CHECKING = False  # (typing is not imported for it: see schedcache/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from schedcache.cli.app import main


def run(args: Sequence[str] | None = None, prog_name: str | None = None) -> Any:
    """The ``schedcache`` console script: click's group ``main``, loaded here. A Ctrl-C that no
    command handled, while the command line loads or after (one in click's own error output),
    ends it with status 130 (0 for the commands that run until stopped) and no traceback; once
    the command has ended, a Ctrl-C changes its status no more (startup.exit_status_decided)."""
    argv = sys.argv[1:] if args is None else args
    try:
        from schedcache.cli.app import main as command_line

        return command_line(args, prog_name=prog_name)
    except KeyboardInterrupt:
        interrupted(command_of(argv))
    finally:
        exit_status_decided()


def kubectl_plugin() -> None:
    """``kubectl schedcache ...``: kubectl runs ``kubectl-schedcache`` with the arguments after
    the plugin's name; help and usage lines name the command as the user typed it."""
    run(prog_name="kubectl schedcache")


if not TYPE_CHECKING:  # (mypy sees `main` above, and no other name: found in review)

    def __getattr__(name: str) -> Any:
        """``main``, click's group, imported on first use (the console scripts start in
        ``run``)."""
        if name == "main":
            from schedcache.cli.app import main

            return main
        raise AttributeError(f"module 'schedcache.cli' has no attribute {name!r}")


__all__ = ["kubectl_plugin", "main", "run"]
