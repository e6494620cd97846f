"""python -m pysandbox: the pysandbox command line."""

import sys

from .console import main

sys.exit(main())
