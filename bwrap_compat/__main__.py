"""``python -m bwrap_compat ARGS`` = ``pybwrap ARGS``."""

import sys

from bwrap_compat.cli import main

sys.exit(main())
