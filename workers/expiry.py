"""Run the expiry worker: ``python workers/expiry.py [--redis URL] [--cache NAME] [options]``.

A thin wrapper over ``schedcache worker expiry`` (the worker itself is
``schedcache.expiry.ExpiryWorker``), for process managers that run scripts rather than console
entry points. Options are those of ``schedcache worker expiry --help``.
"""

import sys

from schedcache.cli import main

GLOBAL_OPTIONS = ("--redis", "--cache")


def split_arguments(argv: list[str]) -> list[str]:
    """Moves --redis/--cache (the CLI group's options) before the subcommand."""
    front, rest = [], []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg in GLOBAL_OPTIONS and index + 1 < len(argv):
            front += argv[index : index + 2]
            index += 2
            continue
        if arg.split("=", 1)[0] in GLOBAL_OPTIONS:
            front.append(arg)
        else:
            rest.append(arg)
        index += 1
    return [*front, "worker", "expiry", *rest]


if __name__ == "__main__":
    sys.exit(main(split_arguments(sys.argv[1:])))
