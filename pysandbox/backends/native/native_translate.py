"""The plan translated to native ops: :func:`translate`, one emitter per plan op type.

Each plan op (:mod:`pysandbox.ops`) has one function in :data:`_EMIT` that appends its
:class:`~.native_ops.COp` records; every path is already absolute in the setup view
(sources under ``/oldroot``, destinations under ``/newroot``) and every multi-step
kernel action (minimal /dev, /proc with its read-only re-binds) is expanded into
primitive ops, so the C side (``native/psb_ops.c``) stays a small switch. Pure: the host
facts come in as a :class:`~.native_host.HostView`.
"""

from __future__ import annotations

import os

from ... import plan as P
from ... import view as _view
from ...errors import Reason, SetupError
from ...checks import CAPABILITIES
from ...records import replace
from .. import landlock, tail
from .native_host import HostView
from ..native_ops import (BWRAP_PROC_RO, CLONE_FLAGS, DEV_LINKS, F_BIND, F_CURRENT_IDS, F_DEV, F_IF_WRITABLE,
                         F_LIFELINE, F_MODE, F_NO_AMBIENT, F_NO_RAISE, F_NOFOLLOW, F_OPTIONAL, F_RO, F_USERNS_FDS, MS_NODEV,
                         MS_NOEXEC, MS_NOSUID, PROC_RO, COp, under_root, submount_list, parent_mode)


def translate(plan: P.Plan, host: HostView | None = None, only: tuple = (), **facts) -> list[COp]:
    """The C ops for ``plan``. Pure: every host fact comes from ``host`` (a
    :class:`HostView`; ``facts`` override its fields: base, last_cap, fallback,
    mountpoints, dev_nodes, is_dir). ``only``: emit the ops of these plan op types
    alone (with INIT, its Landlock domain and the rlimits: the setup tail the bwrap
    backend's init runs, pysandbox/backends/bwrap/bwrap_tail.py).

    Raises:
        SetupError: a plan op without an emitter (never for a compiled plan).
    """
    host = HostView(**facts) if host is None else replace(host, **facts)
    cx = _Context(plan, host)
    for i, op in enumerate(plan.ops):
        if cx.init_needed and not cx.init_done and isinstance(op, (P.Seccomp, P.NewSession, P.Chdir)):
            if cx.new_session is not None:
                # As bwrap: setsid in the pid-1 init before the command's process is
                # made, so the command is in session 1 and is not a session leader.
                cx.add("SETSID", stage="new_session", plan_index=plan.ops.index(cx.new_session))
            cx.add("INIT", stage="init", plan_index=i)
            cx.init_done = True
            _landlock(cx, i)
        elif not cx.init_needed and cx.plan.launch_domain and not cx.landlock_done and isinstance(op, (P.Seccomp, P.NewSession, P.Chdir)):
            _landlock(cx, i, init=False)
        if only and not isinstance(op, only):
            continue
        emit = _EMIT.get(type(op))
        if emit is None:  # pragma: no cover - plan.compile only emits the ops in _EMIT
            raise SetupError(f"the native backend has no op for {op!r}", Reason.SETUP_FAILED, stage="translate")
        emit(cx, op, i)
        if isinstance(op, P.MOUNT_OPS):
            cx.done.append(op)
    if cx.init_needed and not cx.init_done:   # unreachable while every plan ends with Chdir
        cx.add("INIT", stage="init", plan_index=len(plan.ops))
    # After INIT: recorded by the command's process, set right before its exec.
    for res, soft, hard in plan.rlimits:
        cx.add("RLIMIT", n=res, m=soft, mode=hard, stage="rlimit", filename=tail.rlimit_name(res))
    return cx.ops


class _Context:
    """What the emitters share: the ops so far, the mount ops done, the id facts."""

    def __init__(self, plan: P.Plan, host: HostView):
        self.plan, self.host = plan, host
        self.ops: list[COp] = []
        self.done = _view.View()   # indexed: host_path costs the depth of the path
        self.disable_userns = plan.first(P.DisableUserns) is not None
        self.init_needed = "pid" in plan.namespaces and not plan.as_pid_1
        self.init_done = False
        self.landlock_done = False
        self.new_session = plan.first(P.NewSession)
        # Id maps as bwrap: with a /dev (devpts is mounted as root) setup runs as root of
        # the new user namespace, else as the sandbox's ids; a nested user namespace then
        # maps the sandbox's ids onto the setup's, also whenever nested ones are disabled.
        ids = self.ids = plan.idmap
        has_dev = plan.first(P.MinimalDev) is not None
        self.ns_uid, self.ns_gid = (0, 0) if has_dev else (ids.uid, ids.gid)
        self.nest = self.disable_userns or (self.ns_uid, self.ns_gid) != (ids.uid, ids.gid)
        caller_maps = ids.block_fd is not None   # then the nested namespace keeps the caller's ids
        if caller_maps or ids.joined:
            self.nest = self.disable_userns
        self.nested_flags = F_CURRENT_IDS if caller_maps else 0

    def add(self, kind, **kw) -> None:
        self.ops.append(COp(kind, **kw))

    def backed(self, path) -> bool:
        """Whether ``path`` in the sandbox is (so far) the host's."""
        return P.host_path(path, self.done)[0] is not None

    def need_dir(self, dest, i, stage, perms=-1):
        if dest != "/" and not self.backed(dest):
            self.add("MKDIRS", b=under_root("/newroot", dest), m=parent_mode(perms), stage=stage, plan_index=i,
                     filename=dest)

    def need_parent(self, dest, i, stage, perms=-1):
        parent = os.path.dirname(dest)
        if parent and parent != "/" and not self.backed(parent):
            pm = parent_mode(perms)
            self.add("MKDIRS", b=under_root("/newroot", parent), mode=pm, m=pm, stage=stage, plan_index=i,
                     filename=parent)


# ---------------------------------------------------------------- namespaces and ids

def _join_ops(op: P.JoinNamespaces, ns, i: int) -> list[COp]:
    """Given namespaces first, then the new ones made inside them (the clone makes none:
    a namespace made at clone time would belong to the caller's user namespace).
    Joining or making a pid namespace only places our children in it: each time setup
    continues in a new child (HOP), which the launcher waits for instead."""
    out = []
    if op.userns_fd is not None:
        out.append(COp("SETNS", n=op.userns_fd, m=CLONE_FLAGS["user"], stage="join_userns", plan_index=i,
                       filename=f"descriptor {op.userns_fd}"))
    if op.pidns_fd is not None:
        out.append(COp("SETNS", n=op.pidns_fd, m=CLONE_FLAGS["pid"], stage="join_pidns", plan_index=i,
                       filename=f"descriptor {op.pidns_fd}"))
        out.append(COp("HOP", stage="join_pidns", plan_index=i))
    flags = 0
    for name in ns:
        if not (name == "user" and op.userns_fd is not None):
            flags |= CLONE_FLAGS[name]
    out.append(COp("UNSHARE", n=flags, stage="unshare", plan_index=i))
    if "pid" in ns:
        out.append(COp("HOP", stage="unshare", plan_index=i))
    return out


def _unshare(cx, op, i):
    pass   # the clone (or UNSHARE after a join) makes the namespaces


def _join(cx, op, i):
    cx.ops.extend(_join_ops(op, cx.plan.namespaces, i))


def _idmap(cx, op, i):
    base = cx.host.base
    if op.joined:   # the joined namespace has its maps
        cx.add("SETUP_ROOT", a=base, stage="setup_root", plan_index=i, filename=base)
        return
    if op.block_fd is not None:
        # bwrap --userns-block-fd: no maps of ours; the caller writes them while we wait.
        cx.add("WAIT_FD", flags=F_LIFELINE if cx.plan.die_with_parent else 0, n=op.block_fd,
               stage="userns_block_fd", plan_index=i, filename=f"descriptor {op.block_fd}")
    else:
        cx.add("IDMAP", a="deny", b=f"{cx.ns_uid} {op.outer_uid} 1\n", c=f"{cx.ns_gid} {op.outer_gid} 1\n",
               stage="idmap", plan_index=i, reason=Reason.USER_NAMESPACE_UNAVAILABLE, filename="/proc/self/uid_map")
    cx.add("SETUP_ROOT", flags=F_USERNS_FDS if cx.nest else 0, a=base, stage="setup_root", plan_index=i,
           filename=base)


def _userns2(cx, op, i):
    cx.add("SETNS", n=op.fd, m=CLONE_FLAGS["user"], stage="userns2", plan_index=i, filename=f"descriptor {op.fd}")


def _pdeathsig(cx, op, i):
    cx.add("PDEATHSIG", stage="pdeathsig", plan_index=i)


# ---------------------------------------------------------------- the filesystem

def _bind(cx, op, i):
    dst = under_root("/newroot", op.dest)
    src = f"/oldroot/proc/self/fd/{op.src_fd}" if op.src_fd is not None else under_root("/oldroot", op.src)
    if cx.host.is_dir(op):
        cx.need_dir(op.dest, i, "bind", 0)
    elif not cx.backed(op.dest):
        cx.add("MKFILE", b=dst, m=parent_mode(0), stage="bind", plan_index=i, filename=op.dest)
    subs = submount_list(cx.host.mountpoints, op.src, dst) if cx.host.fallback and op.src is not None else None
    flags = (F_RO if op.readonly else 0) | (F_DEV if op.dev else 0) | (F_OPTIONAL if op.optional else 0)
    cx.add("BIND", flags=flags, a=src, b=dst, c=subs, stage="bind", plan_index=i,
           m=op.src_fd if op.src_fd is not None else -1, filename=op.src if op.src is not None else op.dest)


def _tmpfs(cx, op, i):
    cx.need_dir(op.dest, i, "tmpfs", -1 if op.mode is None else op.mode)
    mode = 0o755 if op.mode is None else op.mode
    data = f"mode={mode:o}" + (f",size={op.size}" if op.size is not None else "")
    # A hidden directory that vanished from the host since the plan was made has
    # nothing left to hide: ENOENT is not an error for a hide.
    hide = op.readonly and op.mode == P.HIDE_MODE and cx.backed(op.dest)
    cx.add("MOUNT", flags=F_OPTIONAL if hide else 0, a="tmpfs", b=under_root("/newroot", op.dest), c="tmpfs", d=data,
           n=MS_NOSUID | MS_NODEV, stage="tmpfs", plan_index=i, filename=op.dest)
    if op.readonly:
        cx.add("SETATTR", flags=F_RO | (F_OPTIONAL if hide else 0), b=under_root("/newroot", op.dest), stage="tmpfs",
               plan_index=i, filename=op.dest)


def _overlay(cx, op, i):
    cx.need_dir(op.dest, i, "overlay", 0)   # bwrap keeps no mode for it: 0700 parents
    if op.tmp:
        # As bwrap: the writable layers live on the setup tmpfs (our / until the
        # pivot), invisible from the sandbox and gone with it.
        for layer in ("upper", "work"):
            cx.add("MKDIRS", b=f"/tmp-overlay-{layer}-{op.tmp_index}", mode=0o755, stage="overlay",
                   plan_index=i, filename=op.dest)
    # The kernel resolves the layers' paths itself (following symlinks): each is
    # first checked to resolve without one, as a bind source is (canonical in
    # the Policy). A swap racing this check and the mount is not caught.
    for layer in op.lower + ((op.upper, op.work) if op.upper is not None else ()):
        cx.add("CHECK_PATH", a=under_root("/oldroot", layer), stage="overlay", plan_index=i, filename=layer)
    # nosuid,nodev: stricter than bwrap (which passes no flags), as for our binds.
    cx.add("MOUNT", a="overlay", b=under_root("/newroot", op.dest), c="overlay", d=op.data, n=MS_NOSUID | MS_NODEV,
           stage="overlay", plan_index=i, filename=op.dest)


def _proc(cx, op, i):
    cx.need_dir(op.dest, i, "proc", 0)
    dst = under_root("/newroot", op.dest)
    cx.add("MOUNT", a="proc", b=dst, c="proc", n=MS_NOSUID | MS_NODEV | MS_NOEXEC, stage="proc", plan_index=i,
           reason=Reason.PROC_MOUNT_FAILED, filename=op.dest)
    # As bwrap 0.8: right after the procfs, its own covering (where access(W_OK)
    # succeeds). Every plan.PROC_READONLY entry of a procfs no later mount covers is
    # made read-only at the tail (RO_COVER, _caps), where the bwrap backend's init does
    # it too: always (bwrap's rule never covers /proc/sys, whose 0555 directory hides
    # files that kuid 0 may write), and both mount tables read the same, order included.
    for sub in BWRAP_PROC_RO:
        cx.add("BIND", flags=F_RO | F_OPTIONAL | F_IF_WRITABLE, a=f"{dst}/{sub}",
               b=f"{dst}/{sub}", c=b"\0" if cx.host.fallback else None, stage="proc", plan_index=i,
               filename=f"{op.dest.rstrip('/')}/{sub}")


def proc_covers(plan: P.Plan) -> list[tuple[int, str]]:
    """``(plan index, path)`` of every ``plan.PROC_READONLY`` entry under each procfs
    that no later mount covers (the RO_COVER ops)."""
    ops = plan.mount_ops
    at = {id(op): i for i, op in enumerate(plan.ops)}
    return [(at[id(op)], f"{op.dest.rstrip('/')}/{name}") for i, op in enumerate(ops)
            if isinstance(op, P.MountProc) and not P.shadowed(i, ops) for name in PROC_RO]


def _dev(cx, op, i):
    cx.need_dir(op.dest, i, "dev", 0)
    dst = under_root("/newroot", op.dest)
    cx.add("MOUNT", a="tmpfs", b=dst, c="tmpfs", d="mode=755", n=MS_NOSUID | MS_NODEV, stage="dev",
           plan_index=i, filename=op.dest)
    for node in cx.host.dev_nodes:
        cx.add("MKFILE", b=f"{dst}/{node}", stage="dev", plan_index=i, filename=f"/dev/{node}")
        cx.add("BIND", flags=F_DEV, a=f"/oldroot/dev/{node}", b=f"{dst}/{node}",
               c=b"\0" if cx.host.fallback else None, stage="dev", plan_index=i, filename=f"/dev/{node}")
    for name, target in DEV_LINKS:
        cx.add("SYMLINK", a=target, b=f"{dst}/{name}", stage="dev", plan_index=i, filename=f"{op.dest}/{name}")
    cx.add("MKDIRS", b=f"{dst}/shm", stage="dev", plan_index=i, filename=f"{op.dest}/shm")
    cx.add("MKDIRS", b=f"{dst}/pts", stage="dev", plan_index=i, filename=f"{op.dest}/pts")
    cx.add("MOUNT", a="devpts", b=f"{dst}/pts", c="devpts", n=MS_NOSUID | MS_NOEXEC,
           d="newinstance,ptmxmode=0666,mode=620", stage="dev", plan_index=i, filename=f"{op.dest}/pts")
    cx.add("SYMLINK", a="pts/ptmx", b=f"{dst}/ptmx", stage="dev", plan_index=i, filename=f"{op.dest}/ptmx")


def _mqueue(cx, op, i):
    cx.need_dir(op.dest, i, "mqueue", 0)
    cx.add("MOUNT", a="mqueue", b=under_root("/newroot", op.dest), c="mqueue", n=0, stage="mqueue", plan_index=i,
           filename=op.dest)


def _dir(cx, op, i):
    mode = -1 if op.mode is None else op.mode
    cx.add("MKDIRS", flags=F_MODE if op.mode is not None else 0, b=under_root("/newroot", op.dest), mode=mode,
           m=parent_mode(mode), stage="dir", plan_index=i, filename=op.dest)


def _symlink(cx, op, i):
    cx.need_parent(op.dest, i, "symlink", 0)
    cx.add("SYMLINK", a=op.target, b=under_root("/newroot", op.dest), stage="symlink", plan_index=i, filename=op.dest)


def _file(cx, op, i):
    cx.need_parent(op.dest, i, "file", op.mode if op.mode is not None else (0o600 if op.bind else -1))
    hide = op.bind and op.readonly and op.mode == P.HIDE_MODE and not op.data and op.fd is None \
        and cx.backed(op.dest)
    flags = (F_BIND if op.bind else 0) | (F_RO if op.readonly else 0) | \
            (F_MODE if op.mode is not None else 0) | (F_OPTIONAL if hide else 0)
    data = op.data if op.data is not None else b""
    cx.add("WRITE", flags=flags, a=bytes(data) if data else None, n=len(data), m=op.fd if op.fd is not None else -1,
           b=under_root("/newroot", op.dest), d=f"/.psb-file-{i}" if op.bind else None,
           mode=-1 if op.mode is None else op.mode, stage="file", plan_index=i, filename=op.dest)


def _remount_ro(cx, op, i):
    cx.add("SETATTR", flags=F_RO, b=under_root("/newroot", op.dest), stage="remount_ro", plan_index=i, filename=op.dest)


def _chmod(cx, op, i):
    cx.add("CHMOD", b=under_root("/newroot", op.dest), mode=op.mode, stage="chmod", plan_index=i, filename=op.dest)


# ---------------------------------------------------------------- after the filesystem

def _pivot(cx, op, i):
    cx.add("PIVOT", stage="pivot_root", plan_index=i)


def _loopback(cx, op, i):
    cx.add("LOOPBACK", stage="loopback", plan_index=i, reason=Reason.LOOPBACK_SETUP_FAILED, filename="lo")


def _listen(cx, op, i):
    cx.add("LISTEN", n=op.port, stage="proxy listener", plan_index=i, filename=f"127.0.0.1:{op.port}")


def _hostname(cx, op, i):
    cx.add("HOSTNAME", a=op.name, stage="hostname", plan_index=i)


def _nested_maps(cx) -> dict:
    return dict(flags=cx.nested_flags, a=f"{cx.ids.uid} {cx.ns_uid} 1\n", b=f"{cx.ids.gid} {cx.ns_gid} 1\n")


def _disable_userns(cx, op, i):
    cx.add("DISABLE_USERNS", n=1, **_nested_maps(cx), stage="disable_userns", plan_index=i,
           filename="/proc/sys/user/max_user_namespaces")


def _caps(cx, op, i):
    if cx.nest and not cx.disable_userns:   # n=0: only the nested namespace, as bwrap
        cx.add("DISABLE_USERNS", n=0, **_nested_maps(cx), stage="nested_userns", plan_index=i)
    mask = 0
    for name in op.keep:
        mask |= 1 << CAPABILITIES.index(name)
    # After userns2 the uid may be unmapped there: exec decides what survives, as bwrap.
    no_ambient = F_NO_AMBIENT if cx.plan.first(P.EnterUserns2) is not None else 0
    no_raise = 0 if op.ambient else F_NO_RAISE
    # After the last mount and the nested user namespace, as the bwrap backend's init:
    # a mount namespace of our own, the tree private, the procfs covers.
    pivot = cx.plan.first(P.PivotRoot)
    cx.add("MOUNT_PRIVATE", stage="mount namespace", plan_index=cx.plan.ops.index(pivot) if pivot else i)
    for at, path in proc_covers(cx.plan):
        cx.add("RO_COVER", b=path, stage="proc", plan_index=at, filename=path)
    cx.add("CAPS", flags=no_ambient | no_raise, n=mask, m=cx.host.last_cap, stage="capabilities", plan_index=i)


def _nnp(cx, op, i):
    cx.add("NNP", stage="no_new_privs", plan_index=i)


def _seccomp(cx, op, i):
    cx.add("SECCOMP", a=bytes(op.program), n=len(op.program), m=1 if op.notify else -1, stage="seccomp",
           plan_index=i)


def _new_session(cx, op, i):
    if not cx.init_needed:   # else done in the init (translate)
        cx.add("SETSID", stage="new_session", plan_index=i)


def _landlock(cx, i, init: bool = True):
    """Right after INIT, in the command's process: a Landlock domain of its own, so that
    nothing the command starts can ptrace or read the init, which is then made dumpable
    for its owner (native/psb_landlock.h). Only with no_new_privs already set (the
    kernel's condition), of the kind landlock.kind gives for this plan and host (a
    filesystem one for a command that cannot mount, a signal-scoped one for a command
    that may: Plan.command_may_mount); none, and the init stays undumpable, where it
    gives none. ``init=False``: a plan without our init (no pid namespace, or as_pid_1):
    the filesystem domain alone (landlock.fs_kind: no init to guard, and the signals the
    command may send stay as bwrap's), at the same point, so a descriptor the command is
    given is not reopened for writing there either; none for a session's server
    (Plan.launch_domain False), which gives each command its own."""
    cx.landlock_done = True
    may_mount = cx.plan.command_may_mount
    ll = landlock.kind(may_mount, cx.host.landlock_abi) if init else landlock.fs_kind(may_mount, cx.host.landlock_abi)
    if ll != landlock.NONE and any(o.kind == "NNP" for o in cx.ops):
        # a: where a filesystem domain grants writing (the plan's writable mounts)
        paths = None if ll == landlock.SIGNAL else landlock.path_list(landlock.writable_destinations(cx.plan.ops))
        cx.add("LANDLOCK", n=ll, a=paths, stage="landlock", plan_index=i)


def _wait_fd(cx, op, i):
    cx.add("WAIT_FD", n=op.fd, stage="block_fd", plan_index=i, filename=f"descriptor {op.fd}")


def _chdir(cx, op, i):
    # The policy's own workdir (bound on its canonical host path): no symlink
    # may be followed on the way (one planted since the Policy was built).
    workdir = any(isinstance(b, P.BindMount) and b.src is not None and b.src == b.dest == op.path
                  for b in cx.plan.ops)
    cx.add("CHDIR", flags=F_NOFOLLOW if workdir else 0, a=op.path, stage="chdir", plan_index=i, filename=op.path)


_EMIT = {
    P.Unshare: _unshare, P.JoinNamespaces: _join, P.IdMap: _idmap, P.EnterUserns2: _userns2,
    P.PdeathSig: _pdeathsig, P.BindMount: _bind, P.MountTmpfs: _tmpfs, P.MountOverlay: _overlay,
    P.MountProc: _proc, P.MinimalDev: _dev, P.MountMqueue: _mqueue, P.MakeDir: _dir, P.MakeSymlink: _symlink,
    P.WriteFile: _file, P.RemountReadonly: _remount_ro, P.ChangeMode: _chmod, P.PivotRoot: _pivot,
    P.LoopbackUp: _loopback, P.ProxyListener: _listen, P.SetHostname: _hostname, P.DisableUserns: _disable_userns,
    P.DropCapabilities: _caps, P.NoNewPrivs: _nnp, P.Seccomp: _seccomp, P.NewSession: _new_session,
    P.WaitFd: _wait_fd, P.Chdir: _chdir,
}
