"""`python -m durablecache_client`: see durablecache_client.cli."""

import sys

from .cli import main

sys.exit(main())
