"""Probing the native backend: which namespaces and mounts its executor can make
here, each tried in a throwaway child (``psb_probe``), and which pid-1 init a launch
would run. :class:`Needs` is what a launch asks of it (read from a Plan, or from a
Policy without compiling it); :func:`probe_native` is ``NativeBackend.status``.
The native backend's own probe (``pysandbox/probe`` holds the host facts both share).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..base import BackendStatus, CapabilityStatus
from .._native_lib import load_module, has_mount_setattr, init_fd
from ..monitor import lifetime, unavailable
from ..native_ops import CLONE_FLAGS, PROBE_CLONE, PROBE_IDMAP, PROBE_LOOPBACK, PROBE_PROC
from ... import plan as P
from ...errors import NativeModuleMissing, Reason
from ...fs_ops import plan_kind


@dataclass(frozen=True)
class Needs:
    """What a launch needs of the native backend beyond a user and mount namespace."""

    pid: bool = True        # a pid namespace
    proc: bool = True       # a /proc mount
    net: bool = True        # a network namespace with loopback up
    as_pid_1: bool = False  # the command is pid 1 (no init)

    @classmethod
    def of(cls, subject=None) -> "Needs":
        """From a Plan, or a Policy as it would compile (read through the one table of
        ``pysandbox/fs_ops.py``, never compiled nor imported here); None: ``Needs()``,
        which is what ``Policy.default()`` needs (tests/unit/test_fs_ops.py)."""
        if subject is None:
            return cls()
        if isinstance(subject, P.Plan):
            return cls(pid="pid" in subject.namespaces, proc=subject.first(P.MountProc) is not None,
                       net="net" in subject.namespaces, as_pid_1=subject.as_pid_1)
        return cls(pid="pid" in subject.namespaces, proc=any(plan_kind(op) is P.MountProc for op in subject.fs),
                   net=subject.network.new_namespace, as_pid_1=subject.as_pid_1)


def probe_native(subject=None) -> BackendStatus:
    """Native capabilities, one by one: user, mount, pid, net namespaces, a /proc mount
    in a new pid namespace, loopback up in a new network namespace; available when
    what ``subject`` needs works (:class:`Needs`, or a Plan or Policy read into one;
    default: ``Needs()``, ``Policy.default()``'s).

    Raises:
        Nothing: problems are reported in the returned status.
    """
    needs = subject if isinstance(subject, Needs) else Needs.of(subject)
    try:
        ffi, lib = load_module()
    except NativeModuleMissing as exc:
        return BackendStatus("native", False, Reason.NATIVE_MODULE_MISSING.value, str(exc.args[0]))
    user = CLONE_FLAGS["user"]
    checks = (
        ("user", user, PROBE_IDMAP, Reason.USER_NAMESPACE_UNAVAILABLE),
        ("mount", user | CLONE_FLAGS["mount"], PROBE_CLONE, Reason.MOUNT_NAMESPACE_UNAVAILABLE),
        ("pid", user | CLONE_FLAGS["pid"], PROBE_CLONE, Reason.PID_NAMESPACE_UNAVAILABLE),
        ("net", user | CLONE_FLAGS["net"], PROBE_CLONE, Reason.NETWORK_NAMESPACE_UNAVAILABLE),
        ("proc", user | CLONE_FLAGS["mount"] | CLONE_FLAGS["pid"], PROBE_PROC, Reason.PROC_MOUNT_FAILED),
        ("loopback", user | CLONE_FLAGS["net"], PROBE_LOOPBACK, Reason.LOOPBACK_SETUP_FAILED),
    )
    caps: dict[str, CapabilityStatus] = {}
    for name, flags, what, reason in checks:
        err = lib.psb_probe(flags, what)
        caps[name] = CapabilityStatus(name, err == 0, None if err == 0 else reason.value,
                                      "" if err == 0 else os.strerror(err))
    deny_ok = caps["net"].available and caps["loopback"].available
    deny_fail = caps["net"] if not caps["net"].available else caps["loopback"]
    network = {
        "deny": CapabilityStatus("deny", deny_ok, None if deny_ok else deny_fail.reason, deny_fail.detail
                                 if not deny_ok else ""),
        "allow": CapabilityStatus("allow", True),
        # proxy: deny's namespace; its listener is made by the same setup (LISTEN op)
        "proxy": CapabilityStatus("proxy", deny_ok, None if deny_ok else deny_fail.reason, deny_fail.detail
                                  if not deny_ok else ""),
    }
    needed = ["user", "mount"]
    if needs.pid:
        needed.append("pid")
    if needs.proc:
        needed.append("proc")
    if needs.net:
        needed += ["net", "loopback"]
    missing = [caps[n] for n in needed if not caps[n].available]
    if needs.as_pid_1 and unavailable() is not None:   # no lifetime monitor: as_pid_1 fails closed
        missing.append(CapabilityStatus("lifetime_monitor", False, Reason.LIFETIME_MONITOR_UNAVAILABLE.value,
                                        unavailable() or ""))
    exec_init = init_fd() >= 0
    # Which pid-1 init a launch of this policy runs: "exec" (the freestanding init
    # from a sealed memfd), "fork" (an undumpable copy of the caller: the memfd init
    # cannot be exec'd here, or PYSANDBOX_NATIVE_NO_EXEC_INIT=1), "none" (no pid
    # namespace, or as_pid_1: the command is pid 1 itself).
    init_needed = needs.pid and not needs.as_pid_1
    init_mode = "none" if not init_needed else ("exec" if exec_init else "fork")
    info = {"has_mount_setattr": has_mount_setattr(), "exec_init": exec_init, "init_mode": init_mode}
    if needs.as_pid_1 or unavailable() is not None:
        # as_pid_1: the command is pid 1 and may clear its own PR_SET_PDEATHSIG; the launcher's
        # lifetime monitor ends it with the launcher (backends/monitor.py), or why not (then
        # as_pid_1 launches fail closed). Another policy's pid 1 is our init: nothing to say.
        info["as_pid_1_lifetime"] = lifetime()
    if missing:
        first = missing[0]
        return BackendStatus("native", False, first.reason, f"{first.name}: {first.detail}",
                             list(caps.values()), network, info)
    return BackendStatus("native", True, None, "", list(caps.values()), network, info)
