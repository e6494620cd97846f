"""bubblewrap's command line -> a pysandbox Policy (parses only; ``cli`` runs it).

    from bwrap_compat import parse, check, to_policy
    args = check(parse(["--ro-bind", "/", "/", "--unshare-net", "true"]))
    policy, compat = to_policy(args)

Nothing is imported until used, so that ``pybwrap --version`` stays cheap.
"""

__all__ = ["BwrapArgs", "Compat", "FsOp", "check", "parse", "to_policy"]


def __getattr__(name):
    if name in ("BwrapArgs", "FsOp", "check", "parse"):
        from . import parser as _parse
        return getattr(_parse, name)
    if name in ("Compat", "to_policy"):
        from . import mapping
        return getattr(mapping, name)
    raise AttributeError(name)
