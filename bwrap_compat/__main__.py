"""``python -m bwrap_compat ARGS`` = ``pybwrap ARGS``."""

import sys

from bwrap_compat.cli import console_main

sys.exit(console_main())
