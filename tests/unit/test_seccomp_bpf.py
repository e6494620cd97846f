"""The built-in seccomp programs run in a small classic-BPF interpreter, against every
(ABI, system call, argument) case that matters: what the kernel would answer is
checked instruction by instruction, without loading anything (the real-kernel runs are
tests/security/test_seccomp_filters.py)."""

from __future__ import annotations

import errno
import struct

import pytest

from pysandbox import bpf
from pysandbox import seccomp as S

X86_64, I386 = S.AUDIT_ARCH_X86_64, S.AUDIT_ARCH_I386
AARCH64 = 0xC00000B7
ALLOW = S.RET_ALLOW
KILL = S.RET_KILL_PROCESS


def run(program: bytes, nr: int, arch: int, args=(0, 0, 0, 0, 0, 0)) -> int:
    """Classic BPF as the kernel's seccomp runs it (only the opcodes the builder emits)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = S.disassemble(program)
    pc, acc = 0, 0
    for _ in range(len(insns) + 1):
        code, jt, jf, k = insns[pc]
        if code == S.BPF_LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == S.BPF_JEQ_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == S.BPF_JGE_K:
            pc += 1 + (jt if acc >= k else jf)
        elif code == S.BPF_JSET_K:
            pc += 1 + (jt if acc & k else jf)
        elif code == S.BPF_JA:
            pc += 1 + k
        elif code == S.BPF_RET_K:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
    raise AssertionError("program did not return")


def err(e: int) -> int:
    return S.RET_ERRNO | e


def most_restrictive(results) -> int:
    """seccomp_run_filters: the lowest action (signed) wins; ties keep the newest."""
    def action(r):
        v = r & 0xFFFF0000
        return v - 2**32 if v & 0x80000000 else v
    best = ALLOW
    for r in reversed(results):       # newest first
        if action(r) < action(best):
            best = r
    return best


NR64, NR32 = S.NR["x86_64"], S.NR["i386"]
HIGH = 1 << 32


@pytest.mark.parametrize("mode", ["deny", "allow", "proxy"])
@pytest.mark.parametrize("uring", [False, True])
def test_default_filter_decisions(mode, uring):
    prog = S.default_filter(mode, uring)
    isolated = mode != "allow"
    for abi, arch, nr in (("x86_64", X86_64, NR64), ("i386", I386, NR32)):
        # terminal injection, low 32 bits only
        for req in S.DENIED_IOCTLS:
            assert run(prog, nr["ioctl"], arch, (0, req)) == err(errno.EPERM), abi
            assert run(prog, nr["ioctl"], arch, (0, req | HIGH)) == err(errno.EPERM), abi
        assert run(prog, nr["ioctl"], arch, (0, 0x5413)) == ALLOW     # TIOCGWINSZ
        # keyrings, always
        for call in S.KEYRING_CALLS:
            assert run(prog, nr[call], arch) == err(errno.EPERM), (abi, call)
        # io_uring, unless allowed
        for call in S.IO_URING_CALLS:
            assert run(prog, nr[call], arch) == (ALLOW if uring else err(errno.ENOSYS)), (abi, call)
        # socket families no network namespace confines: deny and proxy only
        for call in ("socket", "socketpair"):
            for family in S.GLOBAL_FAMILIES:
                want = err(errno.EAFNOSUPPORT) if isolated else ALLOW
                assert run(prog, nr[call], arch, (family, 1, 0)) == want, (abi, call, family)
                assert run(prog, nr[call], arch, (family | HIGH, 1, 0)) == want, (abi, call, family)
            for family in (1, 2, 10, 16, 17, 29, 30, 38, 44):   # unix inet inet6 netlink packet can tipc alg xdp
                assert run(prog, nr[call], arch, (family, 1, 0)) == ALLOW, (abi, call, family)
        # everything else passes
        for other in (0, 1, 39, 57, 59, 231, 435):
            if other not in nr.values():
                assert run(prog, other, arch) == ALLOW, (abi, other)
    # i386 socketcall: the family is in memory, so SYS_SOCKET/SYS_SOCKETPAIR are refused whole
    for call, want in ((S.SYS_SOCKET, err(errno.EPERM)), (S.SYS_SOCKETPAIR, err(errno.EPERM)), (3, ALLOW)):
        assert run(prog, NR32["socketcall"], I386, (call, 0)) == (want if isolated else ALLOW)
    # x86_64 socketcall does not exist; 102 is getuid there
    assert run(prog, 102, X86_64) == ALLOW
    # x32 refused, other architectures killed
    assert run(prog, S.X32_SYSCALL_BIT | 39, X86_64) == err(errno.ENOSYS)
    assert run(prog, S.X32_SYSCALL_BIT | NR64["keyctl"], X86_64) == err(errno.ENOSYS)
    assert run(prog, 0, AARCH64) == KILL


@pytest.mark.parametrize("allowed", [(), ("bpf",), ("perf_event_open", "userfaultfd"), S.OPT_IN_CALLS])
def test_opt_in_calls_refused_with_eperm_unless_allowed(allowed):
    for mode in ("deny", "allow"):
        prog = S.default_filter(mode, allow_syscalls=allowed)
        for abi, arch, nr in (("x86_64", X86_64, NR64), ("i386", I386, NR32)):
            for call in S.OPT_IN_CALLS:
                want = ALLOW if call in allowed else err(errno.EPERM)
                assert run(prog, nr[call], arch, (1, 0, 0)) == want, (mode, abi, call)
            # /dev/userfaultfd's ioctl(USERFAULTFD_IOC_NEW) follows userfaultfd (low 32 bits)
            want = ALLOW if "userfaultfd" in allowed else err(errno.EPERM)
            for req in (S.USERFAULTFD_IOC_NEW, S.USERFAULTFD_IOC_NEW | HIGH):
                assert run(prog, nr["ioctl"], arch, (3, req, 0)) == want, (mode, abi, hex(req))
            assert run(prog, nr["ioctl"], arch, (3, 0xC018AA3F, 0)) == ALLOW   # UFFDIO_API, on a uffd
            # the other refusals stay, whatever is allowed
            assert run(prog, nr["keyctl"], arch) == err(errno.EPERM)
            assert run(prog, nr["io_uring_setup"], arch) == err(errno.ENOSYS)
        # through x32 every call is refused (ENOSYS), allowed or not
        for call in S.OPT_IN_CALLS:
            assert run(prog, S.X32_SYSCALL_BIT | NR64[call], X86_64) == err(errno.ENOSYS)
    # each ABI has its own numbers: x86_64's 298, 321, 323 are i386 fchownat, signalfd, eventfd
    for call in S.OPT_IN_CALLS:
        assert run(S.default_filter(), NR64[call], I386) == ALLOW, call


@pytest.mark.parametrize("bad", ["bpf", ["ptrace"], ["io_uring_setup"], [None], 5])
def test_only_the_opt_in_calls_can_be_allowed(bad):
    with pytest.raises(S.PolicyError) as info:
        S.default_filter(allow_syscalls=bad)
    assert info.value.reason == S.Reason.INVALID_VALUE and info.value.field == "allow_syscalls"


def test_strict_unix_with_the_default_filter_most_restrictive_wins():
    progs = S.builtin_filters(strict_unix=True, network="allow")
    assert len(progs) == 2
    results = lambda nr, arch, args=(): most_restrictive([run(p, nr, arch, args) for p in progs])  # noqa: E731
    assert results(NR64["socket"], X86_64, (S.AF_UNIX, 1, 0)) == err(errno.EPERM)
    assert results(NR64["socket"], X86_64, (2, 1, 0)) == ALLOW
    assert results(NR64["keyctl"], X86_64) == err(errno.EPERM)
    assert results(NR64["io_uring_setup"], X86_64) == err(errno.ENOSYS)
    # deny mode: the default filter refuses vsock, strict-unix does not care
    deny = S.builtin_filters(strict_unix=True, network="deny")
    assert most_restrictive([run(p, NR64["socket"], X86_64, (S.AF_VSOCK, 1, 0)) for p in deny]) == \
        err(errno.EAFNOSUPPORT)
    # a caller's ALLOW-everything program loaded first changes nothing
    caller = bpf.insn(S.BPF_RET_K, 0, 0, ALLOW)
    assert most_restrictive([run(p, NR64["keyctl"], X86_64) for p in (caller, *deny)]) == err(errno.EPERM)
    # a caller's program that kills wins over our errno (the lower action)
    killer = bpf.insn(S.BPF_RET_K, 0, 0, KILL)
    assert most_restrictive([run(p, NR64["keyctl"], X86_64) for p in (killer, *deny)]) == KILL


def test_ja_is_forward_only_and_validated():
    prog = S.Program().ja("end").ret(KILL).label("end").ret(ALLOW).assemble()
    assert run(prog, 0, X86_64) == ALLOW
    with pytest.raises(ValueError):
        S.Program().label("top").ret(ALLOW).ja("top").assemble()


def test_unknown_network_mode_is_refused():
    with pytest.raises(S.PolicyError):
        S.default_filter("sideways")


@pytest.mark.parametrize("mode", ["deny", "allow"])
def test_setid_modes_refused_every_way(mode):
    prog = S.default_filter(mode)
    eperm = err(errno.EPERM)
    for abi, arch, nr in (("x86_64", X86_64, NR64), ("i386", I386, NR32)):
        for bits in (0o4755, 0o2755, 0o6000, 0o4000 | HIGH):
            for call in ("chmod", "fchmod", "creat", "mknod"):
                assert run(prog, nr[call], arch, (3, bits)) == eperm, (abi, call, oct(bits))
            for call in ("fchmodat", "fchmodat2", "mknodat"):
                assert run(prog, nr[call], arch, (3, 0, bits)) == eperm, (abi, call, oct(bits))
            for flags in (S.O_CREAT, S.O_TMPFILE_BIT | 0o200000, S.O_CREAT | 0o1):
                assert run(prog, nr["open"], arch, (0, flags, bits)) == eperm, (abi, oct(flags))
                assert run(prog, nr["openat"], arch, (3, 0, flags, bits)) == eperm, (abi, oct(flags))
        # controls: the same calls without the bits, and open's mode without O_CREAT/O_TMPFILE
        for call in ("chmod", "fchmod", "creat", "mknod"):
            assert run(prog, nr[call], arch, (3, 0o1777)) == ALLOW, (abi, call)
        for call in ("fchmodat", "fchmodat2", "mknodat"):
            assert run(prog, nr[call], arch, (3, 0, 0o1777)) == ALLOW, (abi, call)
        assert run(prog, nr["open"], arch, (0, S.O_CREAT, 0o777)) == ALLOW
        assert run(prog, nr["open"], arch, (0, 0o2, 0o4755)) == ALLOW   # no O_CREAT: the mode is unused
        assert run(prog, nr["openat"], arch, (3, 0, 0o2, 0o4755)) == ALLOW
        # openat2 keeps its mode in memory: refused whole, as a kernel without it would
        assert run(prog, nr["openat2"], arch) == err(errno.ENOSYS)
