"""Run the expiry worker: ``python workers/expiry.py [--redis URL] [--cache NAME] [options]``.

A thin wrapper over ``schedcache worker expiry`` (the worker itself is
``schedcache.ops.expiry.ExpiryWorker``), for process managers that run scripts rather than console
entry points. Options are those of ``schedcache worker expiry --help`` and the global ones
(``--redis``, ``--cache``, ...), in any order: the CLI takes global options anywhere.
"""

import sys

from schedcache.cli.app import main

if __name__ == "__main__":
    sys.exit(main(["worker", "expiry", *sys.argv[1:]]))
