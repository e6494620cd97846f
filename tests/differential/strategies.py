"""A hypothesis strategy over the whole policy grammar, generating VALID policies.

Valid means: ``Policy(...)`` accepts it, ``plan.compile`` accepts it, and it asks for
nothing that fails on every backend (a mount point inside a read-only mount, a
symlink over an existing file, a chmod of a host file). To know that, the strategy
keeps a model of the sandbox tree as the operations build it (:class:`Model`): each
path is sandbox-made (on a tmpfs or the setup root, may be created under), backed by
the host (exists or not, never created), or special (proc, dev, mqueue, hidden).

Covered: binds (rw, ro, dev, optional with a missing source, by descriptor) nested
in each other, ro inside rw and rw inside ro; tmpfs with size and mode; dirs with
modes; symlinks; files in place, from a descriptor, bind-mounted, read-only; remount
read-only; chmod; hide over host files and directories, over mount points and over
nothing; proc, dev and mqueue placements; two roots (/ bound read-only, or a bare
root holding only the interpreter); network deny and allow; environment clear, set,
unset; chdir; uid/gid; hostname; namespaces; as_pid_1; die_with_parent;
new_session; kept capabilities; pass_fds; nested user namespaces; seccomp; strict
unix. Not generated: ``argv0`` and read-only binds with ``dev=True`` (the reference
bwrap 0.8 cannot express them; the corpus has both, checked as reference-unsupported),
and ``Overlay`` (bwrap 0.8 has no overlay options: native-only, see
test_strategies.NATIVE_ONLY_OPS).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, Phase, given, seed as hyp_seed, settings
from hypothesis import strategies as st

from pysandbox.policy import (Bind, Chmod, Dev, Dir, Env, File, Hide, Mqueue, Network, Policy, Proc,
                              RemountRo, Symlink, Tmpfs)

from pysandbox.limits import Limits
from tests.support.policy_corpus import ALLOW_ALL, interpreter_ops, interpreter_rebinds
from tests.support.world import DATA_FD, DIR_FD, PASS_FD, TREE

NAMES = ("a", "b", "c", "d")
BASE_A = (Dev("/dev"), Tmpfs("/tmp"))   # after Bind("/", "/", readonly=True)
MODES = (0o755, 0o700, 0o750, 0o711, 0o555, 0o1777, 0o000)
FILE_MODES = (0o644, 0o600, 0o755, 0o400, 0o000)
# Every size holds what one policy can write into it (at most max_ops files of one
# page each): a smaller tmpfs makes both backends fail with ENOSPC, a policy that is
# not valid. 45678 is not a page multiple, so the kernel's rounding is compared too.
SIZES = (45678, 65536, 1 << 20)
TARGETS = ("/tmp", "a", "../b", "/nonexistent", "x/y", "/proc/self")
ENV_NAMES = ("PSB_A", "PSB_B", "PSB_C", "LANG", "HOME")
ENV_VALUES = ("", "v", "a b", "x=y", "ünï")
CAPS = (frozenset(), frozenset({"net_bind_service"}), frozenset({"kill", "chown"}),
        frozenset({"sys_admin"}))
IDS = (None, 0, 1000, 4242)
LIMITS = (None, None, Limits(file_size="8M", open_files=512), Limits(cpu_time=300))
# seccomp opt-ins (Policy.allow_syscalls): none (the default, twice as likely), one, all
ALLOW_SYSCALLS = (frozenset(), frozenset(), frozenset({"bpf"}), frozenset({"perf_event_open", "bpf", "userfaultfd"}))


@dataclass
class Entry:
    kind: str                 # d f l
    host: str | None          # the host path behind it; "fd" for a bind by descriptor
    mount: str                # dest of the mount it lives on
    mode: int = 0o755
    special: str | None = None   # proc dev mqueue hidden datafile


@dataclass
class Mount:
    kind: str                 # root tmpfs bind proc dev mqueue hidden file
    ro: bool = False


class Model:
    """The sandbox tree as the operations so far build it."""

    def __init__(self, world, bare: bool):
        self.world = world
        self.entries: dict[str, Entry] = {}
        self.mounts: dict[str, Mount] = {}
        self.protected: set[str] = set()   # the interpreter and what leads to it
        self.host_proc = False
        self.dir_fd_used = False   # bwrap closes a --bind-fd descriptor once bound
        self.data_fd_used = False  # and a --file descriptor once read
        if bare:
            self.mounts["/"] = Mount("root")
            self.entries["/"] = Entry("d", None, "/")
            for op in interpreter_ops():
                self.apply(op)
                for p in _ancestors_and_self(op.dest):
                    self.protected.add(p)
        else:
            self.mounts["/"] = Mount("bind", ro=True)
            self.entries["/"] = Entry("d", "/", "/")
            self.host_proc = True   # the host's procfs, seen through the root bind
            for top in ("srv", "media", "dev", "tmp"):
                if os.path.isdir("/" + top) and not os.path.islink("/" + top):
                    self.entries["/" + top] = Entry("d", "/" + top, "/")
            self.protected.add("/")
            for op in BASE_A:
                self.apply(op)
            for op in interpreter_rebinds(("/dev", "/tmp")):
                self.apply(op)
                self.protected.update(_ancestors_and_self(op.dest))

    # -- queries ----------------------------------------------------------------------

    def creatable(self, path: str) -> bool:
        """Not there, and every missing component can be made on a writable sandbox mount."""
        if path in self.entries or path == "/":
            return False
        parent = os.path.dirname(path)
        while parent not in self.entries:
            parent = os.path.dirname(parent)
        e = self.entries[parent]
        return (e.kind == "d" and e.host is None and e.special is None
                and not self.mounts[e.mount].ro and self.mounts[e.mount].kind in ("root", "tmpfs"))

    def dirs(self, *, host=None) -> list[str]:
        """Existing directories one may mount over or make again."""
        return sorted(p for p, e in self.entries.items()
                      if e.kind == "d" and e.special is None and p not in self.protected and p != "/"
                      and e.host != "fd" and (host is None or (e.host is not None) == host))

    def files(self) -> list[str]:
        return sorted(p for p, e in self.entries.items() if e.kind == "f" and e.special is None)

    def fresh_paths(self) -> list[str]:
        """Candidate new paths: one or two new components below a creatable directory."""
        out = []
        for p, e in sorted(self.entries.items()):
            if e.kind != "d" or e.special is not None:
                continue
            for n in NAMES:
                cand = (p.rstrip("/") + "/" + n)
                if self.creatable(cand):
                    out.append(cand)
                    out.append(cand + "/" + NAMES[(NAMES.index(n) + 1) % len(NAMES)])
        return out

    def mount_points(self) -> list[str]:
        return sorted(p for p in self.mounts if p != "/" and p in self.entries
                      and self.entries[p].special is None and self.entries[p].mount == p)

    def searchable(self, path: str) -> bool:
        """Every directory from / to ``path`` lets its owner search it (chdir works)."""
        for p in _ancestors_and_self(path):
            e = self.entries.get(p)
            if e is None or e.kind != "d" or e.special is not None or not e.mode & 0o100:
                return False
        return True

    def visible_proc(self) -> str | None:
        for p, e in self.entries.items():
            if e.special == "proc":
                return p
        return "/proc" if self.host_proc else None

    # -- effects ----------------------------------------------------------------------

    def _make_parents(self, path):
        missing = []
        parent = os.path.dirname(path)
        while parent not in self.entries:
            missing.append(parent)
            parent = os.path.dirname(parent)
        for p in reversed(missing):
            self.entries[p] = Entry("d", None, self.entries[parent].mount)
            parent = p

    def _cover(self, path, entry, mount):
        if path == "/proc":
            self.host_proc = False
        for p in [p for p in self.entries if p.startswith(path.rstrip("/") + "/")]:
            del self.entries[p]
        for p in [p for p in self.mounts if p.startswith(path.rstrip("/") + "/")]:
            del self.mounts[p]
        self._make_parents(path)
        self.entries[path] = entry
        self.mounts[path] = mount

    def apply(self, op) -> None:
        if isinstance(op, Bind):
            if op.src_fd is not None:
                self.dir_fd_used = True
                self._cover(op.dest, Entry("d", "fd", op.dest), Mount("bind", op.readonly))
                return
            if not os.path.lexists(op.src):
                return   # optional, missing: skipped
            if os.path.isdir(op.src):
                self._cover(op.dest, Entry("d", op.src, op.dest), Mount("bind", op.readonly))
                rel = os.path.relpath(op.src, self.world.base)
                if not rel.startswith(".."):
                    for sub, (kind, mode, _) in TREE.items():
                        if sub.startswith(rel + "/"):
                            self.entries[op.dest + sub[len(rel):]] = Entry(
                                kind, self.world.path(sub), op.dest, mode)
            else:
                self._cover(op.dest, Entry("f", op.src, op.dest, 0o644), Mount("bind", op.readonly))
        elif isinstance(op, Tmpfs):
            self._cover(op.dest, Entry("d", None, op.dest, op.mode if op.mode is not None else 0o755),
                        Mount("tmpfs"))
        elif isinstance(op, (Proc, Dev, Mqueue)):
            kind = type(op).__name__.lower()
            self._cover(op.dest, Entry("d", None, op.dest, special=kind), Mount(kind))
        elif isinstance(op, Dir):
            if op.dest not in self.entries:
                self._make_parents(op.dest)
                mount = self.entries[os.path.dirname(op.dest)].mount
                self.entries[op.dest] = Entry("d", None, mount, op.mode if op.mode is not None else 0o755)
        elif isinstance(op, Symlink):
            self._make_parents(op.dest)
            self.entries[op.dest] = Entry("l", None, self.entries[os.path.dirname(op.dest)].mount)
        elif isinstance(op, File):
            if op.fd is not None:
                self.data_fd_used = True
            if op.bind:
                # its backing file is unlinked after the bind: nothing can be mounted on it
                # again (ENOENT from mount(2) on a deleted dentry), so no later op targets it
                self._cover(op.dest, Entry("f", None, op.dest, special="datafile"), Mount("file", op.readonly))
            else:
                self._make_parents(op.dest)
                self.entries[op.dest] = Entry("f", None, self.entries[os.path.dirname(op.dest)].mount)
        elif isinstance(op, RemountRo):
            self.mounts[op.dest] = replace(self.mounts[op.dest], ro=True)
        elif isinstance(op, Chmod):
            self.entries[op.dest].mode = op.mode
        elif isinstance(op, Hide):
            e = self.entries.get(op.path)
            if e is None:
                return
            if e.host is not None and e.host != "fd" or (e.host in (None, "fd") and e.mount == op.path):
                self._cover(op.path, Entry(e.kind, None, op.path, 0, special="hidden"), Mount("hidden", True))


def _ancestors_and_self(path):
    out = [path]
    while path != "/":
        path = os.path.dirname(path)
        out.append(path)
    return out


# ---------------------------------------------------------------- the strategy

@st.composite
def fs_op(draw, model: Model, world):
    """One valid filesystem operation for the current model."""
    fresh = model.fresh_paths()
    dirs = model.dirs()
    choices = []
    dir_srcs = [world.path(p) for p, (k, _, _) in TREE.items() if k == "d"]
    file_srcs = [world.path(p) for p, (k, _, _) in TREE.items() if k == "f"]
    if dirs or fresh:
        choices += ["bind-dir", "bind-dir", "tmpfs", "tmpfs", "dir", "proc", "dev", "mqueue", "bind-missing"]
        if not model.dir_fd_used:
            choices += ["bind-fd"]
    if model.files() or fresh:
        choices += ["bind-file", "file-bind"]
    if fresh:
        choices += ["symlink", "file", "file", "dir"]
    hideable = sorted(p for p, e in model.entries.items()
                      if e.special is None and p not in model.protected and e.kind != "l"
                      and (e.host not in (None, "fd") or (e.mount == p and e.kind == "d")))
    if hideable:
        choices += ["hide", "hide"]
    if model.mount_points():
        choices += ["remount-ro"]
    chmodable = sorted(p for p, e in model.entries.items()
                       if e.host is None and e.special is None and e.kind != "l" and p not in model.protected
                       and not model.mounts[e.mount].ro and model.mounts[e.mount].kind in ("root", "tmpfs"))
    if chmodable:
        choices += ["chmod"]
    if not choices:
        return None
    kind = draw(st.sampled_from(choices))

    def dest(existing):
        # the pool first, so nesting (inside a host bind) is as likely as a fresh path
        def host(p):
            return model.entries[p].host if p in model.entries else p
        nested = [p for p in existing if (host(p) or "").startswith(world.base)   # inside a bind of ours
                  and model.entries[p].mount != p]
        backed = [p for p in existing if host(p) is not None and p not in nested]
        other = [p for p in existing if host(p) is None]
        pools = [pool for pool in (nested, nested, backed, other, fresh) if pool]
        return draw(st.sampled_from(draw(st.sampled_from(pools))))

    if kind == "bind-dir":
        # read-only with devices: bwrap 0.8 cannot express it (README D9): the corpus has it
        ro = draw(st.booleans())
        return Bind(draw(st.sampled_from(dir_srcs)), dest(dirs), readonly=ro,
                    dev=False if ro else draw(st.booleans()), optional=draw(st.booleans()))
    if kind == "bind-missing":
        return Bind(world.path("missing"), dest(dirs), optional=True)
    if kind == "bind-fd":
        return Bind(None, dest(dirs), readonly=draw(st.booleans()), src_fd=DIR_FD)
    if kind == "bind-file":
        return Bind(draw(st.sampled_from(file_srcs)), dest(model.files()), readonly=draw(st.booleans()))
    if kind == "file-bind":
        ro = draw(st.booleans())
        return File(dest(model.files()), data=draw(st.sampled_from((b"", b"bound\n", b"\x00\xff"))), bind=True,
                    readonly=ro, mode=draw(st.sampled_from((None,) + FILE_MODES)))
    if kind == "tmpfs":
        return Tmpfs(dest(dirs), size=draw(st.sampled_from((None,) + SIZES)),
                     mode=draw(st.sampled_from((None,) + MODES)))
    if kind == "dir":
        return Dir(dest(dirs), mode=draw(st.sampled_from((None,) + MODES)))
    if kind == "proc" and model.host_proc:
        return Proc(dest(dirs + ["/proc"]))
    if kind in ("proc", "dev", "mqueue"):
        return {"proc": Proc, "dev": Dev, "mqueue": Mqueue}[kind](dest(dirs))
    if kind == "symlink":
        return Symlink(draw(st.sampled_from(TARGETS)), draw(st.sampled_from(fresh)))
    if kind == "file":
        if not model.data_fd_used and draw(st.booleans()):
            return File(draw(st.sampled_from(fresh)), fd=DATA_FD, mode=draw(st.sampled_from((None,) + FILE_MODES)))
        return File(draw(st.sampled_from(fresh)), data=draw(st.sampled_from((b"", b"text\n"))),
                    mode=draw(st.sampled_from((None,) + FILE_MODES)))
    if kind == "hide":
        return Hide(draw(st.sampled_from(hideable + [p + "/nothing" for p in dirs[:2]])))
    if kind == "remount-ro":
        return RemountRo(draw(st.sampled_from(model.mount_points())))
    return Chmod(draw(st.sampled_from(chmodable)), draw(st.sampled_from(MODES)))


@st.composite
def policies(draw, world, max_ops: int = 8):
    """A valid Policy over the whole grammar (see the module docstring)."""
    bare = draw(st.booleans())
    model = Model(world, bare)
    if bare:
        ops = list(interpreter_ops())
    else:
        ops = [Bind("/", "/", readonly=True), *BASE_A, *interpreter_rebinds(("/dev", "/tmp"))]
        if draw(st.booleans()):
            ops.append(Proc("/proc"))
            model.apply(ops[-1])
    for _ in range(draw(st.integers(0, max_ops))):
        op = draw(fs_op(model, world))
        if op is None:
            break
        if isinstance(op, Dir) and op.dest in model.entries and op.mode is not None:
            op = Dir(op.dest)   # a dir that exists keeps its mode: leave the mode out, no ambiguity
        ops.append(op)
        model.apply(op)
    if model.visible_proc() is None:
        where = draw(st.sampled_from(model.fresh_paths() + (["/proc"] if not bare else ["/probe-proc"])))
        ops.append(Proc(where))
        model.apply(ops[-1])
    has_proc_op = any(isinstance(op, Proc) for op in ops)
    namespaces = {"user"} | {n for n in ("ipc", "uts", "cgroup") if draw(st.booleans())}
    if has_proc_op or draw(st.booleans()):
        namespaces.add("pid")   # mounting a procfs needs a pid namespace of our own
    if any(isinstance(op, Mqueue) for op in ops):
        namespaces.add("ipc")   # mounting an mqueue fs needs an ipc namespace of our own
    env = Env(clear=draw(st.booleans()) and draw(st.booleans()),
              set=tuple(draw(st.lists(st.tuples(st.sampled_from(ENV_NAMES), st.sampled_from(ENV_VALUES)),
                                      max_size=3, unique_by=lambda t: t[0]))),
              unset=tuple(draw(st.lists(st.sampled_from(ENV_NAMES), max_size=2, unique=True))))
    chdirs = [p for p in sorted(model.entries) if model.searchable(p) and model.entries[p].kind == "d"]
    hostname = draw(st.sampled_from((None, "sbx", "probe-host.example"))) if "uts" in namespaces else None
    network = draw(st.sampled_from(("deny", "allow")))
    strict_unix = draw(st.booleans())
    return Policy(
        fs=tuple(ops),
        namespaces=frozenset(namespaces),
        network=Network(network),
        env=env,
        chdir=draw(st.sampled_from([None] + chdirs)),
        uid=draw(st.sampled_from(IDS)),
        gid=draw(st.sampled_from(IDS)),
        hostname=hostname,
        die_with_parent=draw(st.booleans()),
        new_session=draw(st.booleans()),
        as_pid_1=draw(st.booleans()) if "pid" in namespaces else False,
        caps_keep=draw(st.sampled_from(CAPS)),
        caps_ambient=draw(st.booleans()),
        pass_fds=draw(st.sampled_from(((), (PASS_FD,)))),
        allow_nested_userns=draw(st.booleans()),
        seccomp=draw(st.sampled_from(((), (ALLOW_ALL,)))),
        strict_unix=strict_unix,
        # io_uring only where no socket filter depends on its absence (policy.py)
        allow_io_uring=draw(st.booleans()) if network == "allow" and not strict_unix else False,
        allow_syscalls=draw(st.sampled_from(ALLOW_SYSCALLS)),
        # the observer's listener changes no mount or link (pysandbox/denials.py)
        report_denials=draw(st.booleans()),
        # rlimits only: a cgroup's limits need a delegated controller, unlike the rest here
        # (the corpus has both); every generated policy shows a procfs, so bwrap's init runs
        limits=draw(st.sampled_from(LIMITS)),
        # they change which policies may be built (pysandbox/writable.py), never the sandbox
        allow_broad_writable=draw(st.booleans()),
        follow_writable_symlinks=draw(st.booleans()),
    )


def sample_policies(world, count: int, seed: int) -> list[Policy]:
    """``count`` generated policies, reproducible from ``seed`` (for the report CLI)."""
    out: list[Policy] = []

    @hyp_seed(seed)
    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(policies(world))
    def collect(policy):
        out.append(policy)

    collect()
    return out[:count]
