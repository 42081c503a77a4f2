"""The ``schedcache`` command line (``schedcache.cli:main``, ``python -m schedcache.cli``), and
the same as a kubectl plugin (``kubectl-schedcache`` on PATH: ``kubectl schedcache get pods``)."""

from schedcache.cli.app import main


def kubectl_plugin() -> None:
    """``kubectl schedcache ...``: kubectl runs ``kubectl-schedcache`` with the arguments after
    the plugin's name; help and usage lines name the command as the user typed it."""
    main(prog_name="kubectl schedcache")


__all__ = ["kubectl_plugin", "main"]
