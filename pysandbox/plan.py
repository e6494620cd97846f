"""Plan: the policy compiled to the ordered setup operations both backends execute.

``compile(policy)`` is pure apart from stat() on the host (bind sources, the type
of a hidden path, whether a mount point exists). It is done once per policy and
reused for every launch. Ops are named for the kernel action; bwrap spellings
live in ``backends/bwrap_render.py`` and ``bwrap_compat`` only.

Order, as in bubblewrap: namespaces and id maps; the filesystem operations in
policy order (on a fresh tmpfs root, before pivot_root); pivot_root; loopback up;
hostname; nested user namespaces disabled; capabilities dropped; no_new_privs;
seccomp; new session; chdir; exec.
"""

from __future__ import annotations

import os
import stat

from . import policy as P
from . import seccomp as _seccomp
from .errors import PolicyError, Reason
from .records import dataclass


from .ops import *   # noqa: F401,F403  (the plan's vocabulary)
from .view import host_path


@dataclass(frozen=True)
class Plan:
    """The compiled policy: the whole contract between a Policy and a backend.

    ``ops`` is the ordered list of setup operations; the other fields are the launch
    facts that are not setup steps. Backends read a Plan and nothing else: it holds no
    reference to the Policy it came from."""

    ops: tuple
    argv0: str | None = None          # the command's argv[0] (bwrap --argv0), None: its name
    as_pid_1: bool = False            # the command is pid 1 of its pid namespace (no init)
    die_with_parent: bool = True      # the caller's death ends the sandbox
    network: P.Network = P.Network()  # mode; ``new_namespace``: the ops unshare "net"
    writable_paths: tuple = ()        # host paths the sandbox can write (binds, overlay uppers)

    @property
    def namespaces(self) -> frozenset:
        return next(op.namespaces for op in self.ops if isinstance(op, Unshare))

    @property
    def mount_ops(self) -> tuple:
        return tuple(op for op in self.ops if isinstance(op, MOUNT_OPS))

    @property
    def idmap(self) -> IdMap:
        return next(op for op in self.ops if isinstance(op, IdMap))

    @property
    def chdir(self) -> str:
        """The command's working directory in the sandbox."""
        return self.first(Chdir).path

    def first(self, kind):
        return next((op for op in self.ops if isinstance(op, kind)), None)


# ---------------------------------------------------------------- compile

def compile(policy: P.Policy, *, outer_ids: tuple[int, int] | None = None) -> Plan:
    """Compile ``policy`` into a :class:`Plan`.

    ``policy.allow_host_mountpoints`` lets a mount point be created inside a writable
    host bind (bubblewrap does this; pybwrap follows it). pysandbox's own policies never
    create files on the host: a missing mount point there is a PolicyError.

    Raises:
        PolicyError: a missing bind or overlay source (``bind_source_missing``), overlay
            mount options longer than a page (``invalid_value``), a mount point
            that does not exist inside a host bind (``mount_point_missing``), a chdir
            outside anything mounted.
        CapabilityUnavailable: ``seccomp_unavailable``, no built-in filter for this
            architecture (seccomp.py).
    """
    if not isinstance(policy, P.Policy):
        raise PolicyError("compile needs a Policy", Reason.INVALID_VALUE, policy)
    outer_uid, outer_gid = outer_ids if outer_ids is not None else (os.geteuid(), os.getegid())
    ns = set(policy.namespaces) | {"mount"}
    if policy.network.new_namespace:
        ns.add("net")
    ops: list = [Unshare(frozenset(ns))]
    if policy.userns_fd is not None or policy.pidns_fd is not None:
        ops.append(JoinNamespaces(policy.userns_fd, policy.pidns_fd))
    ops.append(IdMap(outer_uid if policy.uid is None else policy.uid,
                     outer_gid if policy.gid is None else policy.gid, outer_uid, outer_gid,
                     policy.userns_block_fd, joined=policy.userns_fd is not None))
    if policy.die_with_parent:
        ops.append(PdeathSig())
    done: list = []   # the mount ops so far, for resolving sandbox paths to host paths
    for op in policy.fs:
        for planned in _compile_fs(op, done, policy.allow_host_mountpoints):
            done.append(planned)
            ops.append(planned)
    ops.append(PivotRoot())
    if "net" in ns:
        ops.append(LoopbackUp())
    if policy.hostname is not None:
        ops.append(SetHostname(policy.hostname))
    if policy.userns2_fd is not None:   # as bwrap: after everything that needs the first one's rights
        ops.append(EnterUserns2(policy.userns2_fd))
    if not policy.allow_nested_userns:
        ops.append(DisableUserns())
    ops.append(DropCapabilities(policy.caps_keep, ambient=policy.caps_ambient))
    ops.append(NoNewPrivs())
    if policy.block_fd is not None:   # as bwrap: after the capability drop, before seccomp
        ops.append(WaitFd(policy.block_fd))
    ops.extend(Seccomp(prog) for prog in policy.seccomp)
    # Built-in filters, always (seccomp.py): TIOCSTI/TIOCLINUX refused even with a shared
    # session, the keyring calls, io_uring unless allowed, and in deny/proxy mode the
    # socket families no network namespace confines (AF_VSOCK ...).
    ops.extend(Seccomp(prog) for prog in _seccomp.builtin_filters(
        strict_unix=policy.strict_unix, network=policy.network.mode, allow_io_uring=policy.allow_io_uring))
    if policy.new_session:
        ops.append(NewSession())
    ops.append(Chdir(policy.chdir or "/"))
    return Plan(ops=tuple(ops), argv0=policy.argv0, as_pid_1=policy.as_pid_1,
                die_with_parent=policy.die_with_parent, network=policy.network,
                writable_paths=writable_host_paths(policy))


def writable_host_paths(policy: P.Policy) -> tuple:
    """Host paths the sandbox can write: rw bind sources, overlay upper and work
    directories, and the policy's writable sandbox paths."""
    paths = []
    for op in policy.fs:
        if isinstance(op, P.Bind) and op.src is not None and not op.readonly:
            paths.append(op.src)
        elif isinstance(op, P.Overlay) and op.writable:
            paths += [op.upper, op.work]
    paths.extend(policy.writable_paths)
    return tuple(paths)


def _compile_fs(op, done, allow_host_mountpoints):
    if isinstance(op, P.Hide):
        yield from _compile_hide(op, done)
        return
    if isinstance(op, P.Bind):
        P.check_bind_source(op)
        if op.src is not None and op.optional and not os.path.lexists(op.src):
            return  # bwrap --bind-try: a missing source is skipped
        planned = BindMount(op.src, op.dest, op.readonly, op.dev, op.optional, op.src_fd)
        is_dir = op.src_fd is not None or os.path.isdir(op.src)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=is_dir)
    elif isinstance(op, P.Tmpfs):
        planned = MountTmpfs(op.dest, op.size, op.mode)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Proc):
        planned = MountProc(op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Dev):
        planned = MinimalDev(op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Mqueue):
        planned = MountMqueue(op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Dir):
        planned = MakeDir(op.dest, op.mode)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Symlink):
        planned = MakeSymlink(op.target, op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=None)
    elif isinstance(op, P.File):
        planned = WriteFile(op.dest, op.data, op.fd, op.mode, op.bind, op.readonly)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=False)
    elif isinstance(op, P.Overlay):
        P.check_overlay_sources(op)
        index = sum(1 for d in done if isinstance(d, MountOverlay) and d.tmp) if op.tmp else 0
        planned = MountOverlay(op.dest, op.lower, op.upper, op.work, op.tmp, index)
        if len(os.fsencode(planned.data)) >= MOUNT_DATA_MAX:
            raise PolicyError(f"the overlay on {op.dest} has mount options longer than a page "
                              f"({len(os.fsencode(planned.data))} bytes): use fewer or shorter lower directories",
                              Reason.INVALID_VALUE, op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.RemountRo):
        planned = RemountReadonly(op.dest)
    elif isinstance(op, P.Chmod):
        planned = ChangeMode(op.dest, op.mode)
    else:  # pragma: no cover - Policy validates op types
        raise PolicyError(f"unknown filesystem operation {op!r}", Reason.INVALID_VALUE, op)
    yield planned


def _check_mountpoint(dest, done, allow_host_mountpoints, want_dir):
    """A destination inside a host bind must already exist there: creating it would
    leave a file or directory on the host (rw bind) or fail with EROFS (ro bind)."""
    host, cover = host_path(dest, done)
    if host is None and isinstance(cover, MountOverlay) and not cover.tmp:
        # Missing in every layer: made in the upper directory on the host (or EROFS).
        if allow_host_mountpoints and cover.upper is not None:
            return
        where = "writable" if cover.upper is not None else "read-only"
        raise PolicyError(
            f"{dest} does not exist in any layer of the {where} overlay on {cover.dest}; pysandbox never "
            f"creates mount points on the host: create it first, or put a tmpfs or dir above it",
            Reason.MOUNT_POINT_MISSING, dest)
    if host is None or os.path.lexists(host):
        return
    # Its parent may itself be created by an earlier op that covers the host path
    # (e.g. a Dir inside a tmpfs): host is None in that case and we returned above.
    if allow_host_mountpoints and isinstance(cover, BindMount) and not cover.readonly:
        return
    kind = "directory" if want_dir else "file"
    where = "read-only" if isinstance(cover, BindMount) and cover.readonly else "writable"
    raise PolicyError(
        f"{dest} does not exist inside the {where} host bind of {cover.src}; pysandbox never creates "
        f"mount points on the host: create the {kind} first, or put a tmpfs or dir above it",
        Reason.MOUNT_POINT_MISSING, dest)


def _compile_hide(op: P.Hide, done):
    host, cover = host_path(op.path, done)
    if host is None:
        # Not backed by the host: nothing of the host's to hide, unless an earlier op
        # created it in the sandbox. Cover it only if it is a mount point we made.
        if cover is not None and getattr(cover, "dest", None) == op.path:
            yield MountTmpfs(op.path, size=None, mode=HIDE_MODE, readonly=True)
        return
    try:
        st = os.stat(host)
    except OSError:
        return  # nothing there: already hidden
    if stat.S_ISDIR(st.st_mode):
        yield MountTmpfs(op.path, size=None, mode=HIDE_MODE, readonly=True)
    else:
        yield WriteFile(op.path, data=b"", mode=HIDE_MODE, bind=True, readonly=True)
