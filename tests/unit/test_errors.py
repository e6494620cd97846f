"""The error tree: every error has a Reason, subclasses the matching builtin, maps from one table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pysandbox import errors as E
from pysandbox.errors import Reason


def test_tree():
    assert issubclass(E.PolicyError, E.SandboxError) and issubclass(E.PolicyError, ValueError)
    assert issubclass(E.BwrapArgumentError, E.PolicyError)
    for cls in (E.BwrapNotFound, E.SetuidRejected, E.BwrapOptionUnsupported, E.BwrapProbeFailed,
                E.NativeModuleMissing):
        assert issubclass(cls, E.BackendUnavailable)
    assert issubclass(E.BackendUnavailable, E.SandboxError) and issubclass(E.BackendUnavailable, RuntimeError)
    for cls in (E.UserNamespaceUnavailable, E.NetworkNamespaceUnavailable, E.NetworkModeUnsupported):
        assert issubclass(cls, E.CapabilityUnavailable)
    assert issubclass(E.CapabilityUnavailable, OSError) and issubclass(E.SetupError, OSError)


@pytest.mark.parametrize("cls, reason", [
    (E.BwrapNotFound, Reason.BWRAP_NOT_FOUND), (E.SetuidRejected, Reason.BWRAP_SETUID_REJECTED),
    (E.BwrapOptionUnsupported, Reason.BWRAP_OPTION_UNSUPPORTED), (E.BwrapProbeFailed, Reason.BWRAP_PROBE_FAILED),
    (E.NativeModuleMissing, Reason.NATIVE_MODULE_MISSING),
    (E.UserNamespaceUnavailable, Reason.USER_NAMESPACE_UNAVAILABLE),
    (E.NetworkNamespaceUnavailable, Reason.NETWORK_NAMESPACE_UNAVAILABLE),
    (E.NetworkModeUnsupported, Reason.NETWORK_MODE_UNSUPPORTED),
    (E.PolicyError, Reason.INVALID_VALUE), (E.BwrapArgumentError, Reason.BWRAP_ARGUMENT_INVALID),
])
def test_default_reasons(cls, reason):
    exc = cls("message")
    assert exc.reason is reason
    assert str(exc).startswith(reason.value + ": ")


# What error_for builds for each code, written out here (not read from errors.py's table),
# so a code mapped to the wrong class, or a code added without a decision here, fails.
EXPECTED_CLASS = {
    "workspace_conflict": E.WorkspaceConflict,
    "workspace_changed": E.WorkspaceError,
    "workspace_unsafe_entry": E.WorkspaceError,
    "workspace_file_too_large": E.WorkspaceError,
    "workspace_layer_invalid": E.WorkspaceError,
    "user_namespace_unavailable": E.UserNamespaceUnavailable,
    "mount_namespace_unavailable": E.CapabilityUnavailable,
    "pid_namespace_unavailable": E.CapabilityUnavailable,
    "network_namespace_unavailable": E.NetworkNamespaceUnavailable,
    "loopback_setup_failed": E.CapabilityUnavailable,
    "proc_mount_failed": E.CapabilityUnavailable,
    "seccomp_unavailable": E.CapabilityUnavailable,
    "lifetime_monitor_unavailable": E.CapabilityUnavailable,
    "native_module_missing": E.NativeModuleMissing,
    "bwrap_not_found": E.BwrapNotFound,
    "bwrap_setuid_rejected": E.SetuidRejected,
    "bwrap_probe_failed": E.BwrapProbeFailed,
    "bwrap_option_unsupported": E.BwrapOptionUnsupported,
    "bwrap_in_writable_path": E.BackendUnavailable,
    "network_mode_unsupported": E.NetworkModeUnsupported,
    "bwrap_init_unavailable": E.BackendUnavailable,
    "terminal_unavailable": E.SetupError,   # PolicyError when the policy has no minimal /dev
    "setup_failed": E.SetupError,
    "parent_died": E.SetupError,
    "symlink_in_path": E.SetupError,
    "bind_source_changed": E.SetupError,
    "invalid_path": E.SetupError,
    "workdir_too_broad": E.SetupError,
    "writable_path_too_broad": E.SetupError,
    "bind_source_missing": E.SetupError,
    "mount_point_missing": E.SetupError,
    "invalid_mode": E.SetupError,
    "invalid_size": E.SetupError,
    "invalid_value": E.SetupError,
    "conflicting_options": E.SetupError,
    "bwrap_argument_invalid": E.SetupError,
    "session_unavailable": E.SessionError,
    "session_closed": E.SessionError,
    "session_lost": E.SessionError,
    "allow_list_widened": E.PolicyError,
    "cgroup_unavailable": E.LimitUnavailable,
    "controller_not_delegated": E.LimitUnavailable,
}


def _documented_codes() -> set[str]:
    """The codes of README.md's "Reason codes" table (first column)."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("## Reason codes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {code for row in rows for code in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_every_reason_builds_a_sandbox_error_with_that_reason():
    documented = _documented_codes()
    assert len(documented) >= 25, documented
    assert {r.value for r in Reason} == documented == set(EXPECTED_CLASS)
    for code, cls in EXPECTED_CLASS.items():
        reason = Reason(code)
        exc = E.error_for(reason, "why", errno=1)
        assert isinstance(exc, E.SandboxError)
        assert type(exc) is cls, (code, type(exc))
        assert exc.reason is reason
        assert str(reason) == reason.value == code


def test_error_for_picks_the_class():
    assert type(E.error_for(Reason.NETWORK_NAMESPACE_UNAVAILABLE, "x")) is E.NetworkNamespaceUnavailable
    assert type(E.error_for(Reason.BWRAP_SETUID_REJECTED, "x")) is E.SetuidRejected
    assert isinstance(E.error_for(Reason.LOOPBACK_SETUP_FAILED, "x"), E.CapabilityUnavailable)
    assert isinstance(E.error_for(Reason.PROC_MOUNT_FAILED, "x"), E.CapabilityUnavailable)
    assert isinstance(E.error_for(Reason.BWRAP_IN_WRITABLE_PATH, "x"), E.BackendUnavailable)
    setup = E.error_for(Reason.SETUP_FAILED, "mount failed", stage="bind", op=3, errno=13, filename="/x")
    assert isinstance(setup, E.SetupError)
    assert (setup.stage, setup.op, setup.errno, setup.filename) == ("bind", 3, 13, "/x")


def test_reason_codes_are_unique_snake_case():
    values = [r.value for r in Reason]
    assert len(values) == len(set(values))
    assert all(v == v.lower() and " " not in v and v.replace("_", "").isalnum() for v in values)


def test_design_reason_codes_exist():
    for code in ("user_namespace_unavailable", "mount_namespace_unavailable", "pid_namespace_unavailable",
                 "network_namespace_unavailable", "loopback_setup_failed", "proc_mount_failed",
                 "native_module_missing", "bwrap_not_found", "bwrap_setuid_rejected", "bwrap_probe_failed",
                 "bwrap_option_unsupported", "network_mode_unsupported", "setup_failed"):
        assert Reason(code).value == code
