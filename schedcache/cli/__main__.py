"""``python -m schedcache.cli``."""

import sys

from schedcache.cli import main

sys.exit(main())
