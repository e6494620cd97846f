"""The setup tail's failures, read once for every path: the steps that run right before
the command's exec (native/psb_tail.h: capabilities, no_new_privs, Landlock, rlimits,
seccomp, the terminal, the proxy listener, exec) fail with the same record on every path
(``{stage, op index, errno}``: the op index in the native op array, which the native
child and the bwrap init both run, or a session command's ``enum psb_tail_step``), and
:func:`error` turns it into the one typed error naming the plan step. So the same failure
reads the same on both backends and in a session.

:data:`STEPS` mirrors ``enum psb_tail_step``; the compiled module's values are checked on
load (``_native_lib.module_drift``).
"""

from __future__ import annotations

import errno as E
import os
import resource

from ..errors import Reason, SetupError

# enum psb_tail_step, in order from 1 (native/psb_tail.h).
STEPS = ("USAGE", "MOUNT_PRIVATE", "PROC_READONLY", "BIND_CHANGED", "CAPS", "SECCOMP", "EXEC", "FORK",
         "LIFELINE", "LANDLOCK", "PTY", "RLIMIT", "LISTEN", "NNP", "GATE", "CHDIR", "FDS", "CGROUP")
STEP = {name: i + 1 for i, name in enumerate(STEPS)}

# The native op kind that runs each tail step in the executor's op array.
OP_STEP = {"CAPS": "CAPS", "NNP": "NNP", "LANDLOCK": "LANDLOCK", "RLIMIT": "RLIMIT", "SECCOMP": "SECCOMP",
           "LISTEN": "LISTEN"}

# SetupError.stage of each step: the native translation's stage names (native_translate.py).
STAGE = {"CAPS": "capabilities", "NNP": "no_new_privs", "LANDLOCK": "landlock", "RLIMIT": "rlimit",
         "SECCOMP": "seccomp", "LISTEN": "proxy listener", "PTY": "terminal", "EXEC": "exec", "CHDIR": "chdir",
         "FDS": "descriptors", "FORK": "fork", "USAGE": "init", "MOUNT_PRIVATE": "init",
         "PROC_READONLY": "proc", "BIND_CHANGED": "bind", "LIFELINE": "init", "GATE": "monitor",
         "CGROUP": "cgroup"}

_RLIMIT_NAMES = {getattr(resource, n): n for n in dir(resource) if n.startswith("RLIMIT_") and n != "RLIMIT_OFILE"}


def rlimit_name(res: int) -> str:
    return _RLIMIT_NAMES.get(res, f"resource {res}")


def where(plan_index: int | None, step: str, rlimit: tuple | None = None) -> str:
    """The ``(plan step N, tail step KIND)`` suffix (``(tail step KIND)`` for a session's
    command; cli_errors strips it without --verbose)."""
    if rlimit is not None:
        return f"(plan rlimits {rlimit_name(rlimit[0])}={rlimit[1]}:{rlimit[2]}, tail step {step})"
    if plan_index is None:   # a session's command: the step is its own, not the plan's
        return f"(tail step {step})"
    return f"(plan step {plan_index}, tail step {step})"


def error(step: str, err: int, *, plan_index: int | None = None, rlimit: tuple | None = None,
          exe: str | None = None, filename: str | None = None) -> Exception:
    """The typed error for tail ``step`` failing with ``err`` (the command did not run),
    the same whichever path ran the step. ``rlimit``: (resource, soft, hard) of a failed
    RLIMIT step; ``exe``: the command, for EXEC."""
    err = err or E.EIO
    text = os.strerror(err)
    if step == "EXEC":
        cls = {E.ENOENT: FileNotFoundError, E.EACCES: PermissionError}.get(err, OSError)
        return cls(err, text, exe)
    if step == "PTY":
        return SetupError(f"the sandbox's terminal: cannot open a pty in the sandbox's /dev/pts or hand it "
                          f"over: {text}; the command did not run", Reason.TERMINAL_UNAVAILABLE,
                          stage="terminal", errno=err)
    stage = STAGE.get(step, step.lower())
    if step == "LISTEN":
        return SetupError(f"network proxy mode: cannot listen at 127.0.0.1 in the sandbox or hand the "
                          f"listener over: {text}; the command did not run {where(plan_index, step)}",
                          Reason.SETUP_FAILED, stage=stage, op=plan_index, errno=err, filename=filename)
    if step == "RLIMIT" and rlimit is not None:
        filename = filename or rlimit_name(rlimit[0])
        return SetupError(f"rlimit {filename}: the kernel refuses {rlimit[1]}:{rlimit[2]}: {text}; the command "
                          f"did not run {where(plan_index, step, rlimit)}", Reason.SETUP_FAILED, stage=stage,
                          op=plan_index, errno=err, filename=filename)
    at = f" {filename}" if filename else ""
    return SetupError(f"{stage}{at}: {text}; the command did not run {where(plan_index, step)}",
                      Reason.SETUP_FAILED, stage=stage, op=plan_index, errno=err, filename=filename)
