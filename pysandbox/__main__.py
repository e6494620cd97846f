"""python -m pysandbox: the pysandbox command line."""

import sys

from .cli import main

sys.exit(main())
