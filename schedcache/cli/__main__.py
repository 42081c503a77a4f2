"""``python -m schedcache.cli``."""

import sys

from schedcache.cli import run

sys.exit(run())
