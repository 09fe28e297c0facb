"""``python -m shaledb.cli ...`` runs the command line (same as the ``shaledb`` script)."""

import sys

from . import main

sys.exit(main())
