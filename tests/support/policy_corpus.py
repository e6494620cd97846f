"""The fixed corpus: hand-written policies covering every filesystem operation and
every policy option at least once (``test_corpus_coverage`` checks that).

Each case is ``(name, build)`` where ``build(world) -> Policy``; sources are paths
of the :class:`~tests.support.world.World` tree, created by the test.
"""

from __future__ import annotations

import os
import struct
import sys

from pysandbox.policy import (Bind, Chmod, Dev, Dir, Env, File, Hide, Mqueue, Network, Overlay, Policy, Proc,
                              RemountRo, Symlink, Tmpfs, fs_dest)
from pysandbox.limits import Limits

from .world import DATA_FD, DIR_FD, PASS_FD

# seccomp: one classic BPF instruction, "return SECCOMP_RET_ALLOW"
ALLOW_ALL = struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)
BASE_NS = frozenset({"user", "pid", "ipc", "uts"})


def root_ops():
    """The default policy's filesystem: / read-only, /dev, /proc, private /tmp (and the
    interpreter bound again when it lives under /tmp, as in CI's per-user tree)."""
    return (Bind("/", "/", readonly=True), Dev("/dev"), Proc("/proc"), Tmpfs("/tmp")) + interpreter_rebinds(
        ("/dev", "/proc", "/tmp"))


def _within(path: str, top: str) -> bool:
    """``path`` is ``top`` or lies under it."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def interpreter_prefixes() -> list[str]:
    """The directories the probe's interpreter and its packages live in, outermost only."""
    prefixes = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)})
    return [p for p in prefixes if not any(p.startswith(q + "/") for q in prefixes if q != p)]


def interpreter_rebinds(covered) -> tuple:
    """Read-only binds of the interpreter's prefixes that lie under one of ``covered``."""
    return tuple(Bind(p, p, readonly=True) for p in interpreter_prefixes()
                 if any(_within(p, c) for c in covered))


def keep_interpreter(policy: Policy) -> Policy:
    """``policy`` with the interpreter bound again at the end if a mount after its
    last bind covers it (a venv under /tmp with a later Tmpfs("/tmp"), e.g.)."""
    extra = []
    for prefix in interpreter_prefixes():
        last = max((i for i, op in enumerate(policy.fs) if op == Bind(prefix, prefix, readonly=True)), default=-1)
        later = [fs_dest(op) for op in policy.fs[last + 1:] if isinstance(op, MOUNTS) and fs_dest(op) != "/"]
        if any(_within(prefix, d) for d in later):
            extra.append(Bind(prefix, prefix, readonly=True))
    return policy.replace(fs=policy.fs + tuple(extra)) if extra else policy


def interpreter_ops():
    """What the probe's interpreter needs when / is not bound: its prefixes read-only,
    /usr read-only when the interpreter lives elsewhere (a pyenv or /opt build still
    loads the system's libc and dynamic loader from there), and the host's top-level
    links into /usr (merged-/usr hosts) as symlinks."""
    ops = []
    prefixes = interpreter_prefixes()
    if not any(_within(p, "/usr") for p in prefixes) and os.path.isdir("/usr"):
        ops.append(Bind("/usr", "/usr", readonly=True))
    for top in ("bin", "lib", "lib64", "sbin"):
        host = "/" + top
        if os.path.islink(host):
            ops.append(Symlink(os.readlink(host), host))
        elif os.path.isdir(host) and not any(_within(host, p) for p in prefixes):
            ops.append(Bind(host, host, readonly=True))
    for prefix in prefixes:
        ops.insert(0, Bind(prefix, prefix, readonly=True))
    return tuple(ops)


def _default(w, **kw):
    return Policy(fs=root_ops(), **kw)


def _with(w, *ops, **kw):
    return Policy(fs=root_ops() + tuple(ops), **kw)


def _bare(w, *ops, **kw):
    return Policy(fs=interpreter_ops() + tuple(ops), **kw)


MOUNTS = (Bind, Tmpfs, Proc, Dev, Mqueue, Hide)

_CASES = [
    ("default", lambda w: _default(w)),
    ("default-api", lambda w: Policy.default(workdir=w.path("src"))),
    ("network-allow", lambda w: _default(w, network=Network("allow"))),
    # rlimits (both backends: right before the command's exec); a cgroup's memory and pids
    # limits: as root the same sandbox, unprivileged both refuse (controller_not_delegated)
    ("limits-rlimits", lambda w: _default(w, limits=Limits(file_size="8M", open_files=512, cpu_time=300))),
    ("limits-cgroup", lambda w: _default(w, limits=Limits(memory="256M", pids=512))),
    ("network-proxy", lambda w: _default(w, network=Network("proxy", ("pypi.org", "*.npmjs.org:443")))),
    ("bind-rw-dir", lambda w: _with(w, Bind(w.path("src"), "/tmp/rw"), chdir="/tmp/rw")),
    ("bind-ro-dir", lambda w: _with(w, Bind(w.path("src"), "/tmp/ro", readonly=True))),
    ("bind-file-rw-and-ro", lambda w: _with(w, Bind(w.path("fileC"), "/tmp/c"),
                                            Bind(w.path("srcB/y"), "/tmp/y", readonly=True))),
    ("bind-dev", lambda w: _with(w, Bind("/dev", "/tmp/hostdev", dev=True, readonly=True))),
    ("bind-optional-missing", lambda w: _with(w, Bind(w.path("missing"), "/tmp/m", optional=True),
                                              Bind(w.path("empty"), "/tmp/e", optional=True))),
    ("bind-fd", lambda w: _with(w, Bind(None, "/tmp/byfd", src_fd=DIR_FD))),
    ("ro-inside-rw", lambda w: _with(w, Bind(w.path("src"), "/tmp/a"),
                                     Bind(w.path("srcB"), "/tmp/a/sub1", readonly=True))),
    ("rw-inside-ro", lambda w: _with(w, Bind(w.path("src"), "/tmp/a", readonly=True),
                                     Bind(w.path("srcB"), "/tmp/a/sub2"))),
    ("tmpfs-inside-ro-bind", lambda w: _with(w, Bind(w.path("src"), "/tmp/a", readonly=True),
                                             Tmpfs("/tmp/a/sub1"), Dir("/tmp/a/sub1/made"))),
    ("tmpfs-size-mode", lambda w: _with(w, Tmpfs("/tmp/t", size=1 << 20, mode=0o700),
                                        Tmpfs("/tmp/u", size=12345, mode=0o1777))),
    ("tmpfs-over-host-dir", lambda w: _with(w, Tmpfs("/srv" if os.path.isdir("/srv") else "/tmp/srv"))),
    ("dirs-with-modes", lambda w: _with(w, Dir("/tmp/d1"), Dir("/tmp/d2/deep/er", mode=0o711),
                                        Dir("/tmp/d3", mode=0o555))),
    ("dir-existing-in-ro-bind", lambda w: _with(w, Bind(w.path("src"), "/tmp/a", readonly=True),
                                                Dir("/tmp/a/sub1", mode=0o700))),
    ("symlinks", lambda w: _with(w, Symlink("/tmp/nowhere", "/tmp/l1"), Symlink("../x", "/tmp/sub/l2"),
                                 Dir("/tmp/x"))),
    ("files-in-place", lambda w: _with(w, File("/tmp/f", data=b"hello\n"),
                                       File("/tmp/g/h", data=b"", mode=0o600))),
    ("file-from-fd", lambda w: _with(w, File("/tmp/fromfd", fd=DATA_FD, mode=0o640))),
    ("file-bind-data", lambda w: _with(w, File("/tmp/bd", data=b"bound\n", bind=True),
                                       File("/tmp/rbd", data=b"ro bound\n", bind=True, readonly=True,
                                            mode=0o444))),
    ("file-bind-over-host-file", lambda w: _with(w, Bind(w.path("src"), "/tmp/a", readonly=True),
                                                 File("/tmp/a/f1", data=b"replaced\n", bind=True,
                                                      readonly=True))),
    ("remount-ro", lambda w: _with(w, Tmpfs("/tmp/t"), Dir("/tmp/t/in"), RemountRo("/tmp/t"),
                                   Bind(w.path("src"), "/tmp/b"), RemountRo("/tmp/b"))),
    ("chmod", lambda w: _with(w, Dir("/tmp/c1"), Chmod("/tmp/c1", 0o700), File("/tmp/c2", data=b"x"),
                              Chmod("/tmp/c2", 0o604), Chmod("/tmp", 0o1777))),
    ("hide-file-dir-missing", lambda w: _with(w, Bind(w.path("src"), "/tmp/a"), Hide("/tmp/a/f2"),
                                              Hide("/tmp/a/sub1"), Hide("/tmp/a/nothing"))),
    ("hide-mountpoint", lambda w: _with(w, Tmpfs("/tmp/t"), Hide("/tmp/t"), Hide("/tmp/plain"))),
    ("hide-host-path", lambda w: Policy.default(hide=[w.path("src/f1"), w.path("srcB")])),
    ("proc-elsewhere", lambda w: _with(w, Proc("/tmp/p2"))),
    ("dev-and-mqueue", lambda w: _with(w, Mqueue("/dev/mqueue"), Dev("/tmp/dev2"))),
    ("bare-root", lambda w: _bare(w, Proc("/proc"))),
    ("bare-root-dev-tmp", lambda w: _bare(w, Dev("/dev"), Tmpfs("/tmp", mode=0o1777), Proc("/proc"),
                                          Dir("/work/a/b"), Bind(w.path("srcB"), "/work/a/b"),
                                          chdir="/work/a/b")),
    ("bare-proc-moved", lambda w: _bare(w, Proc("/p"), Mqueue("/mq"), Symlink("p/self", "/self"))),
    ("env-ops", lambda w: _default(w, env=Env(set=(("PSB_A", "changed"), ("NEW", "v=1"), ("EMPTY", "")),
                                              unset=("PSB_B", "NOT_SET")))),
    ("env-clear", lambda w: _default(w, env=Env(clear=True, set=(("ONLY", "this"),), unset=("ONLY2",)))),
    ("uid-gid", lambda w: _default(w, uid=1234, gid=4321)),
    ("uid-zero", lambda w: _default(w, uid=0, gid=0)),
    ("chdir-and-hostname", lambda w: _with(w, Dir("/tmp/here"), chdir="/tmp/here", hostname="sandbox-x")),
    ("no-pid-no-ipc", lambda w: Policy(fs=(Bind("/", "/", readonly=True), Dev("/dev"), Tmpfs("/tmp")),
                                       namespaces=frozenset({"user", "uts"}))),
    ("cgroup-ns", lambda w: _default(w, namespaces=BASE_NS | {"cgroup"})),
    ("as-pid-1", lambda w: _default(w, as_pid_1=True)),
    ("no-session-no-pdeath", lambda w: _default(w, new_session=False, die_with_parent=False)),
    ("caps-keep", lambda w: _default(w, caps_keep=frozenset({"net_bind_service", "kill"}))),
    ("caps-keep-as-root", lambda w: _default(w, uid=0, caps_keep=frozenset({"sys_admin"}))),
    # kept but not raised (pybwrap as root without --cap-*): permitted and effective only
    ("caps-keep-unraised-as-root", lambda w: _default(w, uid=0, caps_keep=frozenset({"chown", "kill"}),
                                                      caps_ambient=False)),
    ("caps-keep-unraised", lambda w: _default(w, caps_keep=frozenset({"chown"}), caps_ambient=False)),
    ("pass-fds", lambda w: _default(w, pass_fds=(PASS_FD,))),
    ("nested-userns", lambda w: _default(w, allow_nested_userns=True)),
    ("seccomp-user-filter", lambda w: _default(w, seccomp=(ALLOW_ALL,))),
    ("strict-unix", lambda w: _default(w, strict_unix=True)),
    ("allow-io-uring", lambda w: _default(w, network="allow", allow_io_uring=True)),
    ("allow-syscalls", lambda w: _default(w, allow_syscalls=frozenset({"perf_event_open", "userfaultfd"}))),
    ("report-denials", lambda w: _default(w, report_denials=True)),
    ("keep-authority-sockets", lambda w: Policy.default(keep_authority_sockets=True)),
    # the writable-path opt-ins (pysandbox/writable.py) change which policies may be built,
    # not the sandbox: the same mounts as without them
    ("writable-opt-ins", lambda w: _with(w, Bind(w.path("src"), "/tmp/rw"), allow_broad_writable=True,
                                         follow_writable_symlinks=True)),
    # an absolute argv[0] next to the interpreter: CPython finds its prefix from argv[0]
    # (a bare name only works when the build-time prefix is /usr)
    ("argv0", lambda w: _default(w, argv0=os.path.join(os.path.dirname(sys.executable), "probe-zero"))),
    # the same symlink twice: accepted (native, bwrap >= 0.9; the bwrap backend renders it once for 0.8)
    ("symlink-twice", lambda w: _with(w, Symlink("/tmp/nowhere", "/tmp/l1"), Symlink("/tmp/nowhere", "/tmp/l1"))),
    # bwrap >= 0.11 only (0.8: reference-unsupported); no upper dir: both launches run at once
    ("overlay-family", lambda w: _with(w, Overlay("/tmp/ovt", lower=(w.path("src"),), tmp=True),
                                       Overlay("/tmp/ovr", lower=(w.path("src"), w.path("srcB"))))),
    ("kitchen-sink", lambda w: _with(
        w, Bind(w.path("src"), "/tmp/k", readonly=True), Tmpfs("/tmp/k/sub1", size=65536, mode=0o750),
        Bind(w.path("srcB"), "/tmp/k/sub1/b"), Hide("/tmp/k/sub1/b/y"), Symlink("b/x", "/tmp/k/sub1/lx"),
        File("/tmp/k/sub1/data", data=b"k\n", mode=0o600), Dir("/tmp/k/sub1/d", mode=0o700),
        Chmod("/tmp/k/sub1", 0o755), RemountRo("/tmp/k/sub1"),
        network=Network("allow"), env=Env(set=(("K", "1"),)), uid=0, chdir="/tmp/k/sub1/b",
        hostname="kitchen", namespaces=BASE_NS | {"cgroup"})),
]

# every case keeps the probe's interpreter reachable (see keep_interpreter)
CASES = [(name, (lambda build: lambda w: keep_interpreter(build(w)))(build)) for name, build in _CASES]
