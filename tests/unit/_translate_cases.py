"""Representative plans for the native translation fixture (host-independent paths)."""

from __future__ import annotations

from pysandbox import plan as P
from pysandbox import policy as PP

ROOT = (PP.Bind("/", "/", readonly=True),)


def cases():
    t = PP.Tmpfs
    yield "default-ish", PP.Policy(fs=ROOT + (PP.Dev("/dev"), PP.Proc("/proc"), t("/tmp")))
    yield "binds", PP.Policy(fs=(t("/"), PP.Bind("/usr", "/usr", readonly=True), PP.Bind("/etc/passwd", "/a/b/passwd"),
                                 PP.Bind("/usr", "/x/dev", dev=True), PP.Bind("/nonexistent-psb", "/o", optional=True),
                                 PP.Bind("/usr", "/usr/lib", readonly=True, optional=True)),
                             allow_broad_writable=True)   # /usr writable: a fixture, never launched
    yield "tmpfs-hide", PP.Policy(fs=ROOT + (t("/tmp", size=4096, mode=0o700), PP.Hide("/usr"), PP.Hide("/etc/passwd"),
                                            t("/mnt"), PP.Hide("/mnt"), PP.Dir("/tmp/d", 0o711), PP.Dir("/tmp/e")))
    yield "overlays", PP.Policy(fs=(t("/"), PP.Overlay("/o", ("/usr", "/etc"), tmp=True),
                                          PP.Overlay("/p", ("/usr", "/etc")), PP.Overlay("/q/r", ("/etc",), tmp=True)))
    yield "proc-shadowed", PP.Policy(fs=(t("/"), PP.Proc("/proc"), t("/proc"), PP.Mqueue("/dev/mqueue")))
    yield "files", PP.Policy(fs=(t("/"), PP.Symlink("usr/bin", "/bin"), PP.Symlink("/x", "/a/b/c"),
                                 PP.File("/etc/x", b"hello", mode=0o640), PP.File("/etc/y", b"", bind=True, readonly=True),
                                 PP.File("/f/z", b"zz", bind=True), PP.RemountRo("/"), PP.Chmod("/etc", 0o755)))
    yield "privileges", PP.Policy(fs=ROOT, hostname="box", allow_nested_userns=True, caps_keep=frozenset({"net_raw", "chown"}),
                                  new_session=False, die_with_parent=False, uid=5, gid=6, chdir="/usr",
                                  network="allow", namespaces=frozenset({"user", "uts"}))
    yield "as-pid-1", PP.Policy(fs=ROOT + (PP.Dev("/dev"),), as_pid_1=True, seccomp=(b"\x06\0\0\0\0\0\xff\x7f",),
                                block_fd=7, argv0="zz")
    yield "userns-block", PP.Policy(fs=ROOT + (PP.Proc("/proc"),), userns_block_fd=9, namespaces=frozenset({"user", "pid", "cgroup"}))
    yield "join", PP.Policy(fs=ROOT, userns_fd=11, pidns_fd=12, userns2_fd=13, allow_nested_userns=True)
    yield "join-pid", PP.Policy(fs=ROOT + (PP.Dev("/dev"),), pidns_fd=12, namespaces=frozenset({"user", "pid", "uts"}))
    yield "workdir", PP.Policy(fs=ROOT + (PP.Bind("/usr", "/usr"),), chdir="/usr", allow_broad_writable=True)


HOSTS = {"plain": dict(base="/tmp", last_cap=40),
         "fallback": dict(base="/run", last_cap=37, fallback=True, mountpoints=("/", "/usr", "/usr/lib", "/proc", "/dev"),
                          dev_nodes=("null", "zero", "tty"))}


def normalised(plan, ops) -> list[str]:
    """repr of each op, with a seccomp program named by its plan step (the built-in
    filters differ by architecture)."""
    out = []
    for op in ops:
        if op.kind == "SECCOMP" and op.a == bytes(plan.ops[op.plan_index].program):
            out.append(repr(op).replace(repr(op.a), f"<program of step {op.plan_index}>"))
        else:
            out.append(repr(op))
    return out


def compile_case(pol):
    return P.compile(pol, outer_ids=(1000, 1000))
