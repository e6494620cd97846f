"""The sandbox's own terminal, seen from the launcher (``pysandbox run`` on a terminal).

The host terminal never reaches the command. Right before the exec, the sandbox's
setup (``native/psb_tail.h`` psb_tail_pty: the native child, or our bwrap init's ``-t``) opens a
pty in the devpts instance of the sandbox's minimal /dev (``newinstance``, its own
``ptmx``), makes the slave the controlling terminal of a new session led by the
command and its stdio, and sends the master here over a unix socket; it then closes
its copies, so the command holds neither the master nor any host descriptor of a
terminal (TIOCSTI on the host terminal is out of reach, not only filtered).

Here: :func:`run_in_terminal` (``plan.check_terminal`` checks the plan has that devpts),
which launches, puts the host terminal in raw mode (restored on every exit path:
normal end, exception, SIGTERM/SIGHUP to the launcher, the command killed), relays
bytes both ways, forwards window size changes (SIGWINCH -> TIOCSWINSZ on the master)
and suspends itself cleanly on SIGTSTP. Ctrl-C, Ctrl-Z and Ctrl-\\ are bytes to the
sandbox's pty, whose line discipline turns them into signals for the foreground job
inside, as in any terminal.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import socket
import struct
import subprocess
import termios
import time
import tty

from .errors import Reason, SetupError
from .fdrecv import receive
from .lifecycle import KILL_GRACE

MASTER_TIMEOUT = 30.0   # seconds to wait for the master once the command was executed
CHUNK = 65536
SIGNALS = (signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP,
           signal.SIGCONT, signal.SIGUSR1, signal.SIGUSR2)
TIOCGPTN = 0x80045430   # _IOR('T', 0x30, unsigned int): the pty number, from a master only
HANGUP = (signal.SIGTERM, signal.SIGHUP)   # the terminal goes away: hang up the sandbox's pty
TIMED_OUT = -1


def host_winsize(fds=(0, 1, 2)) -> tuple[int, int] | None:
    """(rows, cols) of the first terminal among ``fds``, or None."""
    for fd in fds:
        try:
            rows, cols, _x, _y = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
        except OSError:
            continue
        return rows, cols
    return None


def set_winsize(master: int, size: tuple[int, int] | None) -> None:
    """The pty's size (the kernel sends SIGWINCH to its foreground job when it changes)."""
    if size is not None:
        try:
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
        except OSError:
            pass


class HostTerminal:
    """The launcher's terminal (``fd``, or None when stdin is no terminal): raw while the
    sandbox runs; :meth:`restore` puts back the settings found, and may run any number
    of times."""

    def __init__(self, fd: int | None):
        self.fd = fd
        self.saved = termios.tcgetattr(fd) if fd is not None else None
        self.raw_now = False

    def raw(self) -> None:
        if self.fd is not None:
            tty.setraw(self.fd, termios.TCSANOW)
            self.raw_now = True

    def restore(self) -> None:
        if self.fd is not None and self.raw_now:
            try:
                termios.tcsetattr(self.fd, termios.TCSANOW, self.saved)
            except termios.error:
                pass
            self.raw_now = False


def receive_master(sock: socket.socket, timeout: float = MASTER_TIMEOUT) -> int:
    """The pty master the sandbox's setup sent before the exec.

    Raises:
        SetupError (terminal_unavailable): nothing came, or not a pty master.
    """
    sock.settimeout(timeout)
    try:
        msg, fds = receive(sock, 1, 1)   # close-on-exec (fdrecv.py)
    except (OSError, socket.timeout) as exc:
        raise SetupError(f"the sandbox's terminal: no pty master came from the setup ({exc})",
                         Reason.TERMINAL_UNAVAILABLE, stage="terminal") from None
    if msg != b"T" or not fds:
        for fd in fds:   # at most one: receive() closed any beyond it
            os.close(fd)
        raise SetupError("the sandbox's terminal: no pty master came from the setup",
                         Reason.TERMINAL_UNAVAILABLE, stage="terminal")
    master = fds[0]
    try:
        fcntl.ioctl(master, TIOCGPTN, b"\0" * 4)   # only a pty master answers
    except OSError:
        os.close(master)
        raise SetupError("the sandbox's terminal: the descriptor received is not a pty master",
                         Reason.TERMINAL_UNAVAILABLE, stage="terminal") from None
    os.set_inheritable(master, False)
    return master


def run_in_terminal(command, *, stdin: int = 0, stdout: int = 1, stderr: int = 2, timeout=None,
                    on_start=None, on_timeout=None, grace: float = KILL_GRACE, **popen_kwargs) -> int:
    """Run ``command`` (``pysandbox.Popen`` arguments in ``popen_kwargs``) with a
    terminal of its own, relayed to ``stdin``/``stdout``; returns its returncode
    (negative for a signal). ``stderr`` reaches the command as it is unless it is a
    terminal (then the pty is its stderr too). ``on_start(proc)`` is called once the
    command runs, ``on_timeout()`` when ``timeout`` passes (with the host terminal
    restored). After ``timeout`` seconds, or on SIGTERM/SIGHUP to the launcher, the
    pty is hung up and the signal (SIGTERM on timeout) goes to the command; it is
    killed with its sandbox ``grace`` seconds later if still running.

    Raises:
        the errors of ``pysandbox.Popen``; SetupError (terminal_unavailable).
    """
    from .process import Popen
    host = HostTerminal(stdin if os.isatty(stdin) else None)
    mask = 0b011 | (0b100 if os.isatty(stderr) else 0)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    got: list = []

    def note(signum, _frame):
        got.append(signum)

    # The wake-up: Python's C-level handler writes each signal to wake_w, whichever
    # thread the kernel picks (the bwrap backend has a helper thread: a signal taken
    # there does not interrupt the main thread's poll(), and note() alone would wait for
    # a bytecode that never comes). Set before the handlers, so none goes unannounced.
    previous_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    previous = {sig: signal.signal(sig, note) for sig in SIGNALS}
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    # The sandbox starts with /dev/null and a pipe in place of the host terminal (bwrap
    # then makes no /dev/console of it); the pipe carries what the sandbox's launch
    # itself says (bwrap's messages) to the host's stderr, the command has the pty.
    err_r, err_w = os.pipe2(os.O_CLOEXEC) if mask & 4 else (None, None)
    proc = master = None
    try:
        try:
            proc = Popen(command, stdin=devnull, stdout=devnull, stderr=err_w if mask & 4 else stderr,
                         pty_socket=theirs.fileno(), pty_stdio=mask,
                         pty_winsize=host_winsize((stdin, stdout, stderr)), **popen_kwargs)
        finally:
            if err_w is not None:
                os.close(err_w)
                err_w = None
        theirs.close()
        master = receive_master(ours)
        if on_start is not None:
            on_start(proc)
        hangup = _relay(proc, master, host, stdin, stdout, wake_r, got, timeout, (err_r, stderr))
        if hangup is None:
            return proc.wait()
        if hangup == TIMED_OUT:
            hangup = signal.SIGTERM
            if on_timeout is not None:
                on_timeout()
        os.close(master)   # the kernel hangs up the sandbox's pty: SIGHUP to its session
        master = None
        return _end(proc, hangup, grace)
    finally:
        host.restore()
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc is not None and proc.returncode is None and proc.poll() is None:
            proc.kill()   # an exception on the way: never leave the sandbox behind
            proc.wait()
        if err_r is not None:
            os.set_blocking(err_r, False)
            _drain(err_r, stderr)
        for fd in (master, devnull, wake_r, wake_w, err_r):
            if fd is not None:
                os.close(fd)
        ours.close()
        theirs.close()


def _relay(proc, master, host, stdin, stdout, wake_r, got, timeout, errs):
    """Relay until the sandbox ends (returns None) or must be hung up (returns the
    signal for the command). ``errs``: (the launch's stderr pipe or None, host stderr)."""
    os.set_blocking(master, False)
    err_r, stderr = errs
    if err_r is not None:
        os.set_blocking(err_r, False)
    live = True   # some slave descriptor is still open
    relay_input = True
    to_master = b""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):
        pidfd = None   # then poll the process every tenth of a second
    host.raw()
    hangup = None
    try:
        while True:
            poller = select.poll()
            poller.register(wake_r, select.POLLIN)
            if err_r is not None:
                poller.register(err_r, select.POLLIN)
            if pidfd is not None:
                poller.register(pidfd, select.POLLIN)
            if live:
                poller.register(master, select.POLLIN | (select.POLLOUT if to_master else 0))
            if relay_input and len(to_master) < CHUNK:
                poller.register(stdin, select.POLLIN)
            wait = None if pidfd is not None else 0.1
            if deadline is not None:
                left = max(deadline - time.monotonic(), 0)
                wait = left if wait is None else min(wait, left)
            events = dict(poller.poll(None if wait is None else wait * 1000))
            if err_r is not None and err_r in events and not _drain(err_r, stderr):
                err_r = None   # EOF: the launch's own processes are done with it
            if wake_r in events:
                hangup = _signals(proc, master if live else None, host, wake_r, got, stdin)
                if hangup is not None:
                    break
            if live and master in events:
                if events[master] & select.POLLOUT and to_master:
                    to_master = to_master[_write_some(master, to_master):]
                if events[master] & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    live = _drain(master, stdout)   # False: every slave descriptor is closed
            if relay_input and stdin in events:
                data = _read(stdin)
                if data:
                    to_master += data
                elif data is not None:
                    relay_input = False
                    if host.fd is None and live:   # piped input: EOF as the pty's VEOF
                        to_master += termios.tcgetattr(master)[6][termios.VEOF]
            if pidfd is not None and pidfd in events or pidfd is None and proc.poll() is not None:
                break
            if deadline is not None and time.monotonic() >= deadline:
                hangup = TIMED_OUT
                break
    finally:
        if pidfd is not None:
            os.close(pidfd)
        host.restore()
    if hangup is None and live:
        _drain(master, stdout)
    return hangup


def _end(proc, sig, grace) -> int:
    proc.forward_signal(sig)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _signals(proc, master, host, wake_r, got, stdin):
    """Act on the signals noted since last time; returns a hangup signal or None."""
    try:
        while os.read(wake_r, 512):
            pass
    except BlockingIOError:
        pass
    while got:
        sig = got.pop(0)
        if sig in HANGUP:
            return sig
        if sig == signal.SIGTSTP:
            # Stopped from outside (^Z is a byte to the pty in raw mode): give the
            # terminal back while stopped, take it again on resume.
            host.restore()
            os.kill(os.getpid(), signal.SIGSTOP)
            host.raw()
            if master is not None:
                set_winsize(master, host_winsize((stdin, 1, 2)))
        elif sig == signal.SIGCONT:
            if host.fd is not None:
                host.raw()
        elif sig == signal.SIGWINCH:
            if master is not None:
                set_winsize(master, host_winsize((stdin, 1, 2)))
        else:
            proc.forward_signal(sig)
    return None


def _read(fd: int) -> bytes | None:
    """Some bytes, b"" at EOF (or EIO: the terminal is gone), None when none are ready."""
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno == errno.EIO:
            return b""
        raise


def _drain(src: int, dst: int) -> bool:
    """Copy what ``src`` (non-blocking) has to ``dst``; False at its end (a pty master:
    once every slave is closed)."""
    while True:
        data = _read(src)
        if data is None:
            return True
        if not data:
            return False
        _write_all(dst, data)


def _write_some(fd: int, data: bytes) -> int:
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EIO):
                return   # nobody reads it any more (a closed pipe, a hung-up terminal): drop it
            raise
        view = view[n:]
