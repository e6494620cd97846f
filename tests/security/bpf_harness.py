"""Load seccomp programs in a forked child of the test (no sandbox) and run probes there.

Used to test the filters' instructions on the real kernel, independently of the
backends: the same probe runs once without the filter (the control: it must
succeed) and once with it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import pickle
import struct
import termios

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
MAP_32BIT = 0x40
TIOCSTI = termios.TIOCSTI
TIOCSCTTY = termios.TIOCSCTTY


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load(programs) -> None:
    """In the current process: no_new_privs, then each program. Raises OSError."""
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    for prog in programs:
        buf = ctypes.create_string_buffer(prog, len(prog))
        fprog = SockFprog(len(prog) // 8, ctypes.addressof(buf))
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def in_child(programs, probe, timeout: float = 20.0):
    """Run ``probe()`` in a forked child after loading ``programs``; return its result
    (or re-raise its exception as RuntimeError)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns to pytest
        status = 0
        try:
            os.close(rfd)
            load(programs)
            payload = pickle.dumps(("ok", probe()))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            payload = pickle.dumps(("error", repr(exc)))
            status = 1
        try:
            os.write(wfd, payload)
        finally:
            os._exit(status)
    os.close(wfd)
    import select
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([rfd], [], [], timeout)
            if not ready:
                os.kill(pid, 9)
                raise TimeoutError("probe child did not answer")
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(rfd)
        _, wstatus = os.waitpid(pid, 0)
    if not chunks:
        raise RuntimeError(f"probe child died without answering: wait status {wstatus:#x}")
    kind, value = pickle.loads(b"".join(chunks))
    if kind != "ok":
        raise RuntimeError(value)
    return value


def _errno_of(ret: int) -> int:
    return 0 if ret >= 0 else ctypes.get_errno()


def sti_probe(via: str):
    """Make a new session with a fresh pty as controlling terminal, push one byte into
    it with TIOCSTI (``via``: libc, high_bits, int80), return (result errno, bytes the
    master read)."""
    def probe():
        os.setsid()
        master, slave = os.openpty()
        fcntl.ioctl(slave, TIOCSCTTY, 0)
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~(termios.ICANON | termios.ECHO)
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        ch = ctypes.c_char(b"Z")
        if via == "libc":
            ctypes.set_errno(0)
            err = _errno_of(libc.ioctl(slave, ctypes.c_ulong(TIOCSTI), ctypes.byref(ch)))
        elif via == "high_bits":
            ctypes.set_errno(0)
            ret = libc.syscall(ctypes.c_long(16), ctypes.c_long(slave),
                               ctypes.c_ulong(TIOCSTI | (0x1 << 32)), ctypes.byref(ch))
            err = _errno_of(ret)
        elif via == "int80":
            err = int80_ioctl(slave, TIOCSTI, b"Z")
        else:
            raise ValueError(via)
        os.set_blocking(slave, False)
        try:
            got = os.read(slave, 16)
        except BlockingIOError:
            got = b""
        return err, got
    return probe


# x86-64 machine code: int f(int fd, unsigned req, unsigned ptr) doing ioctl through the
# i386 entry (int 0x80, syscall 54), returning the raw result (-errno on failure).
_INT80_IOCTL = bytes([
    0x53,                          # push rbx
    0xB8, 0x36, 0x00, 0x00, 0x00,  # mov eax, 54 (i386 ioctl)
    0x89, 0xFB,                    # mov ebx, edi
    0x89, 0xF1,                    # mov ecx, esi
    0xCD, 0x80,                    # int 0x80 (edx already holds ptr)
    0x5B,                          # pop rbx
    0xC3,                          # ret
])
# int f(void): i386 getpid (20) through int 0x80
_INT80_GETPID = bytes([0x53, 0xB8, 0x14, 0x00, 0x00, 0x00, 0xCD, 0x80, 0x5B, 0xC3])


def _low_mapping(size: int = 4096):
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    addr = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_32BIT, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value) or addr >= 2**32:
        raise OSError(ctypes.get_errno(), "mmap MAP_32BIT")
    return addr


def int80_ioctl(fd: int, request: int, data: bytes) -> int:
    """ioctl(fd, request, data) through int 0x80; 0 or the errno."""
    page = _low_mapping()
    ctypes.memmove(page, _INT80_IOCTL, len(_INT80_IOCTL))
    ctypes.memmove(page + 2048, data, len(data))
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint)(page)
    ret = fn(fd, request, page + 2048)
    return 0 if ret >= 0 else -ret


def int80_getpid() -> int:
    page = _low_mapping()
    ctypes.memmove(page, _INT80_GETPID, len(_INT80_GETPID))
    return ctypes.CFUNCTYPE(ctypes.c_int)(page)()


def x32_getpid() -> int:
    """getpid through the x32 ABI; the pid or -errno."""
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(0x40000000 | 39))
    return ret if ret >= 0 else -ctypes.get_errno()


def unix_socket_probe():
    import socket
    out = {}
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
        out["socket_unix"] = 0
    except OSError as exc:
        out["socket_unix"] = exc.errno
    try:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        a.sendall(b"x")
        out["socketpair"] = b.recv(1)
        a.close()
        b.close()
    except OSError as exc:
        out["socketpair"] = exc.errno
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        out["socket_inet"] = 0
    except OSError as exc:
        out["socket_inet"] = exc.errno
    return out


EPERM = errno.EPERM
ENOSYS = errno.ENOSYS


# ---------------------------------------------------------------- kernel surface probes
# (shared with tests/security/test_kernel_surface.py, which runs the same source in a sandbox)

KERNEL_SURFACE_SOURCE = r'''
import ctypes, errno, os, socket
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

def _sys(nr, *args):
    ctypes.set_errno(0)
    ret = _libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return ret if ret >= 0 else -ctypes.get_errno()

KEY_SPEC_PROCESS_KEYRING, KEY_SPEC_SESSION_KEYRING = -2, -3
KEYCTL_GET_KEYRING_ID, KEYCTL_READ = 0, 11

def keyring_probe():
    """keyctl(GET_KEYRING_ID, @s) (the session keyring id, or -errno), add_key to the
    process keyring (private to this process, gone when it exits), request_key of a
    name nobody has (ENOKEY when allowed)."""
    out = {"session_id": _sys(250, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)}
    payload = ctypes.create_string_buffer(b"x")
    out["add_key"] = _sys(248, ctypes.c_char_p(b"user"), ctypes.c_char_p(b"pysandbox-probe"), payload, 1,
                          KEY_SPEC_PROCESS_KEYRING)
    out["add_key"] = 0 if out["add_key"] > 0 else out["add_key"]
    out["request_key"] = _sys(249, ctypes.c_char_p(b"user"), ctypes.c_char_p(b"pysandbox-no-such-key"),
                              ctypes.c_char_p(None), 0)
    if out["session_id"] > 0:
        buf = ctypes.create_string_buffer(4096)
        n = _sys(250, KEYCTL_READ, out["session_id"], buf, 4096)
        out["read_session"] = 0 if n >= 0 else n
    else:
        out["read_session"] = out["session_id"]
    return out

def io_uring_probe():
    """io_uring_setup(2 entries): 0 or -errno (the ring is closed at once); enter and
    register on fd -1: -EBADF when the calls reach the kernel."""
    params = ctypes.create_string_buffer(120)
    fd = _sys(425, 2, params)
    if fd >= 0:
        os.close(fd)
    return {"setup": 0 if fd >= 0 else fd, "enter": _sys(426, -1, 0, 0, 0, ctypes.c_void_p(None), 0),
            "register": _sys(427, -1, 0, ctypes.c_void_p(None), 0)}

PAGE, UFFD_USER_MODE_ONLY = 4096, 1

def opt_in_probe():
    """Calls the kernel answers with its own errno before any permission or sysctl check,
    so a result other than -EPERM shows the call reached the kernel: perf_event_open with
    an attr whose size field is 1 (-E2BIG, perf_copy_attr), bpf with a size over a page
    (-E2BIG, bpf_check_uarg_tail_zero); and userfaultfd(UFFD_USER_MODE_ONLY) (0: a
    descriptor, closed at once; what it answers is the host's vm.unprivileged_userfaultfd)."""
    attr = ctypes.create_string_buffer(128)
    attr[4] = 1
    out = {"perf_event_open": _sys(298, attr, 0, -1, -1, 0),
           "bpf": _sys(321, 0, ctypes.create_string_buffer(2 * PAGE), PAGE + 1),
           "userfaultfd": _sys(323, UFFD_USER_MODE_ONLY | os.O_CLOEXEC)}
    for name, ret in out.items():
        if ret >= 0:
            os.close(ret)
            out[name] = 0
    return out

FAMILIES = {"vsock": (40, socket.SOCK_STREAM), "qipcrtr": (42, socket.SOCK_DGRAM),
            "bluetooth": (31, socket.SOCK_STREAM), "nfc": (39, socket.SOCK_SEQPACKET),
            "caif": (37, socket.SOCK_SEQPACKET), "ieee802154": (36, socket.SOCK_DGRAM),
            "inet": (socket.AF_INET, socket.SOCK_STREAM), "unix": (socket.AF_UNIX, socket.SOCK_STREAM),
            "netlink": (socket.AF_NETLINK, socket.SOCK_RAW)}

def family_probe():
    """socket(family, type, 0) for each family: 0 (created and closed at once; nothing is
    sent) or the errno; socketpair(AF_VSOCK): the errno (vsock has no pairs: EOPNOTSUPP
    when the call reaches the family)."""
    out = {}
    for name, (family, kind) in FAMILIES.items():
        try:
            socket.socket(family, kind, 0).close()
            out[name] = 0
        except OSError as exc:
            out[name] = exc.errno
    try:
        a, b = socket.socketpair(40, socket.SOCK_STREAM, 0)
        a.close(); b.close()
        out["socketpair_vsock"] = 0
    except OSError as exc:
        out["socketpair_vsock"] = exc.errno
    return out
'''
# The program argv[1] names: does it open (0 or the errno), and does its
# ioctl(USERFAULTFD_IOC_NEW) make a userfaultfd (0 or the errno); is /dev/userfaultfd there,
# and what /dev holds. Run as a script (python -c SOURCE PATH), inside or outside a sandbox.
USERFAULTFD_DEVICE_SOURCE = r'''
import fcntl, json, os, sys
USERFAULTFD_IOC_NEW, UFFD_USER_MODE_ONLY = 0xAA00, 1
out = {"in_dev": os.path.lexists("/dev/userfaultfd"), "dev": sorted(os.listdir("/dev"))}
try:
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CLOEXEC)
except OSError as exc:
    out["open"] = exc.errno
else:
    out["open"] = 0
    try:
        os.close(fcntl.ioctl(fd, USERFAULTFD_IOC_NEW, UFFD_USER_MODE_ONLY | os.O_CLOEXEC))
        out["ioc_new"] = 0
    except OSError as exc:
        out["ioc_new"] = exc.errno
print(json.dumps(out))
'''
_ns: dict = {}
exec(compile(KERNEL_SURFACE_SOURCE, "<kernel_surface>", "exec"), _ns)
keyring_probe = _ns["keyring_probe"]
io_uring_probe = _ns["io_uring_probe"]
family_probe = _ns["family_probe"]
opt_in_probe = _ns["opt_in_probe"]

# x86-64 machine code: int f(int nr, int ebx, int ecx, int edx): one i386 system call
# through int 0x80; the raw result (-errno on failure).
_INT80_CALL = bytes([0x53, 0x89, 0xF8, 0x89, 0xF3, 0x87, 0xCA, 0xCD, 0x80, 0x5B, 0xC3])
# push rbx; mov eax,edi; mov ebx,esi; xchg edx,ecx; int 0x80; pop rbx; ret


def int80_surface_probe():
    """Through the i386 entry: keyctl(GET_KEYRING_ID, @s), io_uring_enter(-1),
    socket(AF_VSOCK), socketcall(SYS_SOCKET, [AF_VSOCK, SOCK_STREAM, 0]),
    socketcall(SYS_SOCKETPAIR, ...) into a low buffer; each 0 (a descriptor made and
    closed, or a keyring id) or the errno."""
    page = _low_mapping()
    ctypes.memmove(page, _INT80_CALL, len(_INT80_CALL))
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint)(page)
    args = (ctypes.c_uint * 4)(40, 1, 0, page + 3072)     # AF_VSOCK, SOCK_STREAM, 0, int sv[2]
    ctypes.memmove(page + 2048, args, 16)

    def norm(ret, is_fd=True):
        if ret < 0:
            return -ret
        if is_fd:
            os.close(ret)
        return 0
    return {"keyctl": norm(fn(288, 0, 0xFFFFFFFD, 0), is_fd=False),
            "io_uring_enter": norm(fn(426, 0xFFFFFFFF, 0, 0)),
            "socket_vsock": norm(fn(359, 40, 1, 0)),
            "socketcall_socket": norm(fn(102, 1, page + 2048, 0)),
            "socketcall_socketpair": norm(fn(102, 8, page + 2048, 0), is_fd=False)}


def int80_opt_in_probe():
    """The calls of ``opt_in_probe`` through the i386 entry (perf_event_open 336, bpf 357,
    userfaultfd 374); each 0 (a descriptor, closed) or the errno. perf_event_open's
    group_fd and flags are what the stub leaves in esi and edi (its flags, 336, are
    invalid: EINVAL when the call reaches the kernel)."""
    page = _low_mapping()
    ctypes.memmove(page, _INT80_CALL, len(_INT80_CALL))
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint)(page)
    ctypes.memmove(page + 2048, struct.pack("<II", 0, 1), 8)     # perf_event_attr: type 0, size 1

    def norm(ret):
        if ret < 0:
            return -ret
        os.close(ret)
        return 0
    return {"perf_event_open": norm(fn(336, page + 2048, 0, 0xFFFFFFFF)),
            "bpf": norm(fn(357, 0, page + 2048, 4097)),
            "userfaultfd": norm(fn(374, 1 | os.O_CLOEXEC, 0, 0))}
