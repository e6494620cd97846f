"""The policy: frozen, validated, pure data. No syscalls except stat() of bind sources.

A Policy is what the caller wants; ``plan.compile`` turns it into the ordered setup
operations both backends execute. Every user mistake raises :class:`PolicyError`
with a reason and the offending value, never another exception.
"""

from __future__ import annotations

import os
import _thread
from _collections_abc import Iterable   # collections.abc: the same classes, after importing collections (issue 28)

from .checks import (CAPABILITIES, IMPLEMENTED_NETWORK_MODES, PROXY_BOUNDS, as_tuple, canonical, check_fd, check_id,  # noqa: F401
                     check_mode, check_path, check_proxy_bounds, check_size, require_hashable, set_field,
                     validated)
from .environment import Env  # noqa: F401 - part of the Policy's vocabulary
from .errors import PolicyError, Reason
# The filesystem operations are part of the Policy's vocabulary: importable from here.
from .fs import (FS_OP_TYPES, Bind, Chmod, Dev, Dir, File, FsOp, Hide, Mqueue, Overlay,  # noqa: F401
                 Proc, RemountRo, Symlink, Tmpfs, check_bind_source, check_overlay_sources, fs_dest)
from .limits import Limits
from .seccomp import caller_programs, opt_in_calls
from .records import dataclass, field, replace
from .relpath import from_caller as _absolute, in_sandbox, paths as _paths
from .writable import check_policy as _check_writable, writable_sources

NAMESPACES = ("user", "pid", "ipc", "uts", "net", "cgroup")
NETWORK_MODES = ("deny", "allow", "proxy")
# Network proxy mode (pysandbox/egress.py): the listener's port in the sandbox's own (fresh)
# network namespace, and the variables the command gets, which its policy cannot set.
PROXY_PORT = 3128
PROXY_ENV_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
                   "http_proxy", "https_proxy", "all_proxy", "no_proxy")
_HOSTNAME = r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,62})$"   # compiled by `re` on first use (its cache)
_PATH_FIELDS = frozenset({"fs", "chdir", "allow_broad_writable", "follow_writable_symlinks"})   # writable.py's
_UNCHANGED_PATHS = _thread._local()   # threading.local, without importing threading (issue 28)

# ---------------------------------------------------------------- network (the environment: environment.py)

@validated
@dataclass(frozen=True)
class Network:
    """``deny``: a new network namespace with only ``lo`` up. ``allow``: host network.
    ``proxy``: deny's namespace, plus an egress proxy on the host reachable inside at
    ``127.0.0.1:3128`` that lets through only the ``allow_hosts`` entries
    (``HOST[:PORT]``, ``*.`` wildcards, IP literals only when listed; syntax of
    :func:`pysandbox.proxy.rules.parse_allow_host`). An empty ``allow_hosts`` refuses
    every request (each refusal is still an event: a way to see what a command tries).

    Raises:
        PolicyError: an unknown mode, a bad allow-list entry or proxy bound (``invalid_value``);
            ``allow_hosts`` or a bound without mode ``proxy`` (``conflicting_options``).
    """

    mode: str = "deny"
    allow_hosts: tuple[str, ...] = ()
    # the proxy's bounds (README.md, "Network proxy"; pysandbox/proxy/budget.py)
    head_timeout: float = PROXY_BOUNDS["head_timeout"]        # seconds for a client's whole request head
    idle_timeout: float = PROXY_BOUNDS["idle_timeout"]        # a relayed connection idle this long is closed
    max_connections: int = PROXY_BOUNDS["max_connections"]    # at most, fewer if the descriptor budget is less

    def __post_init__(self):
        if self.mode not in NETWORK_MODES:
            raise PolicyError(f"network mode must be one of {', '.join(NETWORK_MODES)}: {self.mode!r}",
                              Reason.INVALID_VALUE, self.mode)
        hosts = as_tuple(self.allow_hosts, "allow_hosts")
        if any(not isinstance(h, str) or not h for h in hosts):
            raise PolicyError("allow_hosts must be non-empty strings", Reason.INVALID_VALUE, hosts,
                              field="allow_hosts")
        if hosts and self.mode != "proxy":
            raise PolicyError("allow_hosts needs network mode 'proxy'", Reason.CONFLICTING_OPTIONS, hosts,
                              field="allow_hosts")
        if hosts:
            from .proxy.rules import parse_allow_host   # the one syntax (PolicyError invalid_value)
            for host in hosts:
                parse_allow_host(host)
        set_field(self, "allow_hosts", tuple(dict.fromkeys(hosts)))
        check_proxy_bounds(self)

    @property
    def implemented(self) -> bool:
        return self.mode in IMPLEMENTED_NETWORK_MODES

    @property
    def new_namespace(self) -> bool:
        return self.mode != "allow"


# ---------------------------------------------------------------- the policy

@validated
@dataclass(frozen=True)
class Policy:
    """What the sandbox may see and do.

    ``fs`` is applied in order, as bubblewrap applies its options: a later
    operation on a path shadows an earlier one. ``namespaces`` lists what is
    unshared besides the network namespace, which ``network`` decides.

    Raises:
        PolicyError: any invalid field, with ``.reason`` and ``.value``; a too-broad writable
            path or a symlink inside one (:mod:`pysandbox.writable`: ``writable_path_too_broad``,
            ``symlink_in_path``; opt-ins ``allow_broad_writable``, ``follow_writable_symlinks``).
    """

    fs: tuple = ()
    namespaces: frozenset = frozenset({"user", "pid", "ipc", "uts"})
    network: Network = field(default_factory=Network)
    env: Env = field(default_factory=Env)
    chdir: str | None = None
    uid: int | None = None
    gid: int | None = None
    hostname: str | None = None
    die_with_parent: bool = True
    new_session: bool = True
    as_pid_1: bool = False
    caps_keep: frozenset = frozenset()
    caps_ambient: bool = True              # caps_keep also inheritable and ambient (kept across an
                                           # exec as a non-zero uid); False: permitted/effective only
                                           # (pybwrap: root with no --cap-add/--cap-drop, as bwrap)
    pass_fds: tuple[int, ...] = ()
    allow_nested_userns: bool = False
    seccomp: tuple[bytes, ...] = ()
    argv0: str | None = None
    keep_authority_sockets: bool = False   # deny mode: keep docker/ssh-agent/... sockets (authority.py)
    strict_unix: bool = False              # seccomp: socket(AF_UNIX) refused, socketpair allowed
    allow_io_uring: bool = False           # seccomp: io_uring_* allowed (network allow, not strict_unix)
    allow_syscalls: frozenset = frozenset()  # seccomp: of perf_event_open, bpf, userfaultfd, those allowed
    report_denials: bool = False           # result.denials: what the sandbox refused (denials.py)
    block_fd: int | None = None            # setup waits for a byte or EOF here before the command
    userns_block_fd: int | None = None     # setup waits here before any id map: the caller writes them
    userns_fd: int | None = None           # join this user namespace instead of creating one
    pidns_fd: int | None = None            # join this pid namespace ("pid": a new one inside it)
    userns2_fd: int | None = None          # after the setup, switch to this user namespace
    limits: Limits | None = None           # resource limits (limits.py); None: none
    allow_broad_writable: bool = False     # writable /, system trees, homes allowed (writable.py)
    follow_writable_symlinks: bool = False  # symlinks inside writable paths followed (writable.py)

    def __post_init__(self):
        fs = as_tuple(self.fs, "fs")
        for op in fs:
            if not isinstance(op, FS_OP_TYPES):
                raise PolicyError(f"not a filesystem operation: {op!r}", Reason.INVALID_VALUE, op)
        set_field(self, "fs", fs)
        if isinstance(self.namespaces, str):
            raise PolicyError("namespaces must be a collection of names", Reason.INVALID_VALUE, self.namespaces)
        ns = frozenset(n for n in as_tuple(self.namespaces, "namespaces") if require_hashable(n, "namespaces"))
        unknown = ns - set(NAMESPACES)
        if unknown:
            raise PolicyError(f"unknown namespaces: {sorted(unknown)}", Reason.INVALID_VALUE, sorted(unknown))
        if "net" in ns:
            raise PolicyError("the network namespace is chosen by network mode, not listed in namespaces",
                              Reason.CONFLICTING_OPTIONS, "net")
        if "user" not in ns:
            raise PolicyError("pysandbox always uses a user namespace", Reason.CONFLICTING_OPTIONS, "user")
        set_field(self, "namespaces", ns)
        if isinstance(self.network, str):
            set_field(self, "network", Network(self.network))
        elif not isinstance(self.network, Network):
            raise PolicyError("network must be a mode string or Network", Reason.INVALID_VALUE, self.network)
        if not isinstance(self.env, Env):
            raise PolicyError("env must be an Env", Reason.INVALID_VALUE, self.env)
        if self.network.mode == "proxy":
            named = [n for n, _ in self.env.set if n in PROXY_ENV_NAMES]
            if named:
                raise PolicyError(f"network proxy mode sets {', '.join(named)} itself (the proxy's address; "
                                  "NO_PROXY unset): the policy cannot set them", Reason.CONFLICTING_OPTIONS, named)
        if self.chdir is not None:
            set_field(self, "chdir", check_path(self.chdir, "chdir", field="chdir"))
        set_field(self, "uid", check_id(self.uid, "uid"))
        set_field(self, "gid", check_id(self.gid, "gid"))
        if self.hostname is not None:
            import re   # here: a policy without a hostname does not pay for it (issue 28)
            if not isinstance(self.hostname, str) or not re.match(_HOSTNAME, self.hostname):
                raise PolicyError(f"hostname must be 1-63 letters, digits, '.' or '-': {self.hostname!r}",
                                  Reason.INVALID_VALUE, self.hostname)
            if "uts" not in ns:
                raise PolicyError("a hostname needs the uts namespace", Reason.CONFLICTING_OPTIONS, self.hostname)
        for flag in ("die_with_parent", "new_session", "as_pid_1", "caps_ambient", "allow_nested_userns",
                     "keep_authority_sockets", "strict_unix", "allow_io_uring",
                     "allow_broad_writable", "follow_writable_symlinks", "report_denials"):
            if not isinstance(getattr(self, flag), bool):
                raise PolicyError(f"{flag} must be a bool", Reason.INVALID_VALUE, getattr(self, flag))
        if self.allow_io_uring and (self.strict_unix or self.network.new_namespace):
            # io_uring makes sockets (IORING_OP_SOCKET/CONNECT) that no seccomp filter sees:
            # it would bypass strict_unix and deny mode's socket-family refusals (seccomp.py).
            raise PolicyError("allow_io_uring needs network 'allow' and no strict_unix: io_uring creates "
                              "and connects sockets without the system calls the seccomp filters check, "
                              "so it would bypass strict_unix and the AF_VSOCK refusal of network "
                              f"{self.network.mode!r}", Reason.CONFLICTING_OPTIONS, "allow_io_uring")
        set_field(self, "allow_syscalls", opt_in_calls(self.allow_syscalls))
        if self.as_pid_1 and "pid" not in ns:
            raise PolicyError("as_pid_1 needs the pid namespace", Reason.CONFLICTING_OPTIONS, "as_pid_1")
        caps = frozenset(_cap_name(c) for c in as_tuple(self.caps_keep, "caps_keep"))
        set_field(self, "caps_keep", caps)
        fds = tuple(check_fd(fd, "pass_fds entry") for fd in as_tuple(self.pass_fds, "pass_fds"))
        if any(fd < 3 for fd in fds):
            raise PolicyError("pass_fds must be >= 3 (stdio is always passed)", Reason.INVALID_VALUE, fds)
        set_field(self, "pass_fds", tuple(sorted(set(fds))))
        set_field(self, "seccomp", caller_programs(self.seccomp))
        self._check_block_fds(fds)
        if self.limits is not None and not isinstance(self.limits, Limits):
            raise PolicyError("limits must be a Limits", Reason.INVALID_VALUE, self.limits, field="limits")
        if self.limits is not None and not self.limits.any:
            set_field(self, "limits", None)
        if self.argv0 is not None and (not isinstance(self.argv0, str) or "\x00" in self.argv0):
            raise PolicyError("argv0 must be a string without NUL", Reason.INVALID_VALUE, self.argv0)
        if not getattr(_UNCHANGED_PATHS, "on", False):
            _check_writable(self)

    def _check_block_fds(self, passed) -> None:
        for name in ("block_fd", "userns_block_fd", "userns_fd", "pidns_fd", "userns2_fd"):
            value = getattr(self, name)
            if value is not None:
                value = check_fd(value, name)
                set_field(self, name, value)
                if value in passed and name.endswith("block_fd"):   # setns leaves the others open
                    raise PolicyError(f"{name} {value} is consumed by the setup; it cannot also be in pass_fds",
                                      Reason.CONFLICTING_OPTIONS, value)
        if self.block_fd is not None and self.block_fd == self.userns_block_fd:
            raise PolicyError("block_fd and userns_block_fd must be different descriptors (each is closed "
                              "after its wait)", Reason.CONFLICTING_OPTIONS, self.block_fd)
        for name in ("userns_block_fd", "userns_fd"):
            if getattr(self, name) is not None and (self.uid is not None or self.gid is not None):
                raise PolicyError(f"with {name} the id maps are not ours to write: uid and gid cannot be set",
                                  Reason.CONFLICTING_OPTIONS, (self.uid, self.gid))
        if self.userns_fd is not None:
            if self.userns_block_fd is not None:
                raise PolicyError("userns_fd joins a user namespace, userns_block_fd waits in a new one",
                                  Reason.CONFLICTING_OPTIONS, self.userns_fd)
            if not self.allow_nested_userns:
                raise PolicyError("disabling nested user namespaces limits the sandbox's own user namespace "
                                  "for good; a joined one (userns_fd) is not ours to limit: set "
                                  "allow_nested_userns=True", Reason.CONFLICTING_OPTIONS, self.userns_fd)

    # -- constructors ---------------------------------------------------------------

    @classmethod
    def default(cls, workdir=None, network: str = "deny", ro: Iterable = (), rw: Iterable = (),
                hide: Iterable = (), tmpfs: Iterable = (), allow_hosts: Iterable = (), **overrides) -> "Policy":
        """The default policy (README.md, "The policy").

        ``/`` read-only, ``workdir`` (if given; never ``/`` itself; a ``Workspace``: its overlay) read-write and
        the initial directory (``workdir``, ``ro`` and ``rw`` paths are taken as the host resolves their symlinks
        when the policy is built, and bound at that canonical path), fresh ``/proc``, minimal ``/dev``, private
        ``/tmp``; new user, mount, pid, ipc, uts and (network deny or proxy) net namespaces; die with parent; new session.
        A relative ``ro``, ``rw``, ``hide`` or ``tmpfs`` path is the caller's current directory's
        (:mod:`pysandbox.relpath`), a relative ``chdir`` the workdir's (else ``/``'s), as ``cwd=`` is.
        ``allow_hosts`` with ``network="proxy"``: the proxy's allow-list (:class:`Network`). Extra
        ``ro``/``rw`` binds keep their host path; ``hide`` covers paths; ``tmpfs`` adds private tmpfs mounts.
        Nested paths are applied parents first. In network deny mode the well-known Unix-socket authority
        (authority.py) that exists now is masked and its variables unset, unless ``keep_authority_sockets``;
        the credential stores that exist now are hidden (credentials.py), and variables that look like
        secrets are left out of the command's environment (env_secrets.py), unless ``hide_credentials=False``;
        the ``.git`` at the top of each writable path is read-only (gitmeta.py) unless ``protect_git=False``,
        and so is the launcher's own Python environment where it lies inside one (launcher_files.py).
        ``home="tmpfs"``: a private, empty, writable HOME, seeded read-only with ``home_files`` (home.py).

        Raises:
            PolicyError: a bad path, a missing bind source, a bad override; ``workdir_too_broad`` for ``/``.
        """
        items = []  # (depth, rank, op): parents before children, then by kind
        # A path given as a symlink is bound where it points now, at that (canonical)
        # path: the symlink, seen through the read-only /, leads there in the sandbox.
        for what, paths in (("ro", ro), ("rw", rw)):
            for path in _paths(paths, what):   # the bind keeps the path as named (named_src)
                real = canonical(path)
                _check_source(real, what)
                items.append((real, 0, Bind(path, real, readonly=what == "ro")))
        wd = "/"   # what a relative chdir is relative to
        if hasattr(workdir, "policy_ops"):   # a Workspace: an overlay on the project (workspace.py)
            items += workdir.policy_ops(overrides)
            wd = workdir.project
        elif workdir is not None:
            given = check_path(_absolute(workdir, lexical=True), "workdir", field="workdir")
            wd = canonical(given)
            if wd == "/":   # also a symlink to /: checked where it points
                raise PolicyError("workdir '/' would bind the whole host filesystem read-write: name a "
                                  "project directory (or none)", Reason.WORKDIR_TOO_BROAD, wd, field="workdir")
            _check_source(wd, "workdir")
            if not os.path.isdir(wd):
                raise PolicyError(f"workdir {given}: not a directory", Reason.INVALID_PATH, given, field="workdir")
            items.append((wd, 0, Bind(given, wd)))
            overrides.setdefault("chdir", wd)
        if overrides.get("chdir") is not None:   # relative: to the workdir, else /
            overrides["chdir"] = in_sandbox(overrides["chdir"], wd)
        # The default's protections, imported here: a Policy built field by field (pybwrap's)
        # does not load them.
        from .credentials import default_hides
        from .gitmeta import default_binds as default_git_binds
        from .home import scratch_items, visible_hides
        from .launcher_files import default_binds as default_launcher_binds
        scratch = scratch_items(overrides.pop("home", "host"), overrides.pop("home_files", ()))   # home.py
        items += scratch
        for path in _paths(tmpfs, "tmpfs"):
            if path == "/":
                raise PolicyError("tmpfs path '/' would replace the whole read-only host view with an empty "
                                  "directory (no command left to run): build Policy(fs=...) to start from an "
                                  "empty root", Reason.INVALID_PATH, "/", field="tmpfs")
            items.append((path, 1, Tmpfs(path)))
        for path in _paths(hide, "hide"):
            items.append((path, 2, Hide(path)))
        net_mode = network if isinstance(network, str) else getattr(network, "mode", None)
        if net_mode != "allow" and not overrides.get("keep_authority_sockets", False):
            # Network deny: mask the known authority sockets that exist now and drop the
            # variables that advertise them (see authority.py for the exact coverage).
            from . import authority
            for sock in authority.present():
                items.append((sock.path, 2, Hide(sock.path)))
            env = overrides.get("env", Env())
            if isinstance(env, Env):
                overrides["env"] = replace(
                    env, unset=tuple(env.unset) + tuple(v for v in authority.ENV_VARIABLES if v not in env.unset))
        hide_credentials = overrides.pop("hide_credentials", True)
        # a Workspace's overlay too: its writes are committed to the host later
        writable = [path for path, rank, op in items if rank == 0 and (
            isinstance(op, Bind) and not op.readonly or isinstance(op, Overlay) and op.writable)]
        named = [path for path, _, _ in items]
        git_binds = default_git_binds(writable, named, overrides.pop("protect_git", True))   # gitmeta.py
        git_binds += default_launcher_binds(writable, named)                               # launcher_files.py
        env = overrides.get("env", Env())
        if hide_credentials is True and isinstance(env, Env) and not env.clear and env.keep is None:
            overrides["env"] = replace(env, drop_secrets=True)   # env_secrets.py: keys in variables too
        items.sort(key=lambda t: (t[0].count("/") if t[0] != "/" else 0, t[1]))
        fs = (Bind("/", "/", readonly=True), Dev("/dev"), Proc("/proc"), Tmpfs("/tmp")) + tuple(
            op for _, _, op in items) + git_binds + visible_hides(default_hides(items, hide_credentials), scratch)
        if isinstance(network, str):
            network = Network(network, allow_hosts)
        elif allow_hosts:
            raise PolicyError("allow_hosts goes in the Network given as network", Reason.CONFLICTING_OPTIONS,
                              allow_hosts)
        return cls(fs=fs, network=network, **overrides)

    @classmethod
    def from_toml(cls, path, **overrides) -> "Policy":
        """The policy a TOML profile describes (README.md, "Profiles"; ``pysandbox/profile.py``):
        ``Policy.default`` with the file's keys, then ``overrides``. ``path`` is a file, or
        the name of a shipped profile (``"agent"``, ``"ci"``, ``"inspect"``). The ``[run]``
        table (backend, timeout) is the command line's and is not part of the Policy.

        Raises:
            PolicyError: an unreadable file, TOML syntax, an unknown key (with a "did you
                mean"), a bad value; the message names the file, the line and the key.
        """
        from .profile import load
        return load(path).policy(cls, Env, **overrides)

    def replace(self, **changes) -> "Policy":
        """A copy with ``changes``; one that changes no field :mod:`pysandbox.writable` judges
        keeps the policy-time judgement instead of walking the host again (a session's copy)."""
        _UNCHANGED_PATHS.on = not changes.keys() & _PATH_FIELDS
        try:
            return replace(self, **changes)
        finally:
            _UNCHANGED_PATHS.on = False

    @property
    def writable_host_paths(self) -> tuple[str, ...]:
        """Host paths the sandbox can write: rw bind sources, overlay upper and work
        directories, and the writable sandbox paths (:attr:`writable_paths`)."""
        return writable_sources(self) + self.writable_paths

    @property
    def writable_paths(self) -> tuple[str, ...]:
        """Sandbox paths that end up writable and backed by the host (rw binds, overlays
        with an upper directory)."""
        return tuple(op.dest for op in self.fs
                     if (isinstance(op, Bind) and not op.readonly) or (isinstance(op, Overlay) and op.writable))


def _check_source(path: str, field: str) -> None:
    """A bind source of ``Policy.default`` must exist (``bind_source_missing``)."""
    if not os.path.lexists(path):
        raise PolicyError(f"bind source does not exist: {path}", Reason.BIND_SOURCE_MISSING, path, field=field)


def _cap_name(cap) -> str:
    if not isinstance(cap, str):
        raise PolicyError(f"capability must be a name: {cap!r}", Reason.INVALID_VALUE, cap)
    name = cap.lower().removeprefix("cap_")
    if name not in CAPABILITIES:
        raise PolicyError(f"unknown capability: {cap!r}", Reason.INVALID_VALUE, cap)
    return name
