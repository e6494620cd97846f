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

import os
import signal
import socket
import subprocess
import uuid
from typing import NamedTuple

from . import plan as P
from . import session_proto as W
from . import session_proxy, session_run
from ._popen import RemotePopen
from .backends import landlock
from .environment import EnvCache
from .errors import PolicyError, Reason, SessionError
from .execpath import exec_candidates
from .lifecycle import KILL_GRACE, exited
from .memfd import ProgramUnavailable, program_fd
from .policy import Policy, check_fd
from .process import SandboxProcess, caller_directory, compiled, run_process
from .session_channel import Channel, Command, RemoteChild
from .session_limits import Budget, CommandLimits, send_spawn
from .view import sandbox_cwd

START_TIMEOUT = 30.0   # seconds for the sandbox and its server to be ready
CLOSE_TIMEOUT = 5.0    # seconds for the sandbox to end once the socket is closed

# The sessions' environments, shared by every session of this process as one-shot launches
# share theirs (pysandbox/sandbox_start.py): a new session's first command does not filter
# os.environ again (its secrets test: about 40 us for 35 variables).
_ENV = EnvCache()


class CommandSpec(NamedTuple):
    """One command of a session, ready to send (:meth:`Sandbox.command_spec`)."""
    argv: list
    cwd: str
    env: dict
    env_key: object
    fds: tuple
    limits: object


_REFUSED = ("preexec_fn", "user", "group", "extra_groups", "shell", "executable", "umask",
            "process_group", "start_new_session")


class SessionProcess(RemotePopen):
    """A command of a session, with the interface of :class:`subprocess.Popen`.

    ``pid`` is the command's pid inside the sandbox. ``send_signal``/``terminate`` reach
    the command; ``kill()`` ends it and every process it made (setsid'd ones too).
    ``cwd`` is a path inside the sandbox (default: the policy's working directory; with no
    policy, the caller's directory when the command is run, where the sandbox shows it).
    ``limits`` (a :class:`pysandbox.Limits`) narrows the session's rlimits and wall time
    for this command; ``limit`` names the limit that ended it (pysandbox/session_limits.py).

    Raises:
        PolicyError: a refused argument (the policy decides users, umask, ...).
        LimitUnavailable: its own memory or pids limit cannot be a cgroup here.
        SetupError (setup_failed, stage rlimit): the kernel refused one of its rlimits.
        SessionError: the session is closed or lost.
        FileNotFoundError, PermissionError, ...: the command or ``cwd`` cannot be used,
            as subprocess raises them.
    """

    def __init__(self, session: "Sandbox", args, *, cwd=None, env=None, pass_fds=(), limits=None,
                 _deferred=False, _quiet=False, **kwargs):
        for bad in _REFUSED:
            if kwargs.get(bad) not in (None, False):
                raise PolicyError(f"{bad}= is decided by the policy in a sandbox", Reason.CONFLICTING_OPTIONS, bad)
            kwargs.pop(bad, None)
        if kwargs.pop("close_fds", True) is not True:
            raise PolicyError("close_fds= is decided by the policy in a sandbox", Reason.CONFLICTING_OPTIONS,
                              "close_fds")
        self.session = session
        spec = session.command_spec(args, cwd, env, pass_fds, limits)
        # network proxy mode: this command's credential and record (pysandbox/session_proxy.py)
        self.proxy = session_proxy.command_proxy(session, spec.env, kwargs)
        # the encoded environment is reused by its key: only while env is the key's plus PWD
        self._spec = spec if self.proxy is None else spec._replace(env_key=None)
        # deferred (asyncio): the constructor returns once the command was sent; the
        # caller awaits its STARTED (``session.started``) before using ``pid``.
        self._deferred = _deferred
        # quiet (Sandbox.run): no STARTED at all; the command's end, or its failure to
        # start, comes with wait (one event, one wake-up of this thread); pid stays None.
        self._quiet = _quiet
        try:
            super().__init__(spec.argv, **kwargs)
        except BaseException:
            if self.proxy is not None:
                self.proxy.revoke()   # never started: its credential with it
            raise

    def _start_child(self, argv, stdin, stdout, stderr):
        child = self.session.start_command(self._spec, (stdin, stdout, stderr),
                                           wait=not (self._deferred or self._quiet), quiet=self._quiet)
        session_proxy.attach(self.proxy, child)
        return child

    @property
    def limit(self) -> str | None:
        """The resource limit that ended the command (pysandbox/session_limits.py), or
        None; known once its exit was collected."""
        return getattr(self._child, "limit", None)

    def forward_signal(self, sig) -> None:
        """As :meth:`pysandbox.SandboxProcess.forward_signal`: ``sig`` to the command."""
        self.send_signal(sig)

    @property
    def backend_name(self) -> str:
        return self.session.backend_name

    @property
    def settle(self):
        """None, or (once the command ended, while its ``denials``/``proxy`` records are
        still being completed) a callable that waits until they are, so reading them does
        not block: pysandbox/aio_process.py runs it off the event loop."""
        if self.session.observer is None and self.proxy is None:
            return None
        return self._settle

    def _settle(self) -> None:
        self.denials
        if self.proxy is not None:
            self.proxy.counts

    @property
    def denials(self):
        """What the sandbox refused this command (``report_denials``; pysandbox/denials.py):
        the processes of its session (a descendant that made a session of its own is
        counted in :attr:`Sandbox.denials` instead), once it exited; else None."""
        observer = self.session.observer
        if observer is None or self.pid is None or self.poll() is None:
            return None
        if getattr(self, "_denials", None) is None:
            self._denials = observer.take(self.pid)
        return self._denials


class Sandbox:
    """A live sandbox that runs many commands; see the module's docstring.

    Raises (from the constructor):
        PolicyError: invalid policy; a policy without a pid namespace
            (``report_denials`` is per command: ``result.denials``, pysandbox/denials.py).
        LimitUnavailable: a memory or pids limit of ``policy.limits`` (the whole
            session's budget, pysandbox/session_limits.py) cannot be enforced here.
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
        self.budget = Budget(self.policy.limits)   # memory/pids: the session's; the rest: each command's
        # network proxy mode: one engine for the session, a credential per command
        self.egress = session_proxy.for_policy(self.policy)
        self.plan = compiled(self.policy)
        ops = self.plan.mount_ops
        if not any(isinstance(op, P.MountProc) and op.dest == "/proc" and not P.shadowed(i, ops)
                   for i, op in enumerate(ops)):
            raise SessionError("a session's server is exec'd through /proc/self/fd and ends a command's "
                               "descendants through /proc: the policy needs Proc('/proc')",
                               Reason.SESSION_UNAVAILABLE)
        self.id = "psb-" + uuid.uuid4().hex[:12]
        self._env_cache = _ENV   # shared: a pool's fresh sandboxes find os.environ filtered already
        self._env_encoder = W.EnvEncoder()   # the last environment's encoded strings, by _env_cache's key
        self._chdir = self.plan.chdir
        try:
            memfd = program_fd("psb-session", "psb_session_blob")
        except ProgramUnavailable as exc:
            raise SessionError(f"the session server: {exc}", Reason.SESSION_UNAVAILABLE) from None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.channel = Channel(ours)
        self._closed = False
        self._server = None
        launch = self.policy.replace(as_pid_1=True, pass_fds=(), limits=self.budget.server_limits())
        try:
            # -L KIND [PATH...]: each command's Landlock domain (backends/landlock.py), by
            # the rule of Plan.command_may_mount read off the policy, with the writable
            # destinations a filesystem domain grants writing beneath; none: no -L.
            ll = landlock.kind(P.command_may_mount(launch.allow_nested_userns, launch.caps_keep))
            paths = list(landlock.writable_destinations(self.plan.ops)) if ll not in (landlock.NONE, landlock.SIGNAL) else []
            server = [f"/proc/self/fd/{memfd}", str(theirs.fileno()), str(memfd)] + \
                (["-L", str(ll)] + paths if ll else [])
            self._server = SandboxProcess(server, _session_server=True,
                                          policy=launch, backend=backend, pass_fds=(memfd, theirs.fileno()),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          **session_proxy.launch_kwargs(self.egress))
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
        For os.environ the result is reused while os.environ is unchanged
        (pysandbox/environment.py ``EnvCache``)."""
        return self._env_cache.apply(self.policy.env, env)

    def command_env_keyed(self, env) -> tuple[dict, object | None]:
        """:meth:`command_env` and its key for the session's encoded environment
        (``EnvCache.keyed``; None: not reused)."""
        return self._env_cache.keyed(self.policy.env, env)

    @property
    def observer(self):
        """The denial observer of the whole session (``report_denials``), or None."""
        return None if self._server is None else self._server.observer

    @property
    def denials(self):
        """``report_denials``: what the sandbox refused that no command's result took (a
        process that made a session of its own, the server); None without the option."""
        observer = self.observer
        return None if observer is None else observer.denials

    def sandbox_path(self, cwd) -> str:
        """``cwd`` as an absolute path inside the sandbox (relative: to the policy's
        working directory; None: that directory)."""
        if cwd is None:
            return caller_directory(self.plan).chdir if self._caller_start else self._chdir
        return sandbox_cwd(cwd, self._chdir)

    def command_spec(self, args, cwd=None, env=None, pass_fds=(), limits=None) -> CommandSpec:
        """What one command is sent with: its argv, working directory, environment (with
        its ``PWD`` and the key of its encoding), passed descriptors and limits.

        Raises:
            PolicyError: an empty command, a bad ``pass_fds`` entry or ``limits``.
        """
        if type(args) is not list and isinstance(args, (str, bytes, os.PathLike)):
            args = [args]
        argv = [a if type(a) is str else os.fsdecode(a) for a in args]
        if not argv or not argv[0]:
            raise PolicyError("empty command", Reason.INVALID_VALUE, args)
        if limits is not None or self.budget.limits is not None:
            limits = self.budget.command(limits)   # the session's, narrowed (session_limits.py)
        cwd = self._chdir if cwd is None and not self._caller_start else self.sandbox_path(cwd)
        env, env_key = self.command_env_keyed(env)
        env["PWD"] = cwd
        fds = self.policy.pass_fds
        if fds or pass_fds:
            fds = tuple(sorted(set(fds) | {check_fd(fd, "pass_fds entry") for fd in pass_fds}))
        return CommandSpec(argv, cwd, env, env_key, fds, limits)

    def start_command(self, spec: CommandSpec, stdio, *, wait: bool = True, quiet: bool = False) -> RemoteChild:
        """Send ``spec`` with ``stdio`` (its descriptors 0, 1, 2) to the server. ``wait``:
        return once it started (raising as subprocess does when it could not);
        ``quiet``: no STARTED comes, its failure to start comes with its end
        (``RemoteChild.wait_status``).

        Raises:
            SessionError: the session is closed or lost.
            PolicyError (invalid_value): a NUL in a string, a frame too large.
            LimitUnavailable: its own memory or pids limit cannot be a cgroup here.
        """
        fds = spec.fds
        return self._spawn(spec.argv, spec.cwd, spec.env, [*stdio, *fds], [0, 1, 2, *fds], wait=wait, quiet=quiet,
                           limits=spec.limits, env_key=spec.env_key)

    def _spawn(self, argv, cwd, env, fds, targets, wait: bool = True, quiet: bool = False,
               limits=None, env_key=None) -> RemoteChild:
        ch = self.channel
        if self._closed:
            raise SessionError("the session is closed", Reason.SESSION_CLOSED)
        if ch.lost is not None:
            raise SessionError(f"the session is lost: {ch.lost}", Reason.SESSION_LOST)
        try:
            frame_args = (cwd, exec_candidates(argv[0], env.get("PATH"), cwd), argv, env, targets)
            cid = next(ch.ids)
            frame = W.spawn_frame(cid, *frame_args, quiet=quiet, encoder=self._env_encoder, env_key=env_key)
        except ValueError as exc:
            raise PolicyError(str(exc), Reason.INVALID_VALUE, argv) from None
        cmd = Command()
        child = RemoteChild(ch, cid, cmd, argv[0], cwd)
        if limits is not None:
            cmd.limits = CommandLimits(limits, self._server.cgroups, lambda: child.signal(signal.SIGKILL), cid)
        with ch.cv:
            ch.commands[cid] = cmd
        send_spawn(ch, cid, frame, fds, cmd.limits)
        if wait:
            ch.wait_for(lambda: cmd.pid is not None or cmd.failed is not None, None)
            child.started()
        return child

    def warm(self) -> None:
        """Do now what the first command would pay for once (a pool does it while staging):
        the launcher's environment for os.environ (command_env's cache). The server's side
        needs nothing: it forks each next command's keeper while it waits, from its start
        on (native/psb_session.c, arm), so a first command costs what a later one does.

        Raises:
            SessionError: the session is closed or lost.
        """
        if self._closed:
            raise SessionError("the session is closed", Reason.SESSION_CLOSED)
        if self.channel.lost is not None:
            raise SessionError(f"the session is lost: {self.channel.lost}", Reason.SESSION_LOST)
        self.command_env(None)

    def Popen(self, args, **kwargs) -> SessionProcess:
        """Start ``args`` in this sandbox; see :class:`SessionProcess`."""
        return SessionProcess(self, args, **kwargs)

    def run(self, args, *, input=None, capture_output: bool = False, timeout: float | None = None,
            check: bool = False, kill_grace: float = KILL_GRACE, **kwargs) -> subprocess.CompletedProcess:
        """Run ``args`` in this sandbox and wait, as :func:`pysandbox.run`: a timeout
        sends SIGTERM, and ``kill_grace`` seconds later ends the command and all its
        descendants; the session lives on."""
        # quiet unless report_denials: a command's denials are found by its pid (STARTED)
        quiet = not self.policy.report_denials
        if quiet and input is None and self.egress is None and session_run.OPTIONS.issuperset(kwargs):
            # no Popen object where nothing needs one (pysandbox/session_run.py)
            return session_run.run(self, args, capture_output, timeout, check, kill_grace, **kwargs)
        return run_process(lambda **kw: SessionProcess(self, args, _quiet=quiet, **kw), input=input,
                           capture_output=capture_output, timeout=timeout, check=check,
                           kill_grace=kill_grace, kwargs=kwargs)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def proxy(self):
        """Network proxy mode: the session's :class:`pysandbox.egress.Egress`, whose
        ``counts``/``events`` are the connections attributed to no command (no valid
        credential: pysandbox/session_proxy.py); None in other modes."""
        return None if self._server is None else self._server.proxy

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
                self.channel.dispatch([], SessionError("the session is closed", Reason.SESSION_CLOSED))
            self.channel.cv.notify_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if not getattr(self, "_closed", True):
            self.close()
