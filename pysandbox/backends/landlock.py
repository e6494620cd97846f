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
* ``FS``: handles every filesystem right of the kernel's ABI (1 to 5: its own), all granted
  beneath the sandbox's root and, on each descriptor the command is given, what that
  descriptor's open mode allows: nothing changes inside the sandbox's tree, but a file
  outside it reached through a magic link (``/proc/self/fd/0``, ``/dev/stdin``) opens with
  no more than its descriptor allows (a read-only stdin cannot be reopened for writing:
  the caller's file). A domain that handles any filesystem right forbids mount and
  pivot_root, so only for a command that cannot mount (native/psb_landlock.h).
* ``NONE``: no Landlock, a command that may mount on a kernel before ABI 6, or
  ``PYSANDBOX_NO_LANDLOCK=1``: the init stays undumpable, as before Landlock.

A command that may mount (nested sandboxes, ``CAP_SYS_ADMIN`` kept) is not protected
against that reopening; nor is any command without Landlock (THREAT_MODEL.md).
Without the signal scope a command can signal what holds its lifetime; nothing that
ends a command depends on that (a session's server SIGKILLs a keeper itself).
"""

from __future__ import annotations

import os

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
