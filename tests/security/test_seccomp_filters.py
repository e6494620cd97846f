"""The built-in seccomp programs on the real kernel, outside any sandbox.

Each probe runs in a forked child twice: without the filter (the control: the
attack works on this host) and with it (refused with the filter's errno).
"""

from __future__ import annotations

import errno
import struct

import pytest

import pysandbox
from pysandbox import bpf, plan, seccomp
from tests.security import bpf_harness as h
from tests.support import need, not_applicable


def _require_tiocsti_control(via):
    err, got = h.in_child([], h.sti_probe(via))
    if (err, got) != (0, b"Z"):
        need("tiocsti", f"TIOCSTI via {via} does not work on this host even unfiltered "
                        f"(errno {err}; dev.tty.legacy_tiocsti=0?)")


@pytest.mark.parametrize("via", ["libc", "high_bits"])
def test_tiocsti_refused_x86_64(via):
    _require_tiocsti_control(via)
    assert h.in_child([seccomp.default_filter()], h.sti_probe(via)) == (errno.EPERM, b"")


def test_tiocsti_refused_through_int80():
    if h.in_child([], h.int80_getpid) <= 0:
        not_applicable("the kernel has no i386 entry (IA32 emulation off): int 0x80 cannot bypass")
    _require_tiocsti_control("int80")
    assert h.in_child([seccomp.default_filter()], h.sti_probe("int80")) == (errno.EPERM, b"")


def _tioclinux_probe(high_bits):
    def probe():
        import ctypes
        import os
        master, slave = os.openpty()
        arg = ctypes.c_char(b"\x06")
        req = seccomp.TIOCLINUX | ((1 << 32) if high_bits else 0)
        ctypes.set_errno(0)
        ret = h.libc.syscall(ctypes.c_long(16), ctypes.c_long(slave), ctypes.c_ulong(req), ctypes.byref(arg))
        return 0 if ret >= 0 else ctypes.get_errno()
    return probe


@pytest.mark.parametrize("high_bits", [False, True])
def test_tioclinux_refused(high_bits):
    # A pty is not a VT: unfiltered, the kernel answers ENOTTY (the request reached it).
    assert h.in_child([], _tioclinux_probe(high_bits)) == errno.ENOTTY
    assert h.in_child([seccomp.default_filter()], _tioclinux_probe(high_bits)) == errno.EPERM


def _other_ioctls():
    import fcntl
    import os
    import termios
    master, slave = os.openpty()
    size = fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8)
    os.write(master, b"abc")
    pending = struct.unpack("i", fcntl.ioctl(slave, termios.FIONREAD, b"\0" * 4))[0]
    return len(size), os.getpid() > 0, pending >= 0


def test_other_ioctls_and_syscalls_pass():
    assert h.in_child([seccomp.default_filter(), seccomp.strict_unix_filter()], _other_ioctls) == (8, True, True)


def test_x32_abi_refused():
    if h.in_child([], h.x32_getpid) < 0:
        not_applicable("the kernel has no x32 ABI (CONFIG_X86_X32_ABI off): nothing to bypass with")
    assert h.in_child([seccomp.default_filter()], h.x32_getpid) == -errno.ENOSYS
    assert h.in_child([seccomp.strict_unix_filter()], h.x32_getpid) == -errno.ENOSYS


def test_strict_unix_refuses_af_unix_keeps_socketpair():
    assert h.in_child([], h.unix_socket_probe) == {"socket_unix": 0, "socketpair": b"x", "socket_inet": 0}
    assert h.in_child([seccomp.strict_unix_filter()], h.unix_socket_probe) == {
        "socket_unix": errno.EPERM, "socketpair": b"x", "socket_inet": 0}


def _int80_socket_probe():
    """socket(AF_UNIX) and socketcall(SYS_SOCKET) through int 0x80; errnos."""
    import ctypes
    code = bytes([0x53, 0x89, 0xF8, 0x89, 0xF3, 0x87, 0xCA, 0xCD, 0x80, 0x5B, 0xC3])
    # push rbx; mov eax,edi; mov ebx,esi; xchg edx,ecx; int 0x80; pop rbx; ret
    page = h._low_mapping()
    ctypes.memmove(page, code, len(code))
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint)(page)
    args = (ctypes.c_uint * 3)(1, 1, 0)        # AF_UNIX, SOCK_STREAM, 0
    ctypes.memmove(page + 2048, args, 12)
    direct = fn(359, 1, 1, 0)                  # socket(AF_UNIX, SOCK_STREAM, 0): ebx, ecx, edx
    via_socketcall = fn(102, 1, page + 2048, 0)   # socketcall(SYS_SOCKET, args)
    return [0 if r >= 0 else -r for r in (direct, via_socketcall)]


def test_strict_unix_refuses_int80_socket_and_socketcall():
    if h.in_child([], h.int80_getpid) <= 0:
        not_applicable("the kernel has no i386 entry (IA32 emulation off)")
    assert h.in_child([], _int80_socket_probe) == [0, 0]
    assert h.in_child([seccomp.strict_unix_filter()], _int80_socket_probe) == [errno.EPERM, errno.EPERM]


def test_other_architecture_is_refused_by_the_builder():
    with pytest.raises(pysandbox.CapabilityUnavailable) as info:
        seccomp.default_filter(machine="aarch64")
    assert info.value.reason == pysandbox.Reason.SECCOMP_UNAVAILABLE


def test_programs_start_with_the_arch_check_and_kill_unknown_arches():
    for prog in (seccomp.default_filter(), seccomp.default_filter("allow", True), seccomp.strict_unix_filter()):
        insns = seccomp.disassemble(prog)
        assert insns[0] == (seccomp.BPF_LD_W_ABS, 0, 0, seccomp.OFF_ARCH)
        assert insns[3] == (seccomp.BPF_RET_K, 0, 0, seccomp.RET_KILL_PROCESS)
        # the ioctl request / socket domain / open flags / mode: one 32-bit word at the low half
        loads = {k for code, _, _, k in insns if code == seccomp.BPF_LD_W_ABS}
        assert loads <= {seccomp.OFF_ARCH, seccomp.OFF_NR} | {seccomp.off_arg_low(i) for i in range(4)}


@pytest.mark.parametrize("bad", [b"", b"\x06\x00\x00\x00\x00\x00\xff\x7f\x00",
                                 bpf.insn(seccomp.BPF_JEQ_K, 5, 0, 1) + bpf.insn(seccomp.BPF_RET_K, 0, 0, 0),
                                 bpf.insn(seccomp.BPF_LD_W_ABS, 0, 0, 0)])
def test_validate_rejects_malformed(bad):
    with pytest.raises(pysandbox.PolicyError) as info:
        seccomp.validate(bad)
    assert info.value.reason == pysandbox.Reason.INVALID_VALUE


def _ops(policy):
    return [op.program for op in plan.compile(policy).ops if isinstance(op, plan.Seccomp)]


def test_plan_always_carries_the_default_filter_and_strict_only_when_asked():
    caller = bpf.insn(seccomp.BPF_RET_K, 0, 0, seccomp.RET_ALLOW)
    shared = pysandbox.Policy.default(new_session=False, network="allow")
    assert _ops(shared) == [seccomp.default_filter("allow")]
    strict = pysandbox.Policy.default(strict_unix=True, seccomp=(caller,))
    assert _ops(strict) == [caller, seccomp.default_filter("deny"), seccomp.strict_unix_filter()]
    # the network mode and the io_uring switch reach the default filter
    uring = pysandbox.Policy.default(network="allow", allow_io_uring=True)
    assert _ops(uring) == [seccomp.default_filter("allow", allow_io_uring=True)]
    assert len({seccomp.default_filter(m, u) for m in ("deny", "allow") for u in (False, True)}) == 4
    # the filters come after no_new_privs
    ops = plan.compile(strict).ops
    nnp = next(i for i, op in enumerate(ops) if isinstance(op, plan.NoNewPrivs))
    assert all(i > nnp for i, op in enumerate(ops) if isinstance(op, plan.Seccomp))


# ---------------------------------------------------------------- keyring, io_uring, families

def test_keyring_calls_refused():
    control = h.in_child([], h.keyring_probe)
    assert control["session_id"] > 0 and control["add_key"] == 0 and control["read_session"] == 0
    assert control["request_key"] == -errno.ENOKEY
    for mode in ("deny", "allow"):
        assert h.in_child([seccomp.default_filter(mode)], h.keyring_probe) == {
            "session_id": -errno.EPERM, "add_key": -errno.EPERM, "request_key": -errno.EPERM,
            "read_session": -errno.EPERM}


def _require_io_uring():
    got = h.in_child([], h.io_uring_probe)
    if got["setup"] != 0:
        not_applicable(f"io_uring_setup fails on this host even unfiltered (errno {-got['setup']}; "
                       "kernel.io_uring_disabled?): nothing to refuse")
    return got


def test_io_uring_refused_with_enosys_unless_allowed():
    control = _require_io_uring()
    assert -errno.ENOSYS not in control.values()
    assert h.in_child([seccomp.default_filter()], h.io_uring_probe) == dict.fromkeys(control, -errno.ENOSYS)
    assert h.in_child([seccomp.default_filter("allow", allow_io_uring=True)], h.io_uring_probe) == control


def _require_vsock(control):
    if control["vsock"] != 0:
        not_applicable(f"socket(AF_VSOCK) fails on this host even unfiltered (errno {control['vsock']}): "
                       "no vsock transport to refuse")


def test_global_socket_families_refused_in_deny_mode_only():
    control = h.in_child([], h.family_probe)
    _require_vsock(control)
    assert control["socketpair_vsock"] == errno.EOPNOTSUPP    # the call reached the vsock family
    refused = {"vsock", "qipcrtr", "bluetooth", "nfc", "caif", "ieee802154", "socketpair_vsock"}
    for mode in ("deny", "proxy"):
        got = h.in_child([seccomp.default_filter(mode)], h.family_probe)
        assert got == {k: (errno.EAFNOSUPPORT if k in refused else v) for k, v in control.items()}, mode
    assert h.in_child([seccomp.default_filter("allow")], h.family_probe) == control


def test_int80_keyring_io_uring_and_families_refused():
    if h.in_child([], h.int80_getpid) <= 0:
        not_applicable("the kernel has no i386 entry (IA32 emulation off)")
    control = h.in_child([], h.int80_surface_probe)
    assert control["keyctl"] == 0 and control["socket_vsock"] == 0 and control["socketcall_socket"] == 0
    assert control["io_uring_enter"] != errno.ENOSYS
    assert h.in_child([seccomp.default_filter()], h.int80_surface_probe) == {
        "keyctl": errno.EPERM, "io_uring_enter": errno.ENOSYS, "socket_vsock": errno.EAFNOSUPPORT,
        "socketcall_socket": errno.EPERM, "socketcall_socketpair": errno.EPERM}
    # network allow with io_uring allowed: only the keyring stays refused
    assert h.in_child([seccomp.default_filter("allow", True)], h.int80_surface_probe) == {
        **control, "keyctl": errno.EPERM}


# ---------------------------------------------------------------- perf_event_open, bpf, userfaultfd

def _require_opt_in_control(probe, refused):
    """The probe unfiltered: every call reaches the kernel (an answer that is not the
    filter's); userfaultfd only where the host lets this caller make one."""
    control = h.in_child([], probe)
    assert refused not in (control["perf_event_open"], control["bpf"]), control
    if control["userfaultfd"] != 0:
        not_applicable(f"userfaultfd(UFFD_USER_MODE_ONLY) fails on this host even unfiltered ({control}): "
                       "vm.unprivileged_userfaultfd or the kernel refuses it")
    return control


def test_perf_bpf_userfaultfd_refused_with_eperm_unless_allowed():
    control = _require_opt_in_control(h.opt_in_probe, -errno.EPERM)
    assert control["perf_event_open"] == control["bpf"] == -errno.E2BIG    # the kernel's own answer
    for mode in ("deny", "allow", "proxy"):
        assert h.in_child([seccomp.default_filter(mode)], h.opt_in_probe) == dict.fromkeys(control, -errno.EPERM)
    # each opt-in lets exactly its call through
    for name in seccomp.OPT_IN_CALLS:
        got = h.in_child([seccomp.default_filter(allow_syscalls={name})], h.opt_in_probe)
        assert got == {k: (v if k == name else -errno.EPERM) for k, v in control.items()}, name
    assert h.in_child([seccomp.default_filter(allow_syscalls=seccomp.OPT_IN_CALLS)], h.opt_in_probe) == control


def test_int80_perf_bpf_userfaultfd_refused_unless_allowed():
    if h.in_child([], h.int80_getpid) <= 0:
        not_applicable("the kernel has no i386 entry (IA32 emulation off)")
    control = _require_opt_in_control(h.int80_opt_in_probe, errno.EPERM)
    assert h.in_child([seccomp.default_filter()], h.int80_opt_in_probe) == dict.fromkeys(control, errno.EPERM)
    assert h.in_child([seccomp.default_filter(allow_syscalls={"bpf"})], h.int80_opt_in_probe) == {
        **dict.fromkeys(control, errno.EPERM), "bpf": control["bpf"]}
    assert h.in_child([seccomp.default_filter(allow_syscalls=seccomp.OPT_IN_CALLS)], h.int80_opt_in_probe) == control


def test_plan_carries_the_opt_ins_to_the_default_filter():
    policy = pysandbox.Policy.default(allow_syscalls=("userfaultfd", "bpf"))
    assert policy.allow_syscalls == frozenset({"userfaultfd", "bpf"})
    assert _ops(policy) == [seccomp.default_filter("deny", allow_syscalls={"bpf", "userfaultfd"})]
    assert _ops(pysandbox.Policy.default()) == [seccomp.default_filter("deny")]
    assert seccomp.default_filter(allow_syscalls={"bpf"}) != seccomp.default_filter()
