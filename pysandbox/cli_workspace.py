"""``pysandbox run --workspace``: the command runs over a Workspace of its workdir
(workspace.py); at the end the change summary goes to stderr, then ``--commit`` applies
it (when the command exited 0), ``--discard`` drops it, and with neither a terminal is
asked (elsewhere the changes are dropped, and that is said). The layer's store is
removed in every case."""

from __future__ import annotations

import os
import sys


def add_arguments(parser) -> None:
    group = parser.add_argument_group("workspace", "run over an overlay of the workdir: the host's files change "
                                      "only if the changes are committed (README \"Workspaces\")")
    group.add_argument("--workspace", action="store_true",
                       help="the command's writes to the workdir land in a layer; its change summary is printed "
                            "at the end (stderr)")
    what = group.add_mutually_exclusive_group()
    what.add_argument("--commit", action="store_true",
                      help="with --workspace: apply the changes if the command exits 0")
    what.add_argument("--discard", action="store_true", help="with --workspace: drop the changes")
    group.add_argument("--allow-git", action="store_true",
                       help="with --workspace: commit git metadata the command made (a nested .git, a bare "
                            "repository), which is refused otherwise: the host's git would obey it")


def workdir(args, given):
    """The workdir ``Policy.default`` gets: a Workspace of ``given`` with --workspace.

    Raises:
        PolicyError: ``conflicting_options`` (--commit/--discard/--allow-git alone, --no-workdir).
    """
    from .errors import PolicyError, Reason
    if not getattr(args, "workspace", False):
        if any(getattr(args, name, False) for name in ("commit", "discard", "allow_git")):
            raise PolicyError("--commit, --discard and --allow-git go with --workspace", Reason.CONFLICTING_OPTIONS)
        return given
    if given is None:
        raise PolicyError("--workspace overlays the workdir: it cannot go with --no-workdir",
                          Reason.CONFLICTING_OPTIONS)
    from .workspace import Workspace
    args.workspace_obj = Workspace(given)
    return args.workspace_obj


def summary(changes) -> str:
    from .workspace_layer import show
    if not changes:
        return "pysandbox: workspace: no changes\n"
    lines = [f"pysandbox: workspace: {len(changes)} change{'s' if len(changes) != 1 else ''}"]
    for c in changes:
        size = f" ({c.size} bytes)" if c.size is not None and c.type == "file" else ""
        mode = f" {c.old_mode:04o} -> {c.mode:04o}" if c.kind == "mode_changed" else ""
        lines.append(f"  {c.kind:<12} {c.type or c.old_type:<7} {show(c.path)}{size}{mode}")
    return "\n".join(lines) + "\n"


def _ask(stream_in=None, stream_err=None) -> bool:
    stream_in, stream_err = stream_in or sys.stdin, stream_err or sys.stderr
    stream_err.write("pysandbox: commit these changes to the host? [y/N] ")
    stream_err.flush()
    return stream_in.readline().strip().lower() in ("y", "yes")


def finished(args, run) -> int:
    """Run ``run()`` (the command); then review, report and commit or drop the workspace."""
    try:
        code = run()
        ws = getattr(args, "workspace_obj", None)
        if ws is None:
            return code
        changes = ws.changes()
        sys.stderr.write(summary(changes))
        if not changes:
            return code
        if args.commit and code == 0:
            ws.commit(allow_git=args.allow_git)
            sys.stderr.write(f"pysandbox: workspace: committed {len(changes)} change(s) to {ws.project}\n")
        elif args.commit:
            sys.stderr.write(f"pysandbox: workspace: the command exited {code}: nothing committed\n")
        elif not args.discard and os.isatty(0) and os.isatty(2) and _ask():
            ws.commit(allow_git=args.allow_git)
            sys.stderr.write(f"pysandbox: workspace: committed {len(changes)} change(s)\n")
        else:
            sys.stderr.write("pysandbox: workspace: discarded (pass --commit to apply)\n")
        return code
    finally:
        ws = getattr(args, "workspace_obj", None)
        if ws is not None:
            ws.remove()
