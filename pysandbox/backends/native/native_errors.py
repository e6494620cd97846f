"""The native backend's one error mapping: a failure record from the C child
(``{stage, op index, errno}``, or a failed clone) to the typed pysandbox error naming
the plan step, the path and the reason (:func:`setup_error`); a failed clone is
narrowed to the namespace at fault by retrying each alone (:func:`namespace_error`).
bwrap's wording for these errors is pybwrap's (``bwrap_compat.messages``).
"""

from __future__ import annotations

import errno as E
import os

from ...errors import (CapabilityUnavailable, NetworkNamespaceUnavailable, Reason, SetupError,
                      UserNamespaceUnavailable, error_for)
from .. import tail
from .._native_lib import load_module
from ..monitor import start_error as monitor_error
from ..native_ops import (CLONE_FLAGS, PROBE_CLONE, PROBE_IDMAP, STAGE_CLONE, STAGE_EXEC, STAGE_FDS, STAGE_OP,
                         STAGE_MONITOR, STAGE_PARENT_DIED, STAGE_PTY, Compiled)


def _psb_probe():
    return load_module()[1].psb_probe


# What an errno means for an overlay mount, where its own text says nothing of the
# cause: overlayfs refuses overlapping layers with ELOOP ("Too many levels of
# symbolic links" otherwise).
_OVERLAY_ERRNO = {E.ELOOP: "Overlay directories may not overlap"}


_CLONE_ERRNOS = (E.EPERM, E.EINVAL, E.ENOSPC, E.EUSERS, E.EACCES)
_NS_ERROR = {
    "user": (UserNamespaceUnavailable, Reason.USER_NAMESPACE_UNAVAILABLE),
    "mount": (CapabilityUnavailable, Reason.MOUNT_NAMESPACE_UNAVAILABLE),
    "pid": (CapabilityUnavailable, Reason.PID_NAMESPACE_UNAVAILABLE),
    "net": (NetworkNamespaceUnavailable, Reason.NETWORK_NAMESPACE_UNAVAILABLE),
}
_HINT = {"user": "user namespaces are disabled or exhausted here (user.max_user_namespaces, "
                 "kernel.unprivileged_userns_clone, AppArmor restrict_unprivileged_userns)"}


def namespace_error(namespaces, err: int, probe=None):
    """The error for a clone that failed with ``err``: which namespace, found by
    retrying each alone in a throwaway child (only on this failure path). ``probe``:
    ``psb_probe(flags, what)`` of the cffi module (default: loaded here)."""
    probe = probe if probe is not None else _psb_probe()
    if err in _CLONE_ERRNOS:
        culprit = None
        if probe(CLONE_FLAGS["user"], PROBE_IDMAP) != 0:   # clone, or usable at all
            culprit = "user"
        else:
            for name in ("mount", "pid", "net", "ipc", "uts", "cgroup"):
                if name in namespaces and probe(CLONE_FLAGS["user"] | CLONE_FLAGS[name], PROBE_CLONE):
                    culprit = name
                    break
        if culprit in _NS_ERROR:
            cls, reason = _NS_ERROR[culprit]
            hint = _HINT.get(culprit, f"cannot create a {culprit} namespace here")
            if culprit == "user":
                mappable = probe(CLONE_FLAGS["user"], PROBE_CLONE) != 0
                if not mappable:
                    hint = ("a user namespace can be created but the caller's ids cannot be mapped in it "
                            "(e.g. uid 0 without CAP_SETFCAP, inside another sandbox)")
                from ...probe.host import nested_hint   # here: the probe package stays out of a launch
                hint = nested_hint("userns" if mappable else "userns-map") or hint
            return cls(f"clone: {os.strerror(err)}: {hint}", reason, errno=err)
        if culprit is not None:
            return SetupError(f"clone: cannot create a {culprit} namespace: {os.strerror(err)}",
                              Reason.SETUP_FAILED, stage="clone", errno=err)
    return SetupError(f"clone failed: {os.strerror(err)}", Reason.SETUP_FAILED, stage="clone", errno=err)


def setup_error(compiled: Compiled, stage: int, index: int, err: int, launch_exe: str, namespaces, probe=None):
    """The typed error for a record from the child (or a parent-side failure).
    ``probe``: as for :func:`namespace_error` (used only for a failed clone)."""
    if stage == STAGE_CLONE:
        return namespace_error(namespaces, err, probe)
    if stage == STAGE_EXEC:
        return tail.error("EXEC", err, exe=launch_exe)
    if stage == STAGE_PARENT_DIED:
        return SetupError("the launching thread died during setup", Reason.PARENT_DIED,
                          stage="pdeathsig", errno=err)
    if stage == STAGE_FDS:
        return SetupError(f"descriptor setup failed: {os.strerror(err)}", Reason.SETUP_FAILED,
                          stage="descriptors", errno=err)
    if stage == STAGE_MONITOR:
        return monitor_error(err)
    if stage == STAGE_PTY:
        return tail.error("PTY", err)
    if stage == STAGE_OP and 0 <= index < len(compiled.ops):
        op = compiled.ops[index]
        if op.kind in tail.OP_STEP:   # a step of the setup tail: read as on every path
            return tail.error(tail.OP_STEP[op.kind], err, plan_index=op.plan_index, filename=op.filename,
                              rlimit=(op.n, op.m, op.mode) if op.kind == "RLIMIT" else None)
        where = f" {op.filename}" if op.filename else ""
        if op.reason is Reason.USER_NAMESPACE_UNAVAILABLE:
            # The namespace was created but cannot be used (no id map may be written,
            # e.g. uid 0 inside a sandbox without CAP_SETFCAP).
            return UserNamespaceUnavailable(f"{op.stage}{where}: {os.strerror(err)}: the new user namespace "
                                            "cannot map the caller's ids here", op.reason, errno=err)
        hint = ""
        if op.kind == "SETNS" and err == E.EINVAL and op.m == CLONE_FLAGS["user"]:
            hint = " (joining the user namespace failed; it might not be a descendant of the current one)"
        if op.stage == "overlay" and op.kind == "MOUNT":
            detail = _OVERLAY_ERRNO.get(err) or os.strerror(err)
            exc = SetupError(f"overlay{where}: {detail} (options {op.d}) (plan step {op.plan_index}, "
                             f"native op {index} {op.kind})", op.reason, stage=op.stage, op=op.plan_index,
                             errno=err, filename=op.filename)
            exc.mount_options = op.d   # the options the kernel refused
            return exc
        if err == E.ELOOP and op.kind in ("BIND", "CHDIR", "CHECK_PATH") or err == E.EXDEV and op.kind == "BIND":
            # A host path of the policy resolved without following symlinks (canonical
            # when the Policy was built): a symlink there now was swapped in since.
            return SetupError(f"{op.stage}{where}: a symbolic link is in the path, or the path changed since the "
                              f"policy was built ({os.strerror(err)}); nothing was bound (plan step {op.plan_index}, "
                              f"native op {index} {op.kind})", Reason.SYMLINK_IN_PATH, stage=op.stage,
                              op=op.plan_index, errno=err, filename=op.filename)
        if op.reason is Reason.PROC_MOUNT_FAILED and err == E.EPERM:
            from ...probe.host import nested_hint
            hint += "; " + (nested_hint("proc") or "the host or an outer sandbox refuses a new procfs here")
        message = (f"{op.stage}{where}: {os.strerror(err)}{hint} "
                   f"(plan step {op.plan_index}, native op {index} {op.kind})")
        if op.reason is Reason.SETUP_FAILED:
            return SetupError(message, op.reason, stage=op.stage, op=op.plan_index, errno=err, filename=op.filename)
        # proc_mount_failed, loopback_setup_failed: the class errors.error_for gives the
        # reason (CapabilityUnavailable), with the step's details as attributes too.
        unavailable = error_for(op.reason, message, errno=err, stage=op.stage, op=op.plan_index, filename=op.filename)
        for name, value in (("stage", op.stage), ("op", op.plan_index), ("filename", op.filename)):
            setattr(unavailable, name, value)
        return unavailable
    return SetupError(f"setup failed (stage {stage}): {os.strerror(err) if err else 'no report'}",
                      Reason.SETUP_FAILED, stage="pipe", errno=err)
