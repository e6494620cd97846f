"""A parsed bwrap command line -> a pysandbox Policy plus a compat-only record.

The Policy holds what pysandbox models (filesystem ops in bwrap's order, namespaces,
network, environment, ids, capabilities, seccomp, argv0 ...). :class:`Compat`
holds what only pybwrap's launcher acts on (info/json-status/sync fds, lock files).
--block-fd, --userns-block-fd, --userns,
--userns2 and --pidns are Policy fields: the native executor acts on them.

Descriptors named by --file/--bind-data/--ro-bind-data/--seccomp are read here,
as bwrap reads them during setup; --bind-fd is resolved to the path it names.

Root without --unshare-user is rendered as a user namespace mapping uid/gid 0 to
0 (see README.md, "Root without --unshare-user").
"""

from __future__ import annotations

import os

from pysandbox.errors import BwrapArgumentError, BwrapOptionUnsupported, PolicyError, Reason
from pysandbox.policy import (CAPABILITIES, Bind, Chmod, Dev, Dir, Env, File, Mqueue, Network, Overlay, Policy,
                              Proc, RemountRo, Symlink, Tmpfs)
from pysandbox import view
from pysandbox.plan import PROC_READONLY
from pysandbox.records import dataclass

from . import hostfacts as host
from .args import BwrapArgs, CAP_NAMES, read_fd_default

NS_INFO_ORDER = ("cgroup", "ipc", "mnt", "net", "pid", "uts")


@dataclass(frozen=True)
class Compat:
    """What the Policy does not model; the launcher (cli.py) acts on it."""

    info_fd: int | None = None
    json_status_fd: int | None = None
    sync_fd: int | None = None
    lock_files: tuple = ()
    level_prefix: bool = False
    unshared: tuple = ()            # namespace names for the info/json output, bwrap's order
    root_without_userns: bool = False
    consumed_fds: tuple = ()        # closed by bwrap before exec: never passed through
    as_pid_1: bool = False


def _err(message: str) -> BwrapArgumentError:
    return BwrapArgumentError(message, Reason.BWRAP_ARGUMENT_INVALID, message)


def _unsupported(option: str, what: str) -> BwrapOptionUnsupported:
    return BwrapOptionUnsupported(f"{option} is not supported by pybwrap yet ({what})",
                                  Reason.BWRAP_OPTION_UNSUPPORTED)


def sandbox_path(path: str) -> str:
    """bwrap joins a destination onto its new root: a relative one is taken from /."""
    return path if path.startswith("/") else "/" + path


def env_of(ops) -> Env:
    """bwrap edits its own environment in order; the same result as an Env."""
    clear, final = False, dict[str, str | None]()
    for op in ops:
        if op[0] == "clear":
            clear, final = True, {}
        elif op[0] == "set":
            final[op[1]] = op[2]
        else:
            final[op[1]] = None
    try:
        return Env(clear=clear, set=tuple((k, v) for k, v in final.items() if v is not None),
                   unset=tuple(k for k, v in final.items() if v is None))
    except PolicyError as exc:
        # bwrap's setenv(3) refuses a name with '=' (EINVAL) and dies.
        raise _err(f"setenv failed: {exc.args[0]}") from None


def caps_of(args: BwrapArgs, real_uid: int, start_caps: frozenset | None) -> frozenset:
    """bwrap's rules: root starts from its effective set, others from nothing; --cap-add
    and --cap-drop edit it in order. Root keeps them without edits only as uid 0."""
    caps = set(start_caps if start_caps is not None else host.effective_caps()) if real_uid == 0 else set()
    for kind, which in args.cap_ops:
        if kind == "add":
            caps |= which
        else:
            caps -= which
    if real_uid == 0 and not args.cap_ops and args.uid != 0:
        caps = set()   # exec as a non-zero uid clears them; nothing made them ambient
    return frozenset(CAP_NAMES[c] for c in caps if c < len(CAPABILITIES))


def caps_raised(args: BwrapArgs, real_uid: int) -> bool:
    """Whether the kept capabilities are also made inheritable and ambient. bwrap does
    it for its requested set only after a capset, which root without --cap-add/--cap-drop
    skips: root's sets reach the command as they were (nothing inheritable or ambient
    for a caller that had none), with or without --unshare-user."""
    return real_uid != 0 or bool(args.cap_ops)


def _realpath(src: str, optional: bool) -> str | None:
    try:
        return os.path.realpath(src, strict=True)
    except OSError as exc:
        if optional and exc.errno == 2:
            return None
        raise _err(f"Can't find source path {src}: {os.strerror(exc.errno or 0)}") from None


def proc_covers(dest: str) -> list:
    """The host's procfs bound on ``dest``: its host-global entries (``PROC_READONLY``,
    those this kernel has) bound again read-only on top, as on a fresh procfs."""
    return [Bind(f"/proc/{sub}", f"{dest.rstrip('/')}/{sub}", readonly=True)
            for sub in PROC_READONLY if os.path.lexists(f"/proc/{sub}")]


_BINDS = ("--bind", "--bind-try", "--ro-bind", "--ro-bind-try", "--dev-bind", "--dev-bind-try")


def resolve_sources(ops) -> list:
    """Every bind and overlay source resolved, in order, before anything else is done:
    bwrap's resolve_symlinks_in_ops, which runs before its clone, so a missing source is
    refused for the cost of the parse and the realpaths before it (no other op is
    mapped, no descriptor read). One entry per op: the resolved source of a bind (None:
    a -try bind whose source is missing), ``(upper, work, lower)`` of an overlay, else None.

    Raises:
        BwrapArgumentError: ``Can't find source path ...``, bwrap's message.
    """
    out: list = []
    for op in ops:
        kind = op.kind
        if kind in _BINDS:
            out.append(_realpath(op.src, kind.endswith("-try")))
        elif kind in ("--bind-fd", "--ro-bind-fd"):
            out.append(_realpath(op.src, False))
        elif kind in ("--overlay", "--tmp-overlay", "--ro-overlay"):
            # bwrap resolves the upper dir, the work dir, then the sources top first.
            upper = _realpath(op.src, False) if kind == "--overlay" else None
            work = _realpath(op.workdir, False) if kind == "--overlay" else None
            lower = tuple(reversed([_realpath(src, False) for src in reversed(op.overlay_srcs)]))
            out.append((upper, work, lower))
        else:
            out.append(None)
    return out


def _fs_op(op, resolved, read_fd, unshare_pid):
    """``op`` as Policy operations; ``resolved``: its entry of :func:`resolve_sources`."""
    kind, dest = op.kind, sandbox_path(op.dest)
    if kind in _BINDS:
        optional = kind.endswith("-try")
        src = resolved
        if src is None:
            return None
        bind = Bind(src, dest, readonly=kind.startswith("--ro"), dev=kind.startswith("--dev"), optional=optional)
        if src == "/proc" and not bind.readonly:
            # bwrap binds the host's procfs writable as told (its suite's nested runs do);
            # pybwrap adds the read-only covers of a fresh procfs (invariant 9).
            return [bind] + proc_covers(dest)
        return bind
    if kind in ("--bind-fd", "--ro-bind-fd"):
        src = resolved
        try:
            fd_st, path_st = os.fstat(op.fd), os.stat(src)
        except OSError as exc:
            raise _err(f"Can't stat fd {op.fd}: {os.strerror(exc.errno or 0)}") from None
        if (fd_st.st_dev, fd_st.st_ino) != (path_st.st_dev, path_st.st_ino):
            raise _err("Race condition binding dirfd")
        return Bind(src, dest, readonly=kind == "--ro-bind-fd")
    if kind in ("--file", "--bind-data", "--ro-bind-data"):
        try:
            data = read_fd(op.fd)
        except OSError as exc:
            raise _err(f"Can't write data to file {op.dest}: {os.strerror(exc.errno or 0)}") from None
        return File(dest, data=data, mode=op.perms, bind=kind != "--file", readonly=kind == "--ro-bind-data")
    if kind == "--tmpfs":
        return Tmpfs(dest, size=op.size, mode=op.perms)
    if kind == "--dir":
        return Dir(dest, mode=op.perms)
    if kind == "--proc":
        if unshare_pid:
            return Proc(dest)
        # bwrap: "Use system procfs, as we share pid namespace anyway", then its
        # host-global corners re-bound read-only. Stricter than bwrap, which covers
        # them only where access(W_OK) succeeds (never /proc/sys, writable by root
        # although its directory is 0555): always, as pysandbox's own /proc.
        return [Bind("/proc", dest)] + proc_covers(dest)
    if kind == "--dev":
        return Dev(dest)
    if kind == "--mqueue":
        return Mqueue(dest)
    if kind == "--symlink":
        return Symlink(op.src, dest)
    if kind == "--remount-ro":
        return RemountRo(dest)
    if kind == "--chmod":
        return Chmod(dest, op.perms)
    if kind in ("--overlay", "--tmp-overlay", "--ro-overlay"):
        upper, work, lower = resolved
        return Overlay(dest, lower, upper, work, tmp=kind == "--tmp-overlay")
    raise _unsupported(kind, "not mapped")


def to_policy(args: BwrapArgs, *, real_uid: int | None = None, start_caps: frozenset | None = None,
              read_fd=read_fd_default, cgroup_ns: bool | None = None) -> tuple[Policy, Compat]:
    """The Policy and compat record for checked ``args`` (see :func:`parser.check`).

    Raises:
        BwrapArgumentError: a setup step bwrap would fail (missing bind source, unreadable
            descriptor, bad seccomp data), with bwrap's message.
        BwrapOptionUnsupported: an option pybwrap cannot honour yet.
        PolicyError: a value pysandbox refuses (e.g. a path with '..').
    """
    real_uid = os.getuid() if real_uid is None else real_uid
    ns = {"user"}
    for name in ("pid", "ipc", "uts"):
        if getattr(args, f"unshare_{name}"):
            ns.add(name)
    cgroup = args.unshare_cgroup
    if args.unshare_cgroup_try and not cgroup:
        cgroup = os.path.exists("/proc/self/ns/cgroup") if cgroup_ns is None else cgroup_ns
    if cgroup:
        ns.add("cgroup")
    fs = []
    for op, resolved in zip(args.ops, resolve_sources(args.ops)):
        # bwrap mounts a new procfs whenever the pid namespace is not the caller's
        planned = _fs_op(op, resolved, read_fd, args.unshare_pid or args.pidns_fd is not None)
        if isinstance(planned, list):
            fs.extend(planned)
        elif planned is not None:
            fs.append(planned)
    fs = with_bwrap_parents(fs)
    seccomp = list(args.seccomp_programs)
    if args.seccomp_fd is not None:
        try:
            data = read_fd(args.seccomp_fd)
        except OSError as exc:
            raise _err(f"Can't read seccomp data: {os.strerror(exc.errno or 0)}") from None
        if len(data) % 8:
            raise _err("Invalid seccomp data, must be multiple of 8")
        seccomp.append(data)
    if any(not prog for prog in seccomp):
        raise _err("Unable to set up system call filtering as requested: prctl(PR_SET_SECCOMP) reported EINVAL. "
                   "(Hint: this requires a kernel configured with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER.)")
    theirs = args.userns_block_fd if args.userns_block_fd is not None else args.userns_fd
    policy = Policy(
        fs=tuple(fs), namespaces=frozenset(ns), network=Network("deny" if args.unshare_net else "allow"),
        env=env_of(args.env_ops), chdir=sandbox_path(args.chdir) if args.chdir is not None else None,
        # --userns-block-fd, --userns: the ids are mapped by someone else; bwrap (not
        # setuid) then ignores --uid/--gid.
        uid=args.uid if theirs is None else None, gid=args.gid if theirs is None else None,
        hostname=args.hostname, die_with_parent=args.die_with_parent,
        block_fd=args.block_fd, userns_block_fd=args.userns_block_fd, userns_fd=args.userns_fd,
        pidns_fd=args.pidns_fd, userns2_fd=args.userns2_fd,
        new_session=args.new_session, as_pid_1=args.as_pid_1, caps_keep=caps_of(args, real_uid, start_caps),
        caps_ambient=caps_raised(args, real_uid),
        allow_nested_userns=not args.disable_userns, seccomp=tuple(seccomp), argv0=args.argv0,
        # bwrap binds what it is told: / or a home read-write, through any symlink
        allow_broad_writable=True, follow_writable_symlinks=True)
    if args.assert_userns_disabled and not args.disable_userns and host.nested_userns_possible():
        raise _err("creation of new user namespaces was not disabled as requested")
    unshared = tuple(n for n in NS_INFO_ORDER if n == "mnt" or (n == "net" and args.unshare_net)
                     or (n != "net" and n in ns))
    consumed = set(args.consumed_fds)
    for fd in (args.seccomp_fd, args.info_fd, args.json_status_fd, args.block_fd, args.userns_block_fd):
        if fd is not None:
            consumed.add(fd)
    if args.sync_fd is not None and not args.as_pid_1:
        consumed.add(args.sync_fd)
    compat = Compat(info_fd=args.info_fd, json_status_fd=args.json_status_fd, sync_fd=args.sync_fd,
                    lock_files=tuple(sandbox_path(p) for p in args.lock_files),
                    level_prefix=args.level_prefix, unshared=unshared,
                    root_without_userns=not args.unshare_user, consumed_fds=tuple(sorted(consumed)),
                    as_pid_1=args.as_pid_1)
    return policy, compat


# ---------------------------------------------------------------- bwrap's mkdir_with_parents



def parent_mode(perms: int) -> int:
    """bwrap's mode for the parents it creates: 0755 minus what ``perms`` denies group and
    others (an op without --perms counts as 0, so a bind's parents are made 0700)."""
    mode = 0o755
    if perms & 0o070 == 0:
        mode &= ~0o050
    if perms & 0o007 == 0:
        mode &= ~0o005
    return mode


def _op_perms(op) -> int:
    if isinstance(op, (Dir, Tmpfs, File)):
        return op.mode if op.mode is not None else 0
    return 0


def with_bwrap_parents(fs: list) -> list:
    """Insert the directories bwrap creates: every missing parent of a destination (mode
    :func:`parent_mode`), and a missing mount point inside a host bind (a directory, or an
    empty 0444 file for a file bind), which bwrap creates on the host."""
    out = view.View()   # indexed: each question costs the depth of the path (thousands of binds)
    for op in fs:
        if not isinstance(op, Chmod) and op.dest != "/":
            parts = op.dest.strip("/").split("/")[:-1]
            mode = parent_mode(_op_perms(op))
            for k in range(1, len(parts) + 1):
                parent = "/" + "/".join(parts[:k])
                if not view.exists(parent, out):
                    out.append(Dir(parent, mode=mode))
            if view.is_mount(op) and not view.exists(op.dest, out) and _host_backed(op.dest, out):
                if isinstance(op, File) or (isinstance(op, Bind) and op.src is not None
                                            and not os.path.isdir(op.src)):
                    out.append(File(op.dest, data=b"", mode=0o444))
                else:
                    out.append(Dir(op.dest, mode=0o755))
        out.append(op)
    return list(out)


def _host_backed(path: str, done: view.View) -> bool:
    i = done.cover(path)
    return i >= 0 and isinstance(done[i], Bind) and done[i].src is not None


