"""Which Landlock domain the command enters, decided here once for both backends and
sessions (native/psb_landlock.h implements it).

The domain keeps everything the command starts away from the sandbox's init (no ptrace,
no /proc/PID/{mem,environ,fd,ns}, no pidfd_getfd), so the init can be dumpable: its
owner reads it as with bwrap's pid 1 (docs/ARCHITECTURE.md, "Who can reach pid 1"):

* ``SIGNAL_FS``: both below, for a command that cannot mount (``Plan.command_may_mount``),
  wherever the kernel has the signal scope (ABI 6).
* ``SIGNAL``: handles no access right, scopes signals (ABI 6): mount, pivot_root and
  nested sandboxes work; the command cannot signal a process outside its domain (the
  init, a session's server and keepers: a command that could SIGSTOP its keeper could
  hold its own end). Every command gets the signal scope wherever the kernel has it (one
  rule for every path: a kind decided per path once left a session's keeper signalable).
* ``FS``: handles writing a file (Landlock ABI 1; truncating from ABI 3; REFER from ABI 2,
  granted beneath "/": else every cross-directory rename fails), granted beneath each
  writable mount destination of the plan (:func:`writable_destinations`) and on each
  descriptor the command is given that already allows it (a file open for writing or
  O_PATH, a directory). Inside the sandbox nothing changes (the mounts decide; reading,
  executing, making and removing are not handled), but a file the mounts do not make
  writable, reached through a magic link (``/proc/self/fd/0``, ``/dev/stdin``: the walk
  jumps to the host's read-write mount) cannot be opened for writing (a read-only stdin
  cannot be reopened for writing: the caller's file), nor a FIFO or device on a read-only
  mount. A domain that handles any filesystem right forbids mount and pivot_root, so only
  for a command that cannot mount (native/psb_landlock.h).
* ``NONE``: no Landlock, a command that may mount on a kernel before ABI 6, or
  ``PYSANDBOX_NO_LANDLOCK=1``: the init stays undumpable, as before Landlock.

A command that may mount (nested sandboxes, ``CAP_SYS_ADMIN`` kept) is not protected
against that reopening; nor is any command without Landlock (THREAT_MODEL.md).
Without the signal scope a command can signal what holds its lifetime; nothing that
ends a command depends on that (a session's server SIGKILLs a keeper itself).
"""

from __future__ import annotations

import os

from .. import ops as O

NONE, FS, SIGNAL, SIGNAL_FS = 0, 1, 2, 3   # native/psb_landlock.h PSB_LANDLOCK_*
SIGNAL_ABI = 6                    # struct landlock_ruleset_attr.scoped
NO_LANDLOCK_ENV = "PYSANDBOX_NO_LANDLOCK"

_abi: int | None = None


def kernel_abi() -> int:
    """The kernel's Landlock ABI version (>= 1), or 0 without Landlock (or disabled).
    Any process, any privilege; probed once, by the native module (required: without it,
    a broken install, every launch of either backend fails with native_module_missing or
    bwrap_init_unavailable before Landlock matters, and this answers 0)."""
    global _abi
    if _abi is None:
        from ..errors import NativeModuleMissing
        from ._native_lib import load_module
        try:
            _abi = int(load_module()[1].psb_landlock_abi())
        except NativeModuleMissing:
            return 0   # not cached: a later call after a repair (tests) asks again
    return _abi


def abi() -> int:
    """The ABI the sandbox may use: the kernel's, or 0 with ``PYSANDBOX_NO_LANDLOCK=1``."""
    return 0 if os.environ.get(NO_LANDLOCK_ENV) == "1" else kernel_abi()


def kind(may_mount: bool, abi_version: int | None = None) -> int:
    """The command's domain (NONE, FS, SIGNAL or SIGNAL_FS) for a command that may or may not mount,
    on a host of Landlock ABI ``abi_version`` (default: this host's, :func:`abi`).
    Fail closed: no domain means an undumpable init, never an init the command reaches."""
    v = abi() if abi_version is None else abi_version
    if v >= SIGNAL_ABI:
        return SIGNAL if may_mount else SIGNAL_FS
    if v < 1 or may_mount:
        return NONE
    return FS


def fs_kind(may_mount: bool, abi_version: int | None = None) -> int:
    """The filesystem domain alone (FS, or NONE for a command that may mount or without
    Landlock): for a command with no init of ours to guard (no pid namespace, as_pid_1)."""
    v = abi() if abi_version is None else abi_version
    return NONE if v < 1 or may_mount else FS


# The mounts a command may write through (a read-only one ends writes with EROFS itself).
_WRITABLE = (O.MountProc, O.MinimalDev, O.MountMqueue)


def _writable(op) -> bool:
    if isinstance(op, (O.BindMount, O.MountTmpfs)):
        return not op.readonly
    if isinstance(op, O.MountOverlay):
        return op.upper is not None or op.tmp
    if isinstance(op, O.WriteFile):
        return op.bind and not op.readonly
    return isinstance(op, _WRITABLE)


def writable_destinations(ops) -> tuple:
    """The destinations (sandbox paths, in order, each once) of the mounts in plan ops
    ``ops`` the command may write through: where a filesystem domain grants writing
    (native/psb_landlock.h). A mount a later one covers (same destination or an
    ancestor: :func:`pysandbox.ops.shadowed`) is not reachable, one remounted read-only
    later at exactly its destination is not writable: neither is listed. Rules attach to
    inodes: a writable bind of a host directory grants writing on that directory's files
    however they are reached (as its mount does), and a writable bind of the host's "/"
    (``pybwrap --bind / /``) on every host file."""
    mounts = [op for op in ops if isinstance(op, O.MOUNT_OPS)]
    out = []
    for i, op in enumerate(mounts):
        if not _writable(op) or O.shadowed(i, mounts):
            continue
        later = mounts[i + 1:]
        if not _remounted_readonly(op.dest, later):
            out.append(op.dest)
        elif isinstance(op, O.MinimalDev):
            # its own mounts stay writable (a remount is not recursive): devpts, the nodes
            out += [d for d in _dev_mounts(op.dest) if not _remounted_readonly(d, later) and not _covered(d, later)]
    return tuple(dict.fromkeys(out))


def _dev_mounts(dest: str) -> tuple:
    """The mounts of a minimal /dev below its tmpfs (native_translate._dev, bwrap's --dev):
    devpts, and the host's nodes bound (one the host lacks takes no rule: ENOENT)."""
    return (f"{dest}/pts",) + tuple(f"{dest}/{n}" for n in O.DEV_NODES)


def _remounted_readonly(dest: str, later) -> bool:
    return any(isinstance(op, O.RemountReadonly) and op.dest == dest for op in later)


def _covered(dest: str, later) -> bool:
    """Whether a later mount lands on ``dest`` or an ancestor (as :func:`pysandbox.ops.shadowed`)."""
    return O.shadowed(0, (O.RemountReadonly(dest),) + tuple(later))


def path_list(paths) -> bytes:
    """``paths`` as the native list: each NUL-terminated, an empty string last."""
    return b"".join(os.fsencode(p) + b"\0" for p in paths) + b"\0"
