"""``python -m shaledb ...`` runs the command line (same as the ``shaledb`` script)."""

import sys

from .cli import main

sys.exit(main())
