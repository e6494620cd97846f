"""The bwrap argv renderer: a Plan turned into bubblewrap options, and nothing else.

- :func:`render`: the ``(option, *values)`` tuples for a plan, in plan order
  (:func:`flatten` makes them words, :func:`options_used` the set of option names a
  probe checks against ``bwrap --help``);
- :func:`init_mode` (whether and how our init runs, which changes the options),
  :data:`INIT_CAPS`, :func:`proc_in_sandbox` (where the sandbox shows a procfs);
- :func:`check_expressible`: what bwrap cannot do faithfully, refused before rendering;
- :func:`caller_fds` (the caller's descriptors the options name) and :class:`DataFds`
  (the memfds that carry file data, seccomp programs and the options themselves).

Rendering reads the plan and two host facts, asked through a :class:`HostView` (the
real host unless the caller passes another); it starts nothing. Launching is in
``bwrap_launch.py``, our init in ``bwrap_init.py``, the probes in
``probe.py`` of this package; docs/ARCHITECTURE.md has the whole map.
"""

from __future__ import annotations

import os

from ... import plan as P
from ...errors import BwrapOptionUnsupported, PolicyError, Reason

_NAMESPACE_OPTIONS = (("user", "--unshare-user"), ("pid", "--unshare-pid"), ("ipc", "--unshare-ipc"),
                      ("uts", "--unshare-uts"), ("cgroup", "--unshare-cgroup"), ("net", "--unshare-net"))


# What our init needs for its setup (a mount namespace of its own, the tree made private,
# procfs entries remounted read-only, the bounding set cleared); it drops them before the
# command is forked.
INIT_CAPS = ("sys_admin", "setpcap")


class HostView:
    """The host facts rendering depends on, asked when a plan is rendered: whether a host
    path exists (a hidden path that vanished since the plan was compiled), and whether
    the host's /proc is a mounted procfs with ``self/fd`` (what a bind of it shows)."""

    def lexists(self, path: str) -> bool:
        return os.path.lexists(path)

    def proc_mounted(self) -> bool:
        return os.path.ismount("/proc") and os.path.isdir("/proc/self/fd")


HOST = HostView()


def _octal(mode: int) -> str:
    return format(mode, "04o")


def init_mode(plan: P.Plan, host: HostView = HOST) -> str | None:
    """How our init runs for ``plan``: ``"fork"``: as pid 1 of the pid namespace (not
    ``as_pid_1``), it forks the command, reaps and reports its status; ``"exec"``: a
    setup step that execs the command in its own process (``as_pid_1``: the command is
    pid 1; or no pid namespace); None: no init (the sandbox shows no procfs to exec it
    through, and the command need not be forked; as_pid_1 without one fails closed on
    the bwrap backend: nothing would hold the command until the lifetime monitor exists)."""
    if "pid" in plan.namespaces and not plan.as_pid_1:
        return "fork"
    if proc_in_sandbox(plan, host) is not None:
        return "exec"
    return None


def render(plan: P.Plan, data_fd, *, network: bool = True, probe: bool = False,
           host: HostView = HOST) -> list[tuple]:
    """The bwrap options for ``plan``, as a list of ``(option, *values)`` tuples.

    ``data_fd(bytes) -> int`` stores file contents and seccomp programs and returns the
    descriptor bwrap reads them from. ``network=False`` leaves out ``--unshare-net``
    (the filesystem half of a probe). ``probe=True`` replaces the caller's data
    descriptors (``File(fd=...)``) with empty data, so a probe consumes nothing.
    ``host``: the host facts asked (:class:`HostView`).

    With our init (:func:`init_mode`): ``--cap-add`` of :data:`INIT_CAPS` (the init
    drops them), ``--as-pid-1`` (the init, or the command with ``as_pid_1``, is pid 1),
    no ``--add-seccomp-fd`` and no ``--argv0`` (:func:`init_command` hands those to the
    init). There is no init only when the sandbox shows no procfs (so nothing of
    ``plan.PROC_READONLY`` to cover either).

    Raises:
        PolicyError: an op this renderer does not know (a bug, not user input).
    """
    out: list[tuple] = []
    namespaces = plan.namespaces
    for name, option in _NAMESPACE_OPTIONS:
        if name in namespaces and (name != "net" or network):
            out.append((option,))
    idmap = plan.idmap
    out.append(("--uid", str(idmap.uid)))
    out.append(("--gid", str(idmap.gid)))
    # Always, whatever plan.die_with_parent says: the lifetime row of THREAT_MODEL.md.
    out.append(("--die-with-parent",))
    init = init_mode(plan, host)
    if plan.as_pid_1 or init == "fork":
        out.append(("--as-pid-1",))
    if plan.argv0 is not None and not init:
        out.append(("--argv0", plan.argv0))
    done: list = []
    for op in plan.ops:
        if isinstance(op, P.SetHostname):
            out.append(("--hostname", op.name))
        elif isinstance(op, P.DisableUserns):
            out.append(("--disable-userns",))
        elif isinstance(op, P.DropCapabilities):
            out.append(("--cap-drop", "ALL"))
            for cap in sorted(set(op.keep) | (set(INIT_CAPS) if init else set())):
                out.append(("--cap-add", "CAP_" + cap.upper()))
        elif isinstance(op, P.Seccomp):
            if not init:
                out.append(("--add-seccomp-fd", str(data_fd(op.program))))
        elif isinstance(op, P.NewSession):
            out.append(("--new-session",))
        elif isinstance(op, P.Chdir):
            out.append(("--chdir", op.path))
        elif isinstance(op, P.MOUNT_OPS):
            if _repeated_symlink(op, done):
                pass   # already there: bwrap >= 0.9 accepts it again, 0.8 would refuse (native accepts)
            elif not _vanished_hide(op, done, host):
                out.extend(_render_mount(op, data_fd, probe))
            done.append(op)
        elif isinstance(op, (P.Unshare, P.IdMap, P.PdeathSig, P.PivotRoot, P.LoopbackUp, P.NoNewPrivs,
                             P.ProxyListener)):
            pass  # rendered above, what bwrap always does (pivot_root, lo up, no_new_privs), or our init's

        else:
            raise PolicyError(f"the bwrap backend cannot render {op!r}", Reason.INVALID_VALUE, op)
    return out


def _repeated_symlink(op, done) -> bool:
    """``op`` makes the same symlink as an earlier op at the same place, with nothing
    made or mounted there since (the native executor and bwrap >= 0.9 accept it again)."""
    if not isinstance(op, P.MakeSymlink):
        return False
    from ... import view
    for prev in reversed(done):
        if getattr(prev, "dest", None) == op.dest:
            return isinstance(prev, P.MakeSymlink) and prev.target == op.target
        if view.is_mount(prev) and view.under(op.dest, prev.dest):
            return False
    return False


def join_path(dest: str, name: str) -> str:
    """``name`` below the sandbox directory ``dest``."""
    return dest.rstrip("/") + "/" + name


def proc_in_sandbox(plan: P.Plan, host: HostView = HOST) -> str | None:
    """A sandbox path where a procfs is visible at the end of the setup (a ``Proc``
    mount not covered later, else the host's /proc shown through a bind: bwrap binds
    are recursive), or None. bwrap execs our init through ``PATH/self/fd/N``."""
    ops = plan.mount_ops
    dests = [op.dest for op in ops if isinstance(op, P.MountProc)]
    for dest in sorted(dests, key=lambda d: d != "/proc"):
        _host, cover = P.host_path(join_path(dest, "self"), ops)
        if isinstance(cover, P.MountProc) and cover.dest == dest:
            return dest
    source, cover = P.host_path("/proc", ops)
    if isinstance(cover, P.BindMount) and source == "/proc" and host.proc_mounted():
        return "/proc"
    return None


def _vanished_hide(op, done, host: HostView) -> bool:
    """A hiding node (compiled from Hide) whose host path has gone since the plan was
    compiled: already hidden, and bwrap could not create its mount point any more."""
    hiding = (isinstance(op, P.MountTmpfs) and op.mode == P.HIDE_MODE and op.readonly) or \
        (isinstance(op, P.WriteFile) and op.data == b"" and op.mode == P.HIDE_MODE and op.bind and op.readonly)
    if not hiding:
        return False
    source, _cover = P.host_path(op.dest, done)
    return source is not None and not host.lexists(source)


def _render_mount(op, data_fd, probe: bool) -> list[tuple]:
    if isinstance(op, P.BindMount):
        if op.src_fd is not None:
            kind = "--dev-bind-fd" if op.dev else "--ro-bind-fd" if op.readonly else "--bind-fd"
            return [(kind, str(op.src_fd), op.dest)]
        kind = "--dev-bind" if op.dev else "--ro-bind" if op.readonly else "--bind"
        out = [(kind + ("-try" if op.optional else ""), op.src, op.dest)]
        if op.dev and op.readonly:
            out.append(("--remount-ro", op.dest))
        return out
    if isinstance(op, P.MountTmpfs):
        out = []
        if op.mode is not None:
            out.append(("--perms", _octal(op.mode)))
        if op.size is not None:
            out.append(("--size", str(op.size)))
        out.append(("--tmpfs", op.dest))
        if op.readonly:
            out.append(("--remount-ro", op.dest))
        return out
    if isinstance(op, P.WriteFile):
        if op.data is not None or probe:
            fd = data_fd(op.data or b"")
        else:
            fd = op.fd
        kind = "--ro-bind-data" if op.readonly else "--bind-data" if op.bind else "--file"
        perms = [("--perms", _octal(op.mode))] if op.mode is not None else []
        return perms + [(kind, str(fd), op.dest)]
    if isinstance(op, P.MakeDir):
        perms = [("--perms", _octal(op.mode))] if op.mode is not None else []
        return perms + [("--dir", op.dest)]
    if isinstance(op, P.RemountReadonly):
        return [("--remount-ro", op.dest)]
    if isinstance(op, P.ChangeMode):
        return [("--chmod", _octal(op.mode), op.dest)]
    if isinstance(op, P.MountOverlay):
        srcs = [("--overlay-src", src) for src in op.lower]   # bottom first, as bwrap wants them
        if op.upper is not None:
            return srcs + [("--overlay", op.upper, op.work, op.dest)]
        return srcs + [("--tmp-overlay" if op.tmp else "--ro-overlay", op.dest)]
    if isinstance(op, P.MinimalDev):
        return [("--dev", op.dest)]
    if isinstance(op, P.MountProc):
        return [("--proc", op.dest)]
    if isinstance(op, P.MountMqueue):
        return [("--mqueue", op.dest)]
    if isinstance(op, P.MakeSymlink):
        return [("--symlink", op.target, op.dest)]
    raise PolicyError(f"the bwrap backend cannot render {op!r}", Reason.INVALID_VALUE, op)


def flatten(options: list[tuple]) -> list[str]:
    """The options as bwrap's words, in order."""
    return [word for item in options for word in item]


def options_used(options: list[tuple]) -> set[str]:
    """The option names the rendering uses (checked against ``bwrap --help``)."""
    return {item[0] for item in options}


def caller_fds(plan: P.Plan) -> set[int]:
    """Descriptors of the caller that the options name (bind-fd sources, file data)."""
    fds = set()
    for op in plan.mount_ops:
        if isinstance(op, P.BindMount) and op.src_fd is not None:
            fds.add(op.src_fd)
        elif isinstance(op, P.WriteFile) and op.fd is not None:
            fds.add(op.fd)
    return fds


class DataFds:
    """memfds holding data for bwrap; closed by :meth:`close` once bwrap has started."""

    def __init__(self):
        self.fds: list[int] = []

    def __call__(self, data: bytes) -> int:
        # close-on-exec here; Popen(pass_fds=...) makes it inheritable in bwrap only
        fd = os.memfd_create("pysandbox-data", os.MFD_CLOEXEC)
        if fd < 3:   # never shadow stdio slots in the child
            new = os.dup(fd) if fd >= 0 else fd
            while new < 3:
                new = os.dup(new)
            os.close(fd)
            fd = new
        self.fds.append(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def close(self):
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


def check_expressible(plan: P.Plan, info) -> None:
    """Refuse what bwrap cannot do faithfully, rather than run something weaker.

    Raises:
        BwrapOptionUnsupported: block_fd, userns_block_fd or a namespace to join; kept
            capabilities with ``caps_ambient=False`` and no init; a read-only device bind (bwrap has no read-only ``--dev-bind``; ``--remount-ro`` is not
            recursive, submounts stay writable).
        PolicyError: one descriptor feeds two files (bwrap closes it after the first).
    """
    waits = (("block_fd", "--block-fd", plan.first(P.WaitFd)),
             ("userns_block_fd", "--userns-block-fd", plan.idmap.block_fd))
    for name, option, given in waits:
        if given is not None:
            raise BwrapOptionUnsupported(
                f"the bwrap backend cannot honour {name}: its launch waits for the command's exec "
                f"(bwrap's {option} would stall it); use the native backend", Reason.BWRAP_OPTION_UNSUPPORTED)
    join, enter2 = plan.first(P.JoinNamespaces), plan.first(P.EnterUserns2)
    joined = (("userns_fd", join and join.userns_fd), ("pidns_fd", join and join.pidns_fd),
              ("userns2_fd", enter2 and enter2.fd))
    for name, given in joined:
        if given is not None:
            raise BwrapOptionUnsupported(
                f"the bwrap backend cannot honour {name}: bwrap joins given namespaces only without "
                f"--unshare-user (or from its setuid parent), which this backend always passes; use the "
                f"native backend", Reason.BWRAP_OPTION_UNSUPPORTED)
    caps = plan.first(P.DropCapabilities)
    if caps is not None and caps.keep and not caps.ambient and init_mode(plan) is None:
        # bwrap's --cap-add always makes the kept ones inheritable and ambient too; our
        # init (-n) clears both before the command's exec, but without it nothing does.
        raise BwrapOptionUnsupported(
            "the bwrap backend cannot honour caps_ambient=False without its init (no procfs at /proc in "
            "the sandbox): bwrap's --cap-add makes the kept capabilities inheritable and ambient; add "
            "Proc('/proc') or use the native backend", Reason.BWRAP_OPTION_UNSUPPORTED)
    seen = set()
    for op in plan.mount_ops:
        if isinstance(op, P.BindMount) and op.dev and op.readonly:
            raise BwrapOptionUnsupported(
                f"bwrap {info.version or ''} cannot bind {op.dest} read-only with devices: it has no "
                f"read-only --dev-bind and --remount-ro leaves submounts writable; use dev=False or "
                f"the native backend", Reason.BWRAP_OPTION_UNSUPPORTED)
        if isinstance(op, P.WriteFile) and op.fd is not None:
            if op.fd in seen:
                raise PolicyError(f"descriptor {op.fd} feeds two files; bwrap reads and closes it after "
                                  f"the first", Reason.CONFLICTING_OPTIONS, op.fd)
            seen.add(op.fd)


def nul_joined(words: list[str]) -> bytes:
    """``words`` NUL-terminated, as ``bwrap --args FD`` reads them."""
    return b"".join(os.fsencode(w) + b"\0" for w in words)   # paths may hold non-UTF-8 bytes

