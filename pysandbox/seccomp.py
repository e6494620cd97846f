"""pysandbox's built-in seccomp filters, assembled with the classic-BPF builder of
:mod:`pysandbox.bpf` (which says why a builder and not libseccomp).

The filters, applied after ``PR_SET_NO_NEW_PRIVS``, evaluated by the kernel on
every system call of the command and of all its descendants:

``default_filter()`` (always loaded; one program, so the filter count stays one)
    - Terminal injection: ``ioctl(fd, TIOCSTI, ...)`` and ``ioctl(fd, TIOCLINUX, ...)``
      fail with EPERM. The kernel's ioctl request is an ``unsigned int``: only the low
      32 bits of the argument are compared, so setting high bits cannot slip past
      (CVE-2019-10063, flatpak).
    - Keyrings: ``keyctl``, ``add_key`` and ``request_key`` fail with EPERM (Docker's
      default profile does the same). The session keyring is inherited across
      ``clone``/``execve`` and no namespace separates it: without this the command
      could read, search, link, add and clear the caller's keys. Refusing the calls
      (rather than joining a fresh session keyring) works identically on both
      backends, because both load these programs.
    - io_uring (unless ``Policy(allow_io_uring=True)``): ``io_uring_setup``,
      ``io_uring_enter`` and ``io_uring_register`` fail with ENOSYS. io_uring runs
      socket(2)/connect(2) (``IORING_OP_SOCKET``, ``IORING_OP_CONNECT``) without a
      system call seccomp can see, so it would bypass every socket filter below and
      strict_unix; it is also a large kernel surface. ENOSYS rather than Docker's
      EPERM: ENOSYS is what every kernel before 5.1 (and every kernel built without
      io_uring) answers, so it is the one failure a program that can use io_uring
      must already treat as "no io_uring here, take the epoll/thread-pool path";
      EPERM (``kernel.io_uring_disabled=2``, Docker) is newer and some programs take
      it for a hard error.
      ``allow_io_uring`` is refused with ``strict_unix`` and with a network mode that
      makes a namespace (deny, proxy), since there the socket refusals matter
      (policy.py: ``conflicting_options``).
    - Kernel surface a command does not need (unless named in
      ``Policy(allow_syscalls=...)``): ``perf_event_open``, ``bpf`` and ``userfaultfd``
      fail with EPERM, as in Docker's default profile (for a container without
      CAP_PERFMON, CAP_BPF or CAP_SYS_ADMIN; Codex's filter refuses with EPERM too, but
      not these). None is confined by a namespace: each reaches a large kernel subsystem that local privilege escalations
      keep coming from (perf events, the BPF verifier and maps), or, for ``userfaultfd``,
      the page-fault stalls that turn kernel races into exploits; ``perf_event_open``
      also measures the machine's other processes and caches (side channels). The host's
      sysctls (``kernel.perf_event_paranoid``, ``kernel.unprivileged_bpf_disabled``,
      ``vm.unprivileged_userfaultfd``) decide what they allow the caller; the sandbox
      does not lean on them. Profilers (``perf``), BPF tools (``bpftrace``, socket
      filters loaded with ``SO_ATTACH_BPF``) and userfaultfd users (CRIU, live
      migration, some garbage collectors) need the opt-in. EPERM, not ENOSYS: the three
      exist on every kernel a sandbox runs on, and EPERM is what each answers when a
      sysctl or a capability forbids it, which the tools already report clearly.
      ``/dev/userfaultfd`` (Linux 5.11) makes the same descriptor without the system
      call, through ``ioctl(fd, USERFAULTFD_IOC_NEW)``: the device is not in the minimal
      ``/dev`` (and the read-only ``/`` is ``nodev``), and that ioctl (``_IO(0xAA, 0)``,
      the low 32 bits compared as for TIOCSTI) fails with EPERM too unless
      ``userfaultfd`` is allowed, so a policy that binds the device with ``dev=True``
      (pybwrap's ``--dev-bind /dev /dev``) does not reopen it.
    - Socket families that no network namespace confines (network deny and proxy
      only): ``socket`` and ``socketpair`` with one of :data:`GLOBAL_FAMILIES` fail
      with EAFNOSUPPORT, the kernel's own answer for a family it does not offer.
      Which families a new network namespace does *not* confine was checked in the
      kernel source (``net/*/af_*.c``, the family's ``create``):

      - ``AF_VSOCK`` (40): reaches the hypervisor and host services (Firecracker,
        QEMU, WSL2, cloud VMs; ``vsock_loopback`` reaches every vsock listener of
        this kernel). ``vsock_create`` has no namespace check; the netns modes of
        recent kernels default to "global".
      - ``AF_QIPCRTR`` (42): Qualcomm IPC router to modems and remote processors;
        ``qrtr_create`` has no namespace check and its ports and nodes are global.
      - Belt and braces, refused in a new netns today by the kernel itself:
        ``AF_BLUETOOTH`` (31, ``net != &init_net`` -> EAFNOSUPPORT), ``AF_NFC`` (39,
        init_net check), ``AF_CAIF`` (37, ``capable()`` in the initial user
        namespace), ``AF_IUCV`` (32, s390 z/VM, global), ``AF_IEEE802154`` (36,
        init_net check). The seccomp refusal keeps them refused if one of those
        checks is relaxed.

      Namespaced, so not refused: ``AF_UNIX`` (pathnames are the filesystem's:
      authority.py, strict_unix), ``AF_INET``/``AF_INET6``, ``AF_NETLINK``,
      ``AF_PACKET``, ``AF_CAN``, ``AF_TIPC``, ``AF_RDS``, ``AF_KCM``, ``AF_XDP``,
      ``AF_SMC``, ``AF_MCTP``, ``AF_RXRPC``, ``AF_KEY``, ``AF_PPPOX``, ``AF_PHONET``.
      Families the kernel refuses outside ``init_net`` (AX.25, NET/ROM, ROSE, X.25,
      AppleTalk, ATM, LLC) fail with EAFNOSUPPORT without us. Not refused although
      not a network: ``AF_ALG`` (kernel crypto API; it reaches nothing outside,
      Docker allows it, cryptsetup and iwd use it; it is kernel surface, like any
      other system call the command may make).
      On i386 ``socketcall(SYS_SOCKET|SYS_SOCKETPAIR, ...)`` hides the family in
      memory that seccomp cannot read: in deny and proxy mode it is refused whole
      (EPERM); the direct i386 ``socket``/``socketpair`` calls are checked as on
      x86_64.
    - Set-id files: ``chmod``, ``fchmod``, ``fchmodat``, ``fchmodat2``, ``creat``,
      ``mknod``, ``mknodat`` with ``S_ISUID`` or ``S_ISGID`` in the mode, and ``open`` /
      ``openat`` with such a mode and ``O_CREAT`` or ``O_TMPFILE``, fail with EPERM;
      ``openat2`` (its mode is in memory seccomp cannot read) fails with ENOSYS, the
      answer of kernels before 5.6, so callers take their ``openat`` path. Why: in its
      user namespace a root caller's command still has kernel uid 0, so what it creates
      in a writable bind is owned by root on the host, and an owner may set the setuid
      bit without any capability: the host, where the bind is not ``nosuid``, would
      run that file as root for anyone. (An unprivileged caller's command could leave a
      setuid-to-the-caller file the same way.) io_uring's ``IORING_OP_OPENAT`` is not
      seen here: one more reason it is refused by default.
    - The x32 ABI (syscall numbers with bit 30 set on x86_64) is refused with ENOSYS;
      the i386 ABI (``int 0x80``) gets the same checks under its own syscall numbers.
      Any other architecture is killed.

``strict_unix_filter()`` (``Policy(strict_unix=True)``)
    ``socket(AF_UNIX, ...)`` fails with EPERM; ``socketpair`` stays allowed, so
    pipes-like pairs still work but no new Unix socket can connect to a path or
    abstract name. On i386, ``socketcall(SYS_SOCKET, ...)`` hides its arguments in
    memory that seccomp cannot read, so it is refused whole (EPERM).

Several filters: the kernel runs every loaded program on every call and takes the
most restrictive action (``KILL_PROCESS`` > ``KILL_THREAD`` > ``TRAP`` > ``ERRNO``
> ``USER_NOTIF`` > ``TRACE`` > ``LOG`` > ``ALLOW``, ``seccomp_run_filters``); among
equal actions the most recently loaded program's data (the errno) is kept. A
caller's program (``Policy(seccomp=...)``, loaded first) cannot allow what a
built-in refuses; where both refuse with an errno, the built-in's errno is seen.

Raises in this module are :class:`CapabilityUnavailable` with reason
``seccomp_unavailable`` (unsupported host architecture) and :class:`PolicyError`
(an unknown network mode or opt-in name, a malformed program).
"""

from __future__ import annotations

import errno as _errno
import os

from .bpf import (BPF_JA, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_LD_W_ABS, BPF_RET_K,  # noqa: F401
                  MAX_INSNS, Program, disassemble, validate)
from . import denial_calls as _calls
from .checks import as_tuple
from .errors import CapabilityUnavailable, PolicyError, Reason

# <linux/seccomp.h>
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
RET_USER_NOTIF = 0x7FC00000

# <linux/audit.h>
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
OFF_NR = 0
OFF_ARCH = 4


def off_arg_low(index: int) -> int:
    """Offset of the low 32 bits of ``args[index]`` (x86 is little-endian)."""
    return 16 + 8 * index


# syscall numbers: arch/x86/entry/syscalls/syscall_64.tbl and syscall_32.tbl
NR = {
    "x86_64": {"ioctl": 16, "socket": 41, "socketpair": 53, "add_key": 248, "request_key": 249,
               "keyctl": 250, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
               "chmod": 90, "fchmod": 91, "creat": 85, "mknod": 133, "fchmodat": 268, "fchmodat2": 452,
               "mknodat": 259, "open": 2, "openat": 257, "openat2": 437, "perf_event_open": 298, "bpf": 321,
               "userfaultfd": 323},
    "i386": {"ioctl": 54, "socket": 359, "socketpair": 360, "socketcall": 102, "add_key": 286,
             "request_key": 287, "keyctl": 288, "io_uring_setup": 425, "io_uring_enter": 426,
             "io_uring_register": 427, "chmod": 15, "fchmod": 94, "creat": 8, "mknod": 14, "fchmodat": 306,
             "fchmodat2": 452, "mknodat": 297, "open": 5, "openat": 295, "openat2": 437, "perf_event_open": 336,
             "bpf": 357, "userfaultfd": 374},
}
# Calls that set a file's mode, by the argument that holds it (set-id bits refused).
MODE_CALLS = {1: ("chmod", "fchmod", "creat", "mknod"), 2: ("fchmodat", "fchmodat2", "mknodat")}
# open(path, flags, mode) and openat(dfd, path, flags, mode): (flags, mode) arguments.
OPEN_CALLS = {"open": (1, 2), "openat": (2, 3)}
S_ISUID, S_ISGID = 0o4000, 0o2000
O_CREAT, O_TMPFILE_BIT = 0o100, 0o20000000   # the mode only counts with one of them
SETID_ERRNO = _errno.EPERM
KEYRING_CALLS = ("keyctl", "add_key", "request_key")
IO_URING_CALLS = ("io_uring_setup", "io_uring_enter", "io_uring_register")
# Refused unless the policy names them (Policy.allow_syscalls): the only calls it can name.
OPT_IN_CALLS = ("perf_event_open", "bpf", "userfaultfd")
SYS_SOCKET = 1          # socketcall(2) call numbers
SYS_SOCKETPAIR = 8
AF_UNIX = 1
AF_BLUETOOTH = 31
AF_IUCV = 32
AF_IEEE802154 = 36
AF_CAIF = 37
AF_NFC = 39
AF_VSOCK = 40
AF_QIPCRTR = 42
# Socket families no network namespace confines (see the module docstring): refused in
# network deny and proxy mode.
GLOBAL_FAMILIES = (AF_VSOCK, AF_QIPCRTR, AF_BLUETOOTH, AF_NFC, AF_CAIF, AF_IUCV, AF_IEEE802154)
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
DENIED_IOCTLS = (TIOCSTI, TIOCLINUX)
USERFAULTFD_IOC_NEW = 0xAA00    # <linux/userfaultfd.h> _IO(0xAA, 0x00), on /dev/userfaultfd
KEYRING_ERRNO = _errno.EPERM
IO_URING_ERRNO = _errno.ENOSYS
OPT_IN_ERRNO = _errno.EPERM
FAMILY_ERRNO = _errno.EAFNOSUPPORT
SUPPORTED_MACHINES = ("x86_64",)


def errno_action(err: int) -> int:
    return RET_ERRNO | (err & 0xFFFF)


def check_machine(machine: str | None = None) -> str:
    """The host machine if pysandbox has seccomp filters for it.

    Raises:
        CapabilityUnavailable: ``seccomp_unavailable`` on another architecture.
    """
    machine = machine or os.uname().machine
    if machine not in SUPPORTED_MACHINES:
        raise CapabilityUnavailable(
            f"pysandbox's built-in seccomp filters are written for {', '.join(SUPPORTED_MACHINES)}, "
            f"not {machine}", Reason.SECCOMP_UNAVAILABLE)
    return machine


def _arch_dispatch(prog: Program) -> Program:
    """Jump to ``x86_64`` or ``i386``; kill any other architecture; refuse x32."""
    return (prog.load(OFF_ARCH)
            .jeq(AUDIT_ARCH_X86_64, "x86_64")
            .jeq(AUDIT_ARCH_I386, "i386")
            .ret(RET_KILL_PROCESS)
            .label("x86_64")
            .load(OFF_NR)
            .jge(X32_SYSCALL_BIT, "x32"))


def opt_in_calls(names) -> frozenset:
    """``names`` as a frozenset, each one of :data:`OPT_IN_CALLS` (``Policy.allow_syscalls``).

    Raises:
        PolicyError: ``invalid_value`` for a string (not a collection of names) or a name
            outside :data:`OPT_IN_CALLS`, naming the field ``allow_syscalls``.
    """
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise PolicyError(f"allow_syscalls must be a collection of system call names, not {names!r}",
                          Reason.INVALID_VALUE, names, field="allow_syscalls")
    names = tuple(names)
    for name in names:
        if name not in OPT_IN_CALLS:
            hint = (" (io_uring has its own switch, allow_io_uring)" if isinstance(name, str)
                    and name.startswith("io_uring") else "")
            raise PolicyError(f"allow_syscalls: {name!r} cannot be allowed: only {', '.join(OPT_IN_CALLS)} are "
                              f"refused by default and may be opted in{hint}; the other refusals of the "
                              "built-in filter (keyrings, TIOCSTI, set-id modes, ...) always hold",
                              Reason.INVALID_VALUE, name, field="allow_syscalls")
    return frozenset(names)


def caller_programs(programs) -> tuple[bytes, ...]:
    """``Policy.seccomp``: the caller's programs as bytes, each a non-empty multiple of 8
    bytes of at most :data:`MAX_INSNS` instructions (the kernel checks the rest when it
    loads them, as bwrap leaves it to: pybwrap reports its EINVAL).

    Raises:
        PolicyError: ``invalid_value`` for anything else.
    """
    progs = as_tuple(programs, "seccomp")
    for prog in progs:
        if not isinstance(prog, (bytes, bytearray)) or not prog or len(prog) % 8 or len(prog) > 8 * MAX_INSNS:
            raise PolicyError("a seccomp program is classic BPF: a non-empty multiple of 8 bytes, "
                              f"at most {MAX_INSNS} instructions", Reason.INVALID_VALUE, prog)
    return tuple(bytes(p) for p in progs)


def default_filter(network: str = "deny", allow_io_uring: bool = False, machine: str | None = None, *,
                   allow_syscalls=frozenset(), report: bool = False) -> bytes:
    """The filter every sandbox loads (module docstring): ioctl TIOCSTI/TIOCLINUX, the
    keyring calls and a set-id mode fail with EPERM (openat2 with ENOSYS); io_uring fails with ENOSYS unless ``allow_io_uring``;
    :data:`OPT_IN_CALLS` fail with EPERM except those in ``allow_syscalls``;
    with ``network`` deny or proxy, socket/socketpair of :data:`GLOBAL_FAMILIES` fail with
    EAFNOSUPPORT and i386 socketcall(SYS_SOCKET|SYS_SOCKETPAIR) with EPERM; x32 fails with
    ENOSYS; other architectures are killed.

    ``report`` (``Policy(report_denials=True)``, :mod:`pysandbox.denials`): the program
    is loaded with a notification listener the launcher holds. The keyring,
    io_uring and opt-in refusals return ``SECCOMP_RET_USER_NOTIF`` instead of their
    errno (the observer answers each with that same errno and records it; with no
    listener the kernel answers ENOSYS: still refused); on x86_64 the write-intent calls
    of :mod:`pysandbox.denial_calls` and, with ``network`` deny or proxy, ``connect``
    also notify, and the observer always lets the kernel decide them
    (``SECCOMP_USER_NOTIF_FLAG_CONTINUE``). Every other refusal (ioctl, set-id modes,
    socket families, openat2, x32) stays a plain errno of the kernel, not reported.

    Raises:
        CapabilityUnavailable: ``seccomp_unavailable`` on an unsupported architecture.
        PolicyError: ``invalid_value`` for an unknown network mode or a name in
            ``allow_syscalls`` outside :data:`OPT_IN_CALLS`.
    """
    check_machine(machine)
    if network not in ("deny", "allow", "proxy"):
        raise PolicyError(f"unknown network mode {network!r}", Reason.INVALID_VALUE, network)
    refused = [call for call in OPT_IN_CALLS if call not in opt_in_calls(allow_syscalls)]
    families = network != "allow"
    prog = _arch_dispatch(Program())
    for abi in ("x86_64", "i386"):
        nr = NR[abi]
        if abi == "i386":
            prog.label("i386").load(OFF_NR)
        prog.jeq(nr["ioctl"], "ioctl")
        for arg, calls in MODE_CALLS.items():
            for call in calls:
                prog.jeq(nr[call], f"mode{arg}")
        for call in OPEN_CALLS:
            prog.jeq(nr[call], call)
        prog.jeq(nr["openat2"], "enosys")
        for call in KEYRING_CALLS:
            prog.jeq(nr[call], "keyring")
        if not allow_io_uring:
            for call in IO_URING_CALLS:
                prog.jeq(nr[call], "io_uring")
        for call in refused:
            prog.jeq(nr[call], "opt_in")
        if families:
            prog.jeq(nr["socket"], "family").jeq(nr["socketpair"], "family")
            if abi == "i386":
                prog.jeq(nr["socketcall"], "socketcall")
        prog.ja("observe" if report and abi == "x86_64" else "allow")
    if families:
        (prog.label("socketcall").load(off_arg_low(0))     # the call number; its arguments are in memory
             .jeq(SYS_SOCKET, "eperm").jeq(SYS_SOCKETPAIR, "eperm").ja("allow"))
        prog.label("family").load(off_arg_low(0))          # the domain: an int, low 32 bits only
        for family in GLOBAL_FAMILIES:
            prog.jeq(family, "eafnosupport")
        prog.ja("allow")
    after = "observe" if report else "allow"   # a call no refusal matched
    for call, (flags, mode) in OPEN_CALLS.items():
        (prog.label(call).load(off_arg_low(flags)).jset(O_CREAT | O_TMPFILE_BIT, f"mode{mode}", after))
    for arg in (1, 2, 3):                                  # umode_t: the low bits are all there is
        prog.label(f"mode{arg}").load(off_arg_low(arg)).jset(S_ISUID | S_ISGID, "setid", after)
    prog.label("ioctl").load(off_arg_low(1))               # the request: low 32 bits only
    for request in DENIED_IOCTLS:
        prog.jeq(request, "eperm")
    if "userfaultfd" in refused:                           # the device's way to the same descriptor
        prog.jeq(USERFAULTFD_IOC_NEW, "opt_in")
    if report:
        prog.ja("allow")                                   # the ioctl rule's fall-through
        _observe(prog, network)
    prog.label("allow").ret(RET_ALLOW)
    prog.label("setid").ret(errno_action(SETID_ERRNO))
    prog.label("keyring").ret(RET_USER_NOTIF if report else errno_action(KEYRING_ERRNO))
    prog.label("eperm").ret(errno_action(_errno.EPERM))
    if not allow_io_uring:
        prog.label("io_uring").ret(RET_USER_NOTIF if report else errno_action(IO_URING_ERRNO))
    if refused:
        prog.label("opt_in").ret(RET_USER_NOTIF if report else errno_action(OPT_IN_ERRNO))
    if report:
        prog.label("notify").ret(RET_USER_NOTIF)
    if families:
        prog.label("eafnosupport").ret(errno_action(FAMILY_ERRNO))
    prog.label("x32").label("enosys").ret(errno_action(_errno.ENOSYS))
    return prog.assemble()


def _observe(prog: Program, network: str) -> None:
    """Report mode: the x86_64 write-intent calls (and ``connect`` off network allow)
    jump to ``notify``; anything else, and the i386 ABI, to ``allow``."""
    prog.label("observe").load(OFF_ARCH).jeq(AUDIT_ARCH_X86_64, "observe64", "allow")
    prog.label("observe64").load(OFF_NR)
    for name in _calls.ALWAYS_CALLS:
        prog.jeq(_calls.WRITE_CALLS[name][0], "notify")
    if network != "allow":
        prog.jeq(_calls.CONNECT_NR, "notify")
    for name in (*_calls.FLAGGED_CALLS, *_calls.PATH_NONNULL_CALLS):
        prog.jeq(_calls.WRITE_CALLS[name][0], f"observe_{name}")
    prog.ja("allow")
    for name, arg in _calls.FLAGGED_CALLS.items():
        prog.label(f"observe_{name}").load(off_arg_low(arg)).jset(_calls.WRITE_FLAGS, "notify", "allow")
    for name, arg in _calls.PATH_NONNULL_CALLS.items():   # a pointer: either half non-zero
        (prog.label(f"observe_{name}").load(off_arg_low(arg)).jeq(0, f"observe_{name}_hi", "notify")
             .label(f"observe_{name}_hi").load(off_arg_low(arg) + 4).jeq(0, "allow", "notify"))


def strict_unix_filter(machine: str | None = None) -> bytes:
    """socket(AF_UNIX, ...) fails with EPERM (socketpair stays); i386 socketcall(SYS_SOCKET)
    is refused whole; x32 fails with ENOSYS.

    Raises:
        CapabilityUnavailable: ``seccomp_unavailable`` on an unsupported architecture.
    """
    check_machine(machine)
    prog = _arch_dispatch(Program())
    prog.jeq(NR["x86_64"]["socket"], "socket", "allow")
    (prog.label("i386").load(OFF_NR)
         .jeq(NR["i386"]["socket"], "socket")
         .jeq(NR["i386"]["socketcall"], "socketcall", "allow"))
    prog.label("socketcall").load(off_arg_low(0)).jeq(SYS_SOCKET, "deny", "allow")
    prog.label("socket").load(off_arg_low(0)).jeq(AF_UNIX, "deny", "allow")
    prog.label("allow").ret(RET_ALLOW)
    prog.label("deny").ret(errno_action(_errno.EPERM))
    prog.label("x32").ret(errno_action(_errno.ENOSYS))
    return prog.assemble()


def coverage(policy) -> dict:
    """What the built-in filters refuse whole for ``policy`` (``pysandbox status``):
    ``refused`` maps each system call to the errno name it fails with (the ioctl, socket
    and mode rules, which look at arguments, are not listed); ``allowed`` names the calls
    refused by default that the policy lets through (``allow_io_uring``,
    ``allow_syscalls``); ``opt_in`` the names ``allow_syscalls`` may hold."""
    uring = bool(getattr(policy, "allow_io_uring", False))
    allowed = sorted(getattr(policy, "allow_syscalls", ()))
    refused = dict.fromkeys(KEYRING_CALLS, _errno.errorcode[KEYRING_ERRNO])
    refused.update(dict.fromkeys((c for c in OPT_IN_CALLS if c not in allowed), _errno.errorcode[OPT_IN_ERRNO]))
    if not uring:
        refused.update(dict.fromkeys(IO_URING_CALLS, _errno.errorcode[IO_URING_ERRNO]))
    refused["openat2"] = _errno.errorcode[_errno.ENOSYS]
    return {"refused": refused, "allowed": (list(IO_URING_CALLS) if uring else []) + allowed,
            "opt_in": list(OPT_IN_CALLS)}


def builtin_filters(strict_unix: bool = False, network: str = "deny", allow_io_uring: bool = False,
                    machine: str | None = None, *, allow_syscalls=frozenset(),
                    report: bool = False) -> tuple[bytes, ...]:
    """The programs pysandbox loads for a policy: :func:`default_filter` always (its socket
    family rules follow ``network``, its io_uring rule ``allow_io_uring``, its
    :data:`OPT_IN_CALLS` rule ``allow_syscalls``), strict-unix when asked.

    Raises:
        CapabilityUnavailable: ``seccomp_unavailable`` on an unsupported architecture.
        PolicyError: ``invalid_value`` for an unknown network mode or system call name.
    """
    progs = [default_filter(network, allow_io_uring, machine, allow_syscalls=allow_syscalls, report=report)]
    if strict_unix:
        progs.append(strict_unix_filter(machine))
    return tuple(progs)
