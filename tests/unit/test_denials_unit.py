"""Denials (pysandbox/denials.py, issue 32) without a sandbox: the report-mode filter's
decisions (the classic-BPF interpreter of test_seccomp_bpf), the summary line, the
address parser, the policy switch."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from pysandbox import Policy, seccomp
from pysandbox import denial_calls as calls
from pysandbox.denials import Denial, Denials, refused_calls, summary
from pysandbox.errors import PolicyError, Reason
from tests.unit.test_seccomp_bpf import err, run

X86 = seccomp.AUDIT_ARCH_X86_64
I386 = seccomp.AUDIT_ARCH_I386
NOTIF = seccomp.RET_USER_NOTIF
ALLOW = seccomp.RET_ALLOW
NR = seccomp.NR["x86_64"]


def test_report_filter_notifies_write_intent_and_connect_and_refusals():
    plain = seccomp.default_filter("deny")
    rep = seccomp.default_filter("deny", report=True)
    # write intent: open/openat with a write flag; the same read-only open is allowed
    assert run(rep, NR["open"], X86, (0, 0o1, 0, 0, 0, 0)) == NOTIF
    assert run(rep, NR["openat"], X86, (0, 0, 0o1101, 0o644, 0, 0)) == NOTIF
    assert run(rep, NR["openat"], X86, (0, 0, 0, 0, 0, 0)) == ALLOW
    assert run(plain, NR["openat"], X86, (0, 0, 0o1101, 0o644, 0, 0)) == ALLOW   # control: no report
    for name in calls.ALWAYS_CALLS:
        assert run(rep, calls.WRITE_CALLS[name][0], X86) == NOTIF, name
    assert run(rep, calls.WRITE_CALLS["utimensat"][0], X86, (0, 0, 0, 0, 0, 0)) == ALLOW   # futimens: an fd
    assert run(rep, calls.WRITE_CALLS["utimensat"][0], X86, (0, 1 << 33, 0, 0, 0, 0)) == NOTIF   # high half
    assert run(rep, calls.CONNECT_NR, X86) == NOTIF
    assert run(seccomp.default_filter("allow", report=True), calls.CONNECT_NR, X86) == ALLOW
    # the whole-call refusals notify (the observer answers their errno); plain: errno
    for name in ("keyctl", "bpf", "io_uring_setup"):
        assert run(rep, NR[name], X86) == NOTIF and run(plain, NR[name], X86) != ALLOW, name
    assert run(rep, seccomp.NR["i386"]["keyctl"], I386) == NOTIF
    # argument refusals stay the kernel's errno: set-id mode, TIOCSTI
    assert run(rep, NR["openat"], X86, (0, 0, 0o101, 0o4755, 0, 0)) == err(errno.EPERM)
    assert run(rep, NR["ioctl"], X86, (0, seccomp.TIOCSTI, 0, 0, 0, 0)) == err(errno.EPERM)
    # anything else, and the i386 ABI's writes: allowed, not observed
    assert run(rep, NR["ioctl"], X86, (0, 0x5401, 0, 0, 0, 0)) == ALLOW
    assert run(rep, 39, X86) == ALLOW   # getpid
    assert run(rep, seccomp.NR["i386"]["open"], I386, (0, 0o1, 0, 0, 0, 0)) == ALLOW


def test_refused_calls_follow_the_policy_opt_ins():
    base = {name for (_arch, _nr), (name, _e) in refused_calls(Policy.default(network="deny")).items()}
    assert {"keyctl", "bpf", "io_uring_setup"} <= base
    opted = refused_calls(Policy.default(network="allow", allow_syscalls={"bpf"}, allow_io_uring=True))
    names = {name for name, _e in opted.values()}
    assert "bpf" not in names and "io_uring_setup" not in names and "keyctl" in names
    assert opted[(X86, NR["keyctl"])] == ("keyctl", errno.EPERM)


def test_summary_line():
    ds = Denials([Denial("write", "/etc/hosts", errno.EROFS, 5, 2), Denial("connect", "192.0.2.1:443",
                  errno.ENETUNREACH, 6), Denial("syscall", "ptrace", errno.EPERM, 7)])
    assert summary(ds) == ("pysandbox: denied: write /etc/hosts (EROFS) x2; connect 192.0.2.1:443; "
                           "syscall ptrace")
    ds.cut = 3
    assert summary(ds).endswith("; ... 3 more not listed")
    assert summary(Denials()) == ""


def test_address_parser_skips_loopback_and_unix():
    from pysandbox.denials import _address   # the parser alone
    v4 = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 9) + socket.inet_aton("192.0.2.1") + bytes(8)
    lo = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 9) + socket.inet_aton("127.0.0.5") + bytes(8)
    v6 = (struct.pack("=H", socket.AF_INET6) + struct.pack("!H", 80) + bytes(4)
          + socket.inet_pton(socket.AF_INET6, "2001:db8::1") + bytes(4))
    mapped = (struct.pack("=H", socket.AF_INET6) + struct.pack("!H", 80) + bytes(4)
              + socket.inet_pton(socket.AF_INET6, "::ffff:127.0.0.1") + bytes(4))
    assert _address(v4) == "192.0.2.1:9" and _address(v6) == "[2001:db8::1]:80"
    assert _address(lo) is None and _address(mapped) is None
    assert _address(struct.pack("=H", socket.AF_UNIX) + b"/x\0") is None and _address(b"") is None


def test_policy_switch():
    assert Policy.default().report_denials is False
    with pytest.raises(PolicyError) as exc:
        Policy.default(report_denials="yes")
    assert exc.value.reason == Reason.INVALID_VALUE


def test_kernels_before_5_5_are_refused():
    from pysandbox.denials import check_kernel
    from pysandbox.errors import CapabilityUnavailable
    for old in ("5.4.0-150-generic", "4.19.0", "garbage"):
        with pytest.raises(CapabilityUnavailable) as exc:
            check_kernel(old)
        assert exc.value.reason == Reason.SECCOMP_UNAVAILABLE
    for new in ("5.5.0", "6.18.44-fc-v1252", "5.10.0-rc1"):
        check_kernel(new)
