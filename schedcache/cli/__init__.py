"""The ``schedcache`` command line (``schedcache.cli:main``, ``python -m schedcache.cli``)."""

from schedcache.cli.app import main

__all__ = ["main"]
