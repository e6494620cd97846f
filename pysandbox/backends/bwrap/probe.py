"""bwrap's probes: does a plan, or each capability, work through the located bwrap here.

- :func:`probe_plan`: the plan's own options checked against ``bwrap --help``, then
  ``bwrap ARGS -- true`` run once without and once with ``--unshare-net``
  (:func:`probe_once`); a failure raises the typed error for its reason;
- :func:`capabilities`: user, mount, pid, proc and net namespaces and loopback, each
  tried by a minimal bwrap line;
- :func:`probe_failed` (bwrap's error line from a probe's stderr, if the setup failed)
  and :func:`classify` (that line mapped to a reason code).

Locating bwrap, its setuid check and ``--help`` parsing are in ``pysandbox.probe``;
the caching per plan and per policy is the backend's (this package's ``__init__``).
"""

from __future__ import annotations

import os

from ..base import CapabilityStatus
from .bwrap_render import DataFds, caller_fds, check_expressible, flatten, nul_joined, options_used, render
from ...errors import BwrapOptionUnsupported, Reason, error_for
from ...execpath import DEFAULT_PATH
from ...probe import BwrapInfo, ProbeResult, run_probe
from ...probe.host import nested_hint

PROBE_PATH = DEFAULT_PATH   # a probe runs with execvp's default PATH, nothing of the caller's

_USERNS_MARKERS = ("no permissions to creating new namespace", "setting up uid map", "setting up gid map",
                   "uid_map", "gid_map", "user namespace", "creating new namespace failed",
                   "max_user_namespaces")


def classify(message: str, *, network_part: bool) -> Reason:
    """Map a bwrap error message from a probe to a reason code.

    ``network_part``: the probe differed from a successful one only by ``--unshare-net``,
    so a failure there is the network namespace's (or loopback's) fault.
    """
    m = message.lower()
    if "unknown option" in m or "unrecognized option" in m:
        return Reason.BWRAP_OPTION_UNSUPPORTED
    if "loopback" in m or "rtm_newaddr" in m or "rtm_newlink" in m:
        return Reason.LOOPBACK_SETUP_FAILED
    if network_part:
        return Reason.NETWORK_NAMESPACE_UNAVAILABLE
    if any(marker in m for marker in _USERNS_MARKERS):
        return Reason.USER_NAMESPACE_UNAVAILABLE
    if "can't find source path" in m:
        return Reason.BIND_SOURCE_MISSING
    if "can't mount proc" in m or "mount proc" in m:
        return Reason.PROC_MOUNT_FAILED
    if "make / slave" in m or "mount namespace" in m:
        return Reason.MOUNT_NAMESPACE_UNAVAILABLE
    return Reason.BWRAP_PROBE_FAILED


def probe_failed(result: ProbeResult) -> str | None:
    """bwrap's error line if the probe's setup failed, else None (the command ran, or
    exec failed after a complete setup: ``bwrap: execvp ...``)."""
    errors = [ln.strip() for ln in result.stderr.splitlines() if ln.strip().startswith("bwrap:")]
    if errors and not errors[-1].startswith("bwrap: execvp"):
        return errors[-1]
    if result.returncode < 0:
        return result.message or f"bwrap killed by signal {-result.returncode}"
    return None


def probe_plan(info: BwrapInfo, plan) -> None:
    """Raise the typed error if ``plan`` cannot run through the bwrap ``info`` here.

    Raises:
        BwrapOptionUnsupported, PolicyError: :func:`check_expressible`, or an option
            the plan needs is missing from this bwrap.
        SandboxError subclasses: the probe's setup failed (:func:`classify`).
    """
    check_expressible(plan, info)
    used = options_used(render(plan, lambda data: 0, probe=True)) | {"--args", "--info-fd"}
    missing = sorted(used - info.options)
    if missing:
        raise BwrapOptionUnsupported(
            f"{info.path} (bwrap {info.version or 'unknown version'}) lacks {', '.join(missing)}",
            Reason.BWRAP_OPTION_UNSUPPORTED)
    parts = [False, True] if "net" in plan.namespaces else [False]
    for network_part in parts:
        message = probe_once(info, plan, network=network_part)
        if message is not None:
            reason = classify(message, network_part=network_part)
            what = "with --unshare-net" if network_part else "for the filesystem and namespaces"
            kind = {Reason.USER_NAMESPACE_UNAVAILABLE: "userns", Reason.PROC_MOUNT_FAILED: "proc"}.get(reason)
            if kind == "userns" and "uid map" in message.lower():
                kind = "userns-map"   # made, not mappable: bwrap's "setting up uid map" failed
            hint = nested_hint(kind) if kind else None
            raise error_for(reason, f"bwrap probe {what} failed: {message}" + (f"; {hint}" if hint else ""))


def probe_once(info: BwrapInfo, plan, *, network: bool) -> str | None:
    """bwrap's error line if ``bwrap ARGS -- true`` with the plan's arguments (with
    ``--unshare-net`` only if ``network``) fails its setup, else None."""
    data = DataFds()
    try:
        options = render(plan, data, network=network, probe=True)
        args_fd = data(nul_joined(flatten(options)))
        passed = set(data.fds) | {fd for fd in caller_fds(plan) if _is_open(fd)}
        result = run_probe([info.path, "--args", str(args_fd), "--", "true"],
                           pass_fds=sorted(passed), env={"PATH": PROBE_PATH})
    except OSError as exc:
        return f"cannot run {info.path}: {exc}"
    finally:
        data.close()
    return probe_failed(result)


def capabilities(info: BwrapInfo) -> list[CapabilityStatus]:
    """Per capability (user, mount, pid, proc, net, loopback): whether the bwrap ``info``
    can set it up here, each tried by ``bwrap BASE... -- true``."""
    base = ["--unshare-user", "--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/", "/"]
    trials = {
        "user": (base, False),
        "mount": (base + ["--tmpfs", "/tmp"], False),
        "pid": (base + ["--unshare-pid"], False),
        "proc": (base + ["--unshare-pid", "--proc", "/proc"], False),
        "net": (base + ["--unshare-net"], True),
    }
    caps = []
    for name, (args, network_part) in trials.items():
        try:
            result = run_probe([info.path, *args, "--", "true"], env={"PATH": PROBE_PATH})
            message = probe_failed(result)
        except OSError as exc:
            message = f"cannot run {info.path}: {exc}"
        if message is None:
            caps.append(CapabilityStatus(name, True))
            if name == "net":
                caps.append(CapabilityStatus("loopback", True))
            continue
        reason = classify(message, network_part=network_part)
        if name == "proc" and reason == Reason.BWRAP_PROBE_FAILED:
            reason = Reason.PROC_MOUNT_FAILED
        if name == "pid" and reason in (Reason.BWRAP_PROBE_FAILED, Reason.USER_NAMESPACE_UNAVAILABLE) \
                and caps and caps[0].available:
            reason = Reason.PID_NAMESPACE_UNAVAILABLE
        if name == "net":
            if reason == Reason.LOOPBACK_SETUP_FAILED:
                caps.append(CapabilityStatus("net", True))
                caps.append(CapabilityStatus("loopback", False, reason.value, message))
            else:
                caps.append(CapabilityStatus("net", False, reason.value, message))
                caps.append(CapabilityStatus("loopback", False, reason.value,
                                             "no network namespace to set up loopback in"))
            continue
        caps.append(CapabilityStatus(name, False, reason.value, message))
    return caps


def _is_open(fd: int) -> bool:
    """Whether ``fd`` is an open descriptor here (a probe passes only those)."""
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
