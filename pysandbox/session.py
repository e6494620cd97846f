"""Sessions: one sandbox, many commands, each at about the cost of a plain spawn.

``Sandbox(policy)`` launches the policy's sandbox once, on either backend, with our
session server (native/psb_session.c) as its pid 1, and keeps a unix socket to it.
``sb.run`` / ``sb.Popen`` send each command (argv, environment, working directory and
its descriptors, as SCM_RIGHTS) to the server, which starts it in a new session under
a keeper process of its own. The server runs after the sandbox's whole setup: it has
no capability, no_new_privs and the seccomp filters, like every command.

What the commands of one session share, by design: the file system (the workdir, the
sandbox's private /tmp), the uid, and the namespaces (one pid namespace: they can see
and signal each other). What they do not: processes. When a command ends, every
process it left behind (background jobs, setsid'd daemons) is killed before its exit
is reported, so the next command starts with none of them. A server that must outlive
a command is a command of its own: ``sb.Popen`` it and keep the handle.

``close()`` (or leaving the ``with``) closes the socket: the server exits and the
kernel kills every process of the sandbox. The session also dies with the launcher
(EOF on the socket, and PR_SET_PDEATHSIG). See docs/ARCHITECTURE.md, "Sessions".
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import socket
import subprocess
import threading
import time
import uuid

from . import plan as P
from . import session_proto as W
from ._popen import RemotePopen
from .backends import landlock
from .errors import NetworkModeUnsupported, PolicyError, Reason, SessionError
from .execpath import exec_candidates
from .lifecycle import KILL_GRACE, exited
from .memfd import ProgramUnavailable, program_fd
from .policy import Policy, check_fd
from .process import SandboxProcess, caller_directory, compiled, run_process
from .view import sandbox_cwd

START_TIMEOUT = 30.0   # seconds for the sandbox and its server to be ready
CLOSE_TIMEOUT = 5.0    # seconds for the sandbox to end once the socket is closed

_REFUSED = ("preexec_fn", "user", "group", "extra_groups", "shell", "executable", "umask",
            "process_group", "start_new_session")


class _Command:
    __slots__ = ("pid", "failed", "status")

    def __init__(self):
        self.pid = None
        self.failed = None
        self.status = None


class Channel:
    """The launcher's end of the socket to one server: sends frames, and turns events
    into per-command state. Any thread that waits reads the socket in turn (one at a
    time); the others wait on the condition."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.cv = threading.Condition()
        self.reading = False
        self.buf = bytearray()
        self.commands: dict[int, _Command] = {}
        self.ids = itertools.count(1)
        self.ready = False
        self.lost: SessionError | None = None
        self.send_lock = threading.Lock()
        self.external = False   # an event loop reads the socket (pysandbox/aio_session.py)

    def send(self, frame: bytes, fds=()) -> None:
        with self.send_lock:
            try:
                sent = socket.send_fds(self.sock, [frame], list(fds)) if fds else 0
                if sent < len(frame):
                    self.sock.sendall(frame[sent:])
            except OSError as exc:
                raise SessionError(f"the session's server is gone ({exc})", Reason.SESSION_LOST) from None

    def wait_for(self, done, timeout: float | None) -> bool:
        """Read events until ``done()`` (called under the condition) or ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cv:
            while not done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if self.lost is not None:
                    return done()
                if self.reading or self.external:
                    self.cv.wait(left)
                    continue
                self.reading = True
                self.cv.release()
                try:
                    events, lost = self.read_events(left)
                finally:
                    self.cv.acquire()
                    self.reading = False
                self._dispatch(events, lost)
                self.cv.notify_all()
            return True

    def read_events(self, timeout):
        try:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return [], None
            data = self.sock.recv(65536)
        except OSError as exc:
            return [], SessionError(f"the session's socket failed ({exc})", Reason.SESSION_LOST)
        if not data:
            return [], SessionError("the session's sandbox ended", Reason.SESSION_LOST)
        self.buf += data
        return W.parse_events(self.buf), None

    def _dispatch(self, events, lost):
        for ev in events:
            if ev.kind == W.READY:
                self.ready = True
                continue
            if ev.kind == W.ERROR:
                lost = SessionError(f"the session server stopped: {W.SERVER_ERRORS.get(ev.a, ev.a)}",
                                    Reason.SESSION_UNAVAILABLE)
                continue
            cmd = self.commands.get(ev.id)
            if cmd is None:
                continue
            if ev.kind == W.STARTED:   # a repeat (native/psb_session.c) carries the same pid
                cmd.pid = ev.a
            elif ev.kind == W.FAILED:
                cmd.failed = ev
            elif ev.kind == W.EXITED:
                cmd.status = ev.a
                del self.commands[ev.id]
        if lost is not None and self.lost is None:
            self.lost = lost
            for cmd in self.commands.values():   # the sandbox is gone, and they with it
                if cmd.pid is None and cmd.failed is None:
                    cmd.failed = W.Event(W.FAILED, 0, 0, 0)
                cmd.status = signal.SIGKILL
            self.commands.clear()


class _RemoteChild:
    """A session command, as the Popen adapter sees it. ``on_close`` is called once,
    when its exit status has been collected (the pool discards its sandbox there)."""

    on_close = None

    def __init__(self, channel: Channel, cid: int, cmd: _Command, argv0: str, cwd: str):
        self.channel, self.cid, self.cmd = channel, cid, cmd
        self.argv0, self.cwd = argv0, cwd
        self.pid = cmd.pid

    def started(self) -> int:
        """The command's pid once its STARTED came (the caller waited for it or for FAILED).

        Raises:
            SessionError (session_lost): the sandbox ended before the command started.
            OSError: the command could not be started (as subprocess raises it).
        """
        ch, cmd = self.channel, self.cmd
        if cmd.failed is not None:
            with ch.cv:
                ch.commands.pop(self.cid, None)
            if ch.lost is not None and cmd.failed.a == 0:
                raise SessionError(f"the session is lost: {ch.lost}", Reason.SESSION_LOST)
            raise W.failure(cmd.failed, self.argv0, self.cwd)
        self.pid = cmd.pid
        return self.pid

    def returncode(self, status: int) -> int:
        return os.waitstatus_to_exitcode(status)

    def wait_status(self, timeout):
        """The raw wait status, None while it runs. A quiet command (Sandbox.run) learns
        here that it could not start: raised as ``started`` raises it."""
        cmd = self.cmd
        if cmd.status is None:
            self.channel.wait_for(lambda: cmd.status is not None or cmd.failed is not None, timeout)
        if cmd.status is None and cmd.failed is not None:
            cmd.status = 127 << 8   # raised once, below; a later poll (__exit__, __del__) sees it ended
            self.started()
        return cmd.status

    def signal(self, sig: int) -> None:
        if self.cmd.status is None and self.channel.lost is None:
            try:
                self.channel.send(W.signal_frame(self.cid, sig))
            except SessionError:
                pass

    def close(self):
        hook, self.on_close = self.on_close, None
        if hook is not None:
            hook()


class SessionProcess(RemotePopen):
    """A command of a session, with the interface of :class:`subprocess.Popen`.

    ``pid`` is the command's pid inside the sandbox. ``send_signal``/``terminate`` reach
    the command; ``kill()`` ends it and every process it made (setsid'd ones too).
    ``cwd`` is a path inside the sandbox (default: the policy's working directory; with no
    policy, the caller's directory when the command is run, where the sandbox shows it).

    Raises:
        PolicyError: a refused argument (the policy decides users, umask, ...).
        SessionError: the session is closed or lost.
        FileNotFoundError, PermissionError, ...: the command or ``cwd`` cannot be used,
            as subprocess raises them.
    """

    def __init__(self, session: "Sandbox", args, *, cwd=None, env=None, pass_fds=(), _deferred=False,
                 _quiet=False, **kwargs):
        for bad in _REFUSED:
            if kwargs.get(bad) not in (None, False):
                raise PolicyError(f"{bad}= is decided by the policy in a sandbox", Reason.CONFLICTING_OPTIONS, bad)
            kwargs.pop(bad, None)
        if kwargs.pop("close_fds", True) is not True:
            raise PolicyError("close_fds= is decided by the policy in a sandbox", Reason.CONFLICTING_OPTIONS,
                              "close_fds")
        if isinstance(args, (str, bytes, os.PathLike)):
            args = [args]
        argv = [os.fsdecode(a) for a in args]
        if not argv or not argv[0]:
            raise PolicyError("empty command", Reason.INVALID_VALUE, args)
        self.session = session
        self._cwd = session.sandbox_path(cwd)
        self._env = session.command_env(env)
        self._env["PWD"] = self._cwd
        self._fds = tuple(sorted(set(session.policy.pass_fds) | {check_fd(fd, "pass_fds entry") for fd in pass_fds}))
        # deferred (asyncio): the constructor returns once the command was sent; the
        # caller awaits its STARTED (``session.started``) before using ``pid``.
        self._deferred = _deferred
        # quiet (Sandbox.run): no STARTED at all; the command's end, or its failure to
        # start, comes with wait (one event, one wake-up of this thread); pid stays None.
        self._quiet = _quiet
        super().__init__(argv, **kwargs)

    def _start_child(self, argv, stdin, stdout, stderr):
        return self.session._spawn(argv, self._cwd, self._env, [stdin, stdout, stderr, *self._fds],
                                   [0, 1, 2, *self._fds], wait=not (self._deferred or self._quiet),
                                   quiet=self._quiet)

    def forward_signal(self, sig) -> None:
        """As :meth:`pysandbox.SandboxProcess.forward_signal`: ``sig`` to the command."""
        self.send_signal(sig)

    @property
    def backend_name(self) -> str:
        return self.session.backend_name


class Sandbox:
    """A live sandbox that runs many commands; see the module's docstring.

    Raises (from the constructor):
        PolicyError: invalid policy; a policy without a pid namespace; a policy with
            ``limits`` (``conflicting_options``: resource limits are per one-shot launch).
        NetworkModeUnsupported (network_mode_unsupported): network ``proxy``, one-shot
            only (run/Popen/aio) for now: a session's commands would need the proxy
            variables and its events per command (docs/ARCHITECTURE.md).
        BackendUnavailable, CapabilityUnavailable, SetupError: as a one-shot launch.
        SessionError (session_unavailable): the server cannot run here (no native module
            to carry it, no procfs at /proc) or did not become ready.
    """

    def __init__(self, policy: Policy | None = None, backend: str = "auto", *,
                 start_timeout: float = START_TIMEOUT, caller_directory: bool | None = None):
        # With no policy a command starts where the caller is when it is run, as with
        # subprocess (process.caller_directory); caller_directory=True asks for that rule
        # with a default policy made elsewhere (a Pool's).
        self._caller_start = policy is None if caller_directory is None else bool(caller_directory)
        self.policy = policy if policy is not None else Policy.default()
        if "pid" not in self.policy.namespaces:
            raise PolicyError("a session needs a pid namespace (its server is the pid 1 that ends every "
                              "command's descendants)", Reason.CONFLICTING_OPTIONS, "namespaces")
        if self.policy.limits is not None:
            # Not applied to the whole session: one cgroup and one deadline for every command
            # would be a shared budget no command asked for, and rlimits would bind the server.
            raise PolicyError("resource limits apply to one-shot launches (run, Popen), not to sessions or "
                              "pools: launch the command with the policy instead", Reason.CONFLICTING_OPTIONS,
                              "limits", field="limits")
        if self.policy.network.mode == "proxy":
            raise NetworkModeUnsupported("network mode 'proxy' runs one-shot sandboxes (run, Popen, aio), not "
                                         "sessions or pools yet", Reason.NETWORK_MODE_UNSUPPORTED)
        self.plan = compiled(self.policy)
        ops = self.plan.mount_ops
        if not any(isinstance(op, P.MountProc) and op.dest == "/proc" and not P.shadowed(i, ops)
                   for i, op in enumerate(ops)):
            raise SessionError("a session's server is exec'd through /proc/self/fd and ends a command's "
                               "descendants through /proc: the policy needs Proc('/proc')",
                               Reason.SESSION_UNAVAILABLE)
        self.id = "psb-" + uuid.uuid4().hex[:12]
        self._env_cache = None
        try:
            memfd = program_fd("psb-session", "psb_session_blob")
        except ProgramUnavailable as exc:
            raise SessionError(f"the session server: {exc}", Reason.SESSION_UNAVAILABLE) from None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.channel = Channel(ours)
        self._closed = False
        self._server = None
        launch = self.policy.replace(as_pid_1=True, pass_fds=())
        try:
            # -L KIND: each command's Landlock domain (backends/landlock.py), by the rule
            # of Plan.command_may_mount read off the policy; none: no -L.
            ll = landlock.kind(P.command_may_mount(launch.allow_nested_userns, launch.caps_keep))
            server = [f"/proc/self/fd/{memfd}", str(theirs.fileno()), str(memfd)] + (["-L", str(ll)] if ll else [])
            self._server = SandboxProcess(server,
                                          policy=launch, backend=backend, pass_fds=(memfd, theirs.fileno()),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except BaseException:
            self._closed = True
            ours.close()
            raise
        finally:
            theirs.close()
        self.backend_name = self._server.backend_name
        if not self.channel.wait_for(lambda: self.channel.ready, start_timeout):
            why = self.channel.lost
            self.close()
            code = self._server.returncode
            raise SessionError(f"the session server did not become ready ({why or 'timed out'}; "
                               f"the sandbox's exit status: {code})", Reason.SESSION_UNAVAILABLE)

    def command_env(self, env) -> dict:
        """A command's environment: ``env`` (None: os.environ) with the policy's edits.
        For os.environ the result is reused while os.environ is unchanged (compared by
        its underlying bytes mapping: one C-level dict comparison per command)."""
        if env is not None:
            return self.policy.env.apply({os.fsdecode(k): os.fsdecode(v) for k, v in env.items()})
        data = getattr(os.environ, "_data", None)
        cached = self._env_cache
        if data is not None and cached is not None and cached[0] == data:
            return dict(cached[1])
        applied = self.policy.env.apply(os.environ)
        if data is not None:
            self._env_cache = (dict(data), dict(applied))
        return applied

    def sandbox_path(self, cwd) -> str:
        """``cwd`` as an absolute path inside the sandbox (relative: to the policy's
        working directory; None: that directory)."""
        if cwd is None:
            return caller_directory(self.plan).chdir if self._caller_start else self.plan.chdir
        return sandbox_cwd(cwd, self.plan.chdir)

    def _spawn(self, argv, cwd, env, fds, targets, wait: bool = True, quiet: bool = False) -> _RemoteChild:
        ch = self.channel
        if self._closed:
            raise SessionError("the session is closed", Reason.SESSION_CLOSED)
        if ch.lost is not None:
            raise SessionError(f"the session is lost: {ch.lost}", Reason.SESSION_LOST)
        try:
            frame_args = (cwd, exec_candidates(argv[0], env.get("PATH"), cwd), argv, env, targets)
            cid = next(ch.ids)
            frame = W.spawn_frame(cid, *frame_args, quiet=quiet)
        except ValueError as exc:
            raise PolicyError(str(exc), Reason.INVALID_VALUE, argv) from None
        cmd = _Command()
        with ch.cv:
            ch.commands[cid] = cmd
        ch.send(frame, fds)
        child = _RemoteChild(ch, cid, cmd, argv[0], cwd)
        if wait:
            ch.wait_for(lambda: cmd.pid is not None or cmd.failed is not None, None)
            child.started()
        return child

    def warm(self) -> None:
        """Do now what the first command would pay for once (a pool does it while staging):
        the launcher's environment for os.environ (command_env's cache), and the server's
        first keeper and command (page faults of a first fork): a command that cannot start,
        the directory ``/`` as a program (EACCES in every sandbox, no exec happens), which
        leaves nothing behind.

        Raises:
            SessionError: the session is closed or lost.
        """
        self.command_env(None)
        try:
            self._spawn(["/"], "/", {}, [], [], wait=True)
        except OSError:
            pass

    def Popen(self, args, **kwargs) -> SessionProcess:
        """Start ``args`` in this sandbox; see :class:`SessionProcess`."""
        return SessionProcess(self, args, **kwargs)

    def run(self, args, *, input=None, capture_output: bool = False, timeout: float | None = None,
            check: bool = False, kill_grace: float = KILL_GRACE, **kwargs) -> subprocess.CompletedProcess:
        """Run ``args`` in this sandbox and wait, as :func:`pysandbox.run`: a timeout
        sends SIGTERM, and ``kill_grace`` seconds later ends the command and all its
        descendants; the session lives on."""
        return run_process(lambda **kw: SessionProcess(self, args, _quiet=True, **kw), input=input,
                           capture_output=capture_output, timeout=timeout, check=check,
                           kill_grace=kill_grace, kwargs=kwargs)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """End every process of the sandbox; nothing of it is left on the host."""
        if self._closed:
            return
        self._closed = True
        try:
            self.channel.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.channel.sock.close()
        if self._server is None:
            return
        try:
            if self._server.returncode is None:
                exited(self._server.pid, CLOSE_TIMEOUT)
            self._server.wait(timeout=CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        with self.channel.cv:
            if self.channel.lost is None:
                self.channel._dispatch([], SessionError("the session is closed", Reason.SESSION_CLOSED))
            self.channel.cv.notify_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if not getattr(self, "_closed", True):
            self.close()
