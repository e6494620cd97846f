"""The bwrap backend's init in Python: the fallback when the native module (which carries
native/psb_bwrap_init.c) is missing. Same argv and status-pipe protocol as the C init;
run as ``python -I -S -c SOURCE STATUS_FD -1 [options] -- EXE ARGV0 ARGS...``.

It makes itself undumpable first (until then it is dumpable, but the command does not
exist yet: nothing in the sandbox could ptrace it), then does what the C init does.
``SOURCE`` is this module's text below the marker line: only the standard library."""

from .tail import STEP

# The step numbers of enum psb_tail_step (native/psb_tail.h) as T_* names, then the init.
SOURCE = "".join(f"T_{name} = {value}\n" for name, value in STEP.items()) + r'''
import ctypes, errno, fcntl, os, select, signal, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(4, 0, 0, 0, 0)                          # PR_SET_DUMPABLE 0, first
a = sys.argv[1:]
sfd = int(a[0])
def put(*w):
    os.write(sfd, struct.pack("<%dI" % len(w), *w))
def fail(what, detail, k=0):
    try:
        put(0x50534202, what, detail & 0xffffffff, k)
    finally:
        os._exit(126)
def err():
    return ctypes.get_errno()
os.set_inheritable(sfd, False)
libc.prctl(1, 9, 0, 0, 0)                          # PR_SET_PDEATHSIG SIGKILL
SIGS = {signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM,
        signal.SIGCHLD, signal.SIGIO}
old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGS)
# The launcher's life, as the C init: SIGIO when the status pipe's last reader goes
sfl = fcntl.fcntl(sfd, fcntl.F_GETFL)
fcntl.fcntl(sfd, fcntl.F_SETOWN, os.getpid())
fcntl.fcntl(sfd, fcntl.F_SETFL, sfl | os.O_ASYNC)
poller = select.poll()
poller.register(sfd, select.POLLOUT)
def launcher_gone():
    return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0))
if launcher_gone():
    os._exit(125)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
i, filters, caps, exec_mode, pty, rlimits, ll, no_raise = 2, [], None, False, None, [], 0, False
nro = nbind = 0
gate = -1
while i < len(a) and a[i] != "--":
    o = a[i]
    if o == "-N":
        if libc.unshare(0x20000) != 0:
            fail(T_MOUNT_PRIVATE, err())
    elif o == "-P":
        if libc.mount(None, b"/", None, (1 << 14) | (1 << 18), None) != 0:
            fail(T_MOUNT_PRIVATE, err())
    elif o == "-r":
        i += 1
        p = os.fsencode(a[i])
        if os.path.lexists(p) and (libc.mount(p, p, None, 4096 | 16384, None) != 0 or
                                   libc.mount(None, p, None, 32 | 4096 | 1 | 2 | 4 | 8, None) != 0):
            fail(T_PROC_READONLY, err() or 22, nro)
        nro += 1
    elif o == "-b":
        try:
            st = os.lstat(a[i + 1])
            ok = (st.st_dev, st.st_ino) == (int(a[i + 2]), int(a[i + 3]))
        except OSError:
            ok = False
        if not ok:
            fail(T_BIND_CHANGED, 40, nbind)
        nbind += 1
        i += 3
    elif o == "-s":
        i += 1
        fd = int(a[i])
        data = b""
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        os.close(fd)
        if not data or len(data) % 8 or len(data) > 4096 * 8:
            fail(T_SECCOMP, 22, len(filters))
        filters.append(data)
    elif o == "-c":
        i += 1
        caps = int(a[i], 16)
    elif o == "-t":
        pty = tuple(int(x) for x in a[i + 1:i + 4])
        os.set_inheritable(pty[0], False)
        i += 3
    elif o == "-p":                                # as psb_bwrap_init.c listen_send
        lsock, port = socket.socket(fileno=int(a[i + 1])), int(a[i + 2])
        made = []
        try:
            for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
                try:
                    ls = socket.socket(fam, socket.SOCK_STREAM)
                except OSError as e:
                    if fam == socket.AF_INET6 and e.errno == errno.EAFNOSUPPORT:
                        break
                    raise
                made.append(ls)
                if fam == socket.AF_INET6:
                    ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    ls.bind((host, port))
                except OSError as e:
                    if fam == socket.AF_INET6 and e.errno == errno.EADDRNOTAVAIL:
                        made.pop().close()
                        break
                    raise
                ls.listen(4096)
            socket.send_fds(lsock, [b"L"], [x.fileno() for x in made])
        except OSError as e:
            fail(T_LISTEN, e.errno or 22)
        finally:
            for x in made:
                x.close()
            lsock.close()
        i += 2
    elif o == "-w":                                # as psb_bwrap_init.c: the monitor's gate
        i += 1
        gate = int(a[i])
        os.set_inheritable(gate, False)
    elif o == "-x":
        exec_mode = True
    elif o == "-n":                                # as psb_bwrap_init.c: no inheritable/ambient
        no_raise = True
    elif o == "-R":
        rlimits.append(tuple(int(x) for x in a[i + 1:i + 4]))
        i += 3
    elif o == "-L":
        i += 1
        ll = int(a[i])
        if ll not in (1, 2):
            fail(T_USAGE, 22, i)
    else:
        fail(T_USAGE, 22, i)
    i += 1
if i + 2 >= len(a):
    fail(T_USAGE, 22, i)
exe, argv = os.fsencode(a[i + 1]), [os.fsencode(x) for x in a[i + 2:]]
if caps is not None:
    for cap in range(64):
        if caps >> cap & 1:
            continue
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            if err() == 22:
                break
            fail(T_CAPS, err())
    if libc.prctl(47, 4, 0, 0, 0) != 0:
        fail(T_CAPS, err())
    class H(ctypes.Structure):
        _fields_ = [("v", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class D(ctypes.Structure):
        _fields_ = [("e", ctypes.c_uint32), ("p", ctypes.c_uint32), ("i", ctypes.c_uint32)]
    d = (D * 2)()
    for k in range(2):
        m = (caps >> (32 * k)) & 0xffffffff
        d[k] = D(m, m, 0 if no_raise else m)
    if libc.capset(ctypes.byref(H(0x20080522, 0)), d) != 0:
        fail(T_CAPS, err())
    for cap in range(64):
        if caps >> cap & 1 and not no_raise:
            libc.prctl(47, 2, cap, 0, 0)
    back = (D * 2)()
    if libc.capget(ctypes.byref(H(0x20080522, 0)), back) != 0 or \
            any((back[k].e, back[k].p) != (d[k].e, d[k].p) for k in range(2)):
        fail(T_CAPS, 1)
class F(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
bufs = [ctypes.create_string_buffer(f, len(f)) for f in filters]
def apply_filters():
    for f, buf in zip(filters, bufs):
        prog = F(len(f) // 8, ctypes.cast(buf, ctypes.c_void_p))
        if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
            return err()
    return 0
def landlock():
    # the command's own Landlock domain (native/psb_landlock.h, the same two kinds: 1
    # filesystem, 2 signal scope): no ptrace-class access to this init, whatever
    # capabilities it keeps; without -L, or without Landlock, as before (undumpable)
    if not ll:
        return 0
    libc.syscall.restype = ctypes.c_long
    attr = struct.pack("=QQQ", 1 << 11 if ll == 1 else 0, 0, 0 if ll == 1 else 1 << 1)
    size = 8 if ll == 1 else 24
    rs = libc.syscall(ctypes.c_long(444), ctypes.create_string_buffer(attr, 24), ctypes.c_long(size), ctypes.c_long(0))
    if rs < 0:
        e = ctypes.get_errno()
        return 0 if e in (38, 95) else e
    r = 0
    if ll == 1:
        root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        rule = ctypes.create_string_buffer(struct.pack("=Qi", 1 << 11, root), 12)
        r = libc.syscall(ctypes.c_long(445), ctypes.c_long(rs), ctypes.c_long(1), rule, ctypes.c_long(0))
        os.close(root)
    if r == 0:
        r = libc.syscall(ctypes.c_long(446), ctypes.c_long(rs), ctypes.c_long(0))
    e = ctypes.get_errno() if r != 0 else 0
    os.close(rs)
    return e
def open_pty():
    # As native/psb_bwrap_init.c open_pty: the master from the sandbox's devpts, sent
    # to the launcher and closed; a new session with the slave as controlling terminal.
    import fcntl, socket
    sock, mask, ws = pty
    m = os.open("/dev/pts/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(m, 0x40045431, struct.pack("i", 0))            # TIOCSPTLCK: unlock
        s = fcntl.ioctl(m, 0x5441, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)   # TIOCGPTPEER
        if ws:
            fcntl.ioctl(s, 0x5414, struct.pack("HHHH", ws >> 16, ws & 0xffff, 0, 0))
        try:
            os.setsid()
        except PermissionError:
            if os.getsid(0) != os.getpid():
                raise
        fcntl.ioctl(s, 0x540E, 0)                                  # TIOCSCTTY
        with socket.socket(fileno=sock) as so:
            if socket.send_fds(so, [b"T"], [m]) != 1:
                raise OSError(22, "short send")
    finally:
        os.close(m)
    for fd in range(3):
        if mask >> fd & 1:
            os.dup2(s, fd)
    os.close(s)
def pty_step():
    try:
        if pty is not None:
            open_pty()
        return 0
    except OSError as x:
        return x.errno or 22
def set_rlimits():
    # the sandbox's rlimits (pysandbox/limits.py), after every descriptor of the setup;
    # and SIGPIPE, SIGXFSZ back to default (Python ignores them; exec would keep that,
    # and a file_size limit would be EFBIG, not SIGXFSZ, as native/psb_child.c resets them)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    # libc's setrlimit, not resource.setrlimit: the kernel's errno (EPERM above
    # fs.nr_open), which Python's ValueError would hide, as the C init reports it
    class RL(ctypes.Structure):
        _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]
    for k, (res, soft, hard) in enumerate(rlimits):
        if libc.setrlimit(res, ctypes.byref(RL(soft & (2 ** 64 - 1), hard & (2 ** 64 - 1)))) != 0:
            return err() or 22, k
    return 0, 0
if gate >= 0:
    try:
        go = os.read(gate, 1)
    except OSError:
        go = b""
    if len(go) != 1:
        os._exit(125)                              # no monitor: the command never runs
    os.close(gate)
env = dict(os.environb)
if exec_mode:
    e = pty_step()
    if e:
        fail(T_PTY, e)
    signal.pthread_sigmask(signal.SIG_SETMASK, old)
    e, k = set_rlimits()
    if e:
        fail(T_RLIMIT, e, k)
    e = apply_filters()
    if e:
        fail(T_SECCOMP, e)
    fcntl.fcntl(sfd, fcntl.F_SETFL, sfl)           # no SIGIO for the command
    put(0x50534201)
    try:
        os.execve(exe, argv, env)
    except OSError as x:
        fail(T_EXEC, x.errno)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(sfd)
    os.close(r)
    rec = (0, 0, 0)
    e = pty_step()                                 # signals still blocked: as the C init
    if e:
        rec = (T_PTY, e, 0)
    if not rec[0]:
        e = landlock()
        if e:
            rec = (T_LANDLOCK, e, 0)
    if not rec[0]:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        e, k = set_rlimits()
        if e:
            rec = (T_RLIMIT, e, k)
    if not rec[0]:
        e = apply_filters()
        if e:
            rec = (T_SECCOMP, e, 0)
    if not rec[0]:
        try:
            os.execve(exe, argv, env)
        except OSError as x:
            rec = (T_EXEC, x.errno, 0)
    os.write(w, struct.pack("<3I", *rec))
    os._exit(127)
os.close(w)
if pty is not None:
    os.close(pty[0])                               # the init never sends on it
got = os.read(r, 12)
os.close(r)
if len(got) == 12:
    os.waitpid(pid, 0)
    fail(*struct.unpack("<3I", got))
put(0x50534201)
while True:
    while True:
        try:
            p, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            p = 0
        if p == 0:
            break
        if os.WIFSTOPPED(st):
            # a ptrace stop (a child's PTRACE_TRACEME made us its tracer), not an exit
            libc.ptrace(17, p, 0, os.WSTOPSIG(st))
            continue
        if p == pid:
            put(st & 0xffffffff)
            os._exit(os.waitstatus_to_exitcode(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st))
    sig = signal.sigwaitinfo(SIGS).si_signo
    if sig == signal.SIGIO:
        if launcher_gone():
            os.kill(-1, signal.SIGKILL)
            os._exit(125)
    elif sig != signal.SIGCHLD:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
'''
