"""Plan: the policy compiled to the ordered setup operations both backends execute.

``compile(policy)`` is pure apart from stat() on the host (bind sources, the type
of a hidden path, whether a mount point exists). It is done once per policy and
reused for every launch. Ops are named for the kernel action; bwrap spellings
live in ``backends/bwrap/bwrap_render.py`` and ``bwrap_compat`` only.

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
from . import view as _view
from .fs_ops import plan_kind, planned as to_plan_op
from .trace import clock, debug_logger, describe_op, ms
from .view import host_path


@dataclass(frozen=True)
class ProxyRules:
    """Network proxy mode's rules for the launcher's egress proxy (pysandbox/egress.py):
    the Policy's ``Network`` values, copied (a Plan holds no policy record)."""

    allow_hosts: tuple
    head_timeout: float
    idle_timeout: float
    max_connections: int


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
    network: str = "deny"             # the network mode (the ops unshare "net" unless "allow")
    proxy: ProxyRules | None = None   # network mode "proxy": the egress proxy's rules
    writable_paths: tuple = ()        # host paths the sandbox can write (binds, overlay uppers)
    rlimits: tuple = ()               # (resource, soft, hard) set in the command's process right
                                      # before its exec (limits.py); the setup is never under them
    # A plan without our init (as_pid_1, no pid namespace) takes the filesystem Landlock
    # domain alone at launch; False: none at launch, for a session's server only, which
    # gives each of its commands a domain of its own (a launch-time one would be every
    # command's outer domain and refuse the descriptors each is sent).
    launch_domain: bool = True

    @property
    def namespaces(self) -> frozenset:
        return next(op.namespaces for op in self.ops if isinstance(op, Unshare))

    @property
    def command_may_mount(self) -> bool:
        """:func:`command_may_mount` read off the plan's ops."""
        keep = next((op.keep for op in self.ops if isinstance(op, DropCapabilities)), ())
        return command_may_mount(not any(isinstance(op, DisableUserns) for op in self.ops), keep)

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

def command_may_mount(nested_userns: bool, caps_keep) -> bool:
    """The command can mount: it may make user namespaces of its own (nested sandboxes)
    or keeps CAP_SYS_ADMIN. A Landlock domain that handles a filesystem right forbids
    mount and pivot_root to every process in it (the kernel's Landlock documentation,
    "Filesystem topology modification"), so such a command gets a signal-scoped one
    instead, or none (backends/landlock.py; docs/ARCHITECTURE.md, "Who can reach pid 1").
    The one rule for both backends and sessions."""
    return nested_userns or "sys_admin" in caps_keep


def compile(policy: P.Policy, *, outer_ids: tuple[int, int] | None = None,
            allow_host_mountpoints: bool = False) -> Plan:
    """Compile ``policy`` into a :class:`Plan`.

    ``allow_host_mountpoints`` lets a mount point be created inside a writable host
    bind (bubblewrap does this; pybwrap, and only pybwrap, asks for it: it is no field of
    the Policy, so no caller of the public API can make a launch create files on the
    host). Otherwise a missing mount point there is a PolicyError.

    Raises:
        PolicyError: a missing bind or overlay source (``bind_source_missing``), overlay
            mount options longer than a page (``invalid_value``), a mount point
            that does not exist inside a host bind (``mount_point_missing``), a chdir
            outside anything mounted; a chdir that is missing, not a directory or hidden
            in the sandbox's view (``invalid_path``, ``conflicting_options``); a mount
            point of the wrong type (``invalid_path``) or inside the sandbox's own procfs
            where it has none (``mount_point_missing``); a writable bind of the host's
            procfs (``conflicting_options``). With a DEBUG listener on the ``pysandbox``
            logger (``--verbose``), logs the steps and the compile time (trace.py).
        CapabilityUnavailable: ``seccomp_unavailable``, no built-in filter for this
            architecture (seccomp.py).
    """
    if not isinstance(policy, P.Policy):
        raise PolicyError("compile needs a Policy", Reason.INVALID_VALUE, policy)
    log = debug_logger()
    started = clock() if log is not None else 0.0
    plan = _compile(policy, outer_ids, allow_host_mountpoints)
    if log is not None:
        log.debug("plan: %d steps compiled in %.1f ms", len(plan.ops), ms(started))
        for i, op in enumerate(plan.ops):
            log.debug("  step %2d  %s", i, describe_op(op))
    return plan


def _compile(policy: P.Policy, outer_ids, allow_host_mountpoints: bool) -> Plan:
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
    done = _view.View()   # the mount ops so far, indexed, for resolving sandbox paths to host paths
    for op in policy.fs:
        for planned in _compile_fs(op, done, allow_host_mountpoints):
            done.append(planned)
            ops.append(planned)
    _check_proc_binds(done)
    ops.append(PivotRoot())
    if "net" in ns:
        ops.append(LoopbackUp())
        if policy.network.mode == "proxy":
            ops.append(ProxyListener(P.PROXY_PORT))
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
    # session, the keyring calls, io_uring unless allowed, perf_event_open/bpf/userfaultfd
    # unless allowed, and in deny/proxy mode the socket families no network namespace
    # confines (AF_VSOCK ...).
    # report_denials: the first (the default filter) with the observer's listener.
    ops.extend(Seccomp(prog, notify=policy.report_denials and k == 0) for k, prog in enumerate(
        _seccomp.builtin_filters(strict_unix=policy.strict_unix, network=policy.network.mode,
                                 allow_io_uring=policy.allow_io_uring, allow_syscalls=policy.allow_syscalls,
                                 report=policy.report_denials)))
    if policy.new_session:
        ops.append(NewSession())
    _view.check_start_directory(policy.chdir or "/", done, "chdir", field="chdir")
    ops.append(Chdir(policy.chdir or "/"))
    return Plan(ops=tuple(ops), argv0=policy.argv0, as_pid_1=policy.as_pid_1,
                die_with_parent=policy.die_with_parent, network=policy.network.mode, proxy=_proxy_rules(policy.network),
                writable_paths=writable_host_paths(policy),
                rlimits=policy.limits.rlimits() if policy.limits is not None else ())


def _proxy_rules(network: P.Network) -> ProxyRules | None:
    if network.mode != "proxy":
        return None
    return ProxyRules(network.allow_hosts, network.head_timeout, network.idle_timeout, network.max_connections)


def compile_for_network(policy: P.Policy, mode: str) -> Plan:
    """The plan of ``policy`` with network mode ``mode`` (a backend's status asks each
    mode without building Policy records itself).

    Raises:
        PolicyError: the variant does not compile."""
    return compile(policy if policy.network.mode == mode else policy.replace(network=P.Network(mode)))


def check_terminal(plan: Plan) -> None:
    """For a terminal of its own (pysandbox/terminal.py): the sandbox must have the minimal /dev, whose devpts instance the pty comes from,
    with nothing mounted on it, on /dev/pts or below, afterwards.

    Raises:
        PolicyError (terminal_unavailable): no such /dev.
    """
    ops = plan.mount_ops
    last = max((i for i, op in enumerate(ops) if isinstance(op, MinimalDev) and op.dest == "/dev"),
               default=None)
    if last is None:
        raise PolicyError("a terminal for the sandbox needs the minimal /dev (its own devpts instance); "
                          "this policy has none: add Dev('/dev') or run without a terminal (--no-tty)",
                          Reason.TERMINAL_UNAVAILABLE, "/dev")
    for op in ops[last + 1:]:
        d = op.dest
        if d in ("/", "/dev") and not isinstance(op, (RemountReadonly, ChangeMode, MakeDir)) \
                or d == "/dev/pts" or d.startswith("/dev/pts/") or d == "/dev/ptmx":
            raise PolicyError(f"a terminal for the sandbox needs the devpts of its minimal /dev, and {d} is "
                              f"changed after it; run without a terminal (--no-tty)",
                              Reason.TERMINAL_UNAVAILABLE, d)


def writable_host_paths(policy: P.Policy) -> tuple:
    """Host paths the sandbox can write (``Policy.writable_host_paths``)."""
    return policy.writable_host_paths


# Whether a plan operation's destination must be a directory (True), not one (False),
# or either (None) where it is inside a host bind (a bind: its source's type); the
# remount and chmod make no mount point.
_WANT_DIR = {MountTmpfs: True, MountProc: True, MinimalDev: True, MountMqueue: True, MakeDir: True,
             MountOverlay: True, MakeSymlink: None, WriteFile: False}


def _compile_fs(op, done, allow_host_mountpoints):
    """The plan operation(s) of one Policy record: 1:1 through ``fs_ops.PLAN_OP`` (the
    one table), with the checks a record's kind needs; ``Hide`` by the hidden path."""
    if isinstance(op, P.Hide):
        yield from _compile_hide(op, done)
        return
    if plan_kind(op) is None:  # pragma: no cover - Policy validates op types
        raise PolicyError(f"unknown filesystem operation {op!r}", Reason.INVALID_VALUE, op)
    if isinstance(op, P.Bind):
        P.check_bind_source(op)
        if op.src is not None and op.optional and not os.path.lexists(op.src):
            return  # bwrap --bind-try: a missing source is skipped
        planned = to_plan_op(op)
        want_dir = op.src_fd is not None or os.path.isdir(op.src)
    elif isinstance(op, P.Overlay):
        P.check_overlay_sources(op)
        index = sum(1 for d in done if isinstance(d, MountOverlay) and d.tmp) if op.tmp else 0
        planned = to_plan_op(op, tmp_index=index)
        if len(os.fsencode(planned.data)) >= MOUNT_DATA_MAX:
            raise PolicyError(f"the overlay on {op.dest} has mount options longer than a page "
                              f"({len(os.fsencode(planned.data))} bytes): use fewer or shorter lower directories",
                              Reason.INVALID_VALUE, op.dest)
        want_dir = True
    else:
        planned = to_plan_op(op)
        if isinstance(planned, (RemountReadonly, ChangeMode)):
            yield planned
            return
        want_dir = _WANT_DIR[type(planned)]
    _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=want_dir)
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
    if host is None:
        _check_in_proc(dest, cover)
        return
    if os.path.lexists(host):
        _check_type(dest, host, want_dir)
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


def _check_proc_binds(done):
    """The host's procfs bound writable: its host-global entries (sys, sysrq-trigger, ...)
    accept writes from a caller's uid 0 mapped in (invariant 9 of docs/ARCHITECTURE.md).
    Only a bind of the whole ``/proc`` whose every ``PROC_READONLY`` entry is bound again
    read-only after it (pybwrap's ``--proc`` without a pid namespace) may stay writable."""
    for i, op in enumerate(done):
        if not isinstance(op, BindMount) or op.readonly or op.src is None or \
                not (op.src == "/proc" or op.src.startswith("/proc/")):
            continue
        if op.src == "/proc":
            later = {o.dest for o in done[i + 1:] if isinstance(o, BindMount) and o.readonly}
            if all(f"{op.dest.rstrip('/')}/{sub}" in later for sub in PROC_READONLY
                   if os.path.lexists(f"/proc/{sub}")):
                continue
        raise PolicyError(f"a writable bind of the host's procfs ({op.src}) would let the command change "
                          "host-global kernel settings (/proc/sys, sysrq-trigger): bind it read-only",
                          Reason.CONFLICTING_OPTIONS, op.src)


def _check_type(dest, host, want_dir):
    """A mount point that exists in a host bind must be of the kind the mount needs
    (the kernel refuses a directory on a file and the reverse: ENOTDIR at launch)."""
    if want_dir is None or os.path.islink(host):
        return   # a symlink: followed (or refused) by the backend at launch
    if want_dir and not os.path.isdir(host):
        raise PolicyError(f"{dest} is not a directory in the sandbox view (it is the host's {host}): only a "
                          f"directory can be mounted on there", Reason.INVALID_PATH, dest)
    if not want_dir and os.path.isdir(host):
        raise PolicyError(f"{dest} is a directory in the sandbox view (the host's {host}): a file cannot be "
                          f"put there", Reason.INVALID_PATH, dest)


def _check_in_proc(dest, cover):
    """A mount point inside the sandbox's own procfs: only what that procfs has can
    be mounted on, and a host process's entry (``/proc/PID``, what ``/proc/self``
    resolves to on the host) is not in the sandbox's pid namespace."""
    if not isinstance(cover, MountProc) or dest == cover.dest:
        return
    first = dest[len(cover.dest):].lstrip("/").split("/")[0]
    if first.isdigit() or not os.path.lexists("/proc/" + dest[len(cover.dest):].lstrip("/")):
        raise PolicyError(f"{dest} is inside the sandbox's own procfs on {cover.dest}, where it does not exist "
                          f"(a host process's entry is not in the sandbox's pid namespace): nothing can be "
                          f"mounted there", Reason.MOUNT_POINT_MISSING, dest)


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
