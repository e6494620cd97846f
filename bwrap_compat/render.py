"""A parsed bwrap command line back to a canonical argv (``parse(to_argv(a))`` == ``a``).

Used by the round-trip tests and by anyone who edits a parsed command line and
wants bwrap's spelling back. Descriptor contents (``--args``, ``--add-seccomp-fd``)
cannot be rendered: a BwrapArgs holding seccomp programs read at parse time is refused.
"""

from __future__ import annotations

from pysandbox.errors import BwrapArgumentError, Reason

from .args import ALL_CAPS, CAP_NAMES, PERMS_DEFAULT, BwrapArgs

_FLAGS = ("unshare_user", "unshare_user_try", "unshare_ipc", "unshare_pid", "unshare_net", "unshare_uts",
          "unshare_cgroup", "unshare_cgroup_try", "disable_userns", "assert_userns_disabled",
          "level_prefix", "new_session", "die_with_parent", "as_pid_1", "not_a_security_boundary")
_VALUES = (("uid", "--uid"), ("gid", "--gid"), ("hostname", "--hostname"), ("chdir", "--chdir"),
           ("argv0", "--argv0"), ("sync_fd", "--sync-fd"), ("block_fd", "--block-fd"),
           ("userns_block_fd", "--userns-block-fd"), ("info_fd", "--info-fd"),
           ("json_status_fd", "--json-status-fd"), ("userns_fd", "--userns"), ("userns2_fd", "--userns2"),
           ("pidns_fd", "--pidns"), ("seccomp_fd", "--seccomp"))


def _cap(caps: frozenset) -> str:
    if caps == ALL_CAPS:
        return "ALL"
    (cap,) = caps
    return f"CAP_{CAP_NAMES[cap].upper()}" if cap < len(CAP_NAMES) else str(cap)


def to_argv(args: BwrapArgs) -> list[str]:
    """bwrap's argv for ``args`` (options, ``--``, the command).

    Raises:
        BwrapArgumentError: ``args`` holds seccomp programs read from descriptors.
    """
    if args.seccomp_programs:
        raise BwrapArgumentError("seccomp programs read at parse time cannot be rendered",
                                 Reason.BWRAP_ARGUMENT_INVALID)
    out: list[str] = []
    for flag in _FLAGS:
        if getattr(args, flag):
            out.append("--" + flag.replace("_", "-"))
    for attr, option in _VALUES:
        value = getattr(args, attr)
        if value is not None:
            out += [option, str(value)]
    for path in args.lock_files:
        out += ["--lock-file", path]
    for op in args.env_ops:
        out += {"clear": ["--clearenv"], "set": ["--setenv", *op[1:]], "unset": ["--unsetenv", *op[1:]]}[op[0]]
    for kind, caps in args.cap_ops:
        out += [f"--cap-{kind}", _cap(caps)]
    for op in args.ops:
        for src in op.overlay_srcs:
            out += ["--overlay-src", src]
        if op.kind in PERMS_DEFAULT and op.perms != PERMS_DEFAULT[op.kind]:
            out += ["--perms", format(op.perms, "04o")]
        if op.size is not None:
            out += ["--size", str(op.size)]
        if op.kind in ("--bind-fd", "--ro-bind-fd", "--file", "--bind-data", "--ro-bind-data"):
            out += [op.kind, str(op.fd), op.dest]
        elif op.kind == "--chmod":
            out += [op.kind, format(op.perms, "04o"), op.dest]
        elif op.kind == "--overlay":
            out += [op.kind, op.src, op.workdir, op.dest]
        elif op.src is not None:
            out += [op.kind, op.src, op.dest]
        else:
            out += [op.kind, op.dest]
    return out + ["--"] + list(args.command)
