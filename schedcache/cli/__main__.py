"""``python -m schedcache.cli``."""

import sys

from schedcache.cli.app import main

sys.exit(main())
