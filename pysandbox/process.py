"""The public process API: ``Popen``, ``run``, following :mod:`subprocess`.

``SandboxProcess`` is a :class:`subprocess.Popen` whose child is started by a
backend instead of fork/exec, so pipes, ``communicate``, ``wait(timeout)`` and the
context manager behave exactly as in subprocess. The pid it holds is the
sandbox's outermost process: killing it ends every process of the sandbox.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import threading

from . import plan as _plan
from .backends import select_backend
from .backends.base import Launch
from .policy import Policy, check_fd
from .errors import PolicyError, Reason

# subprocess names, re-exported so callers need one import
PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT
CompletedProcess = subprocess.CompletedProcess
CalledProcessError = subprocess.CalledProcessError
TimeoutExpired = subprocess.TimeoutExpired

KILL_GRACE = 2.0   # seconds between SIGTERM to the command and SIGKILL to the sandbox
from .execpath import DEFAULT_PATH  # noqa: E402 - defined once, in execpath
# A timeout or kill ends the sandbox with SIGKILL on its outermost process; the
# pid namespace takes every descendant with it.

_plan_cache: dict = {}
_plan_by_id: dict = {}
_plan_lock = threading.Lock()


def compiled(policy: Policy, allow_host_mountpoints: bool = False) -> _plan.Plan:
    """The plan of ``policy``, compiled once per process (policies are hashable).
    ``allow_host_mountpoints`` is for bwrap_compat only (bwrap's semantics).

    The same Policy object launched again is found by identity, without hashing
    it (a frozen dataclass rehashes every field on each call: 0.1-0.2 ms with a
    thousand binds); an equal but distinct Policy is found by value."""
    ident = (id(policy), allow_host_mountpoints)
    seen = _plan_by_id.get(ident)
    if seen is not None and seen[0] is policy:
        return seen[1]
    try:
        hash(policy)
    except TypeError:
        return _plan.compile(policy, allow_host_mountpoints=allow_host_mountpoints)
    key = (policy, allow_host_mountpoints)
    with _plan_lock:
        got = _plan_cache.get(key)
    if got is None:
        got = _plan.compile(policy, allow_host_mountpoints=allow_host_mountpoints)
    with _plan_lock:
        if len(_plan_cache) > 256:
            _plan_cache.clear()
            _plan_by_id.clear()
        _plan_cache[key] = got
        # The entry holds the policy itself, so its id cannot be reused while it is here.
        _plan_by_id[ident] = (policy, got)
    return got


class SandboxProcess(subprocess.Popen):
    """A sandboxed command, with the interface of :class:`subprocess.Popen`.

    Accepts Popen's stdio, ``env``, ``pass_fds``, ``text``/``encoding`` and
    ``bufsize`` arguments. ``cwd``, ``preexec_fn``, ``user``, ``group`` and
    ``shell`` are refused: the policy decides those. ``on_start(pid)`` is called
    (on another thread, before the constructor returns) with the host pid of the
    sandbox's first process as soon as it exists: with ``policy.userns_block_fd``
    that is the process whose ``uid_map``/``gid_map`` the caller writes.
    ``close_in_setup``: descriptors the sandbox's setup process closes before its
    first step (native; a pipe whose reader must see EOF while the setup waits).

    Raises:
        PolicyError: invalid policy or arguments.
        BackendUnavailable: the backend cannot run here (bwrap_not_found, ...).
        CapabilityUnavailable: the host lacks an isolation the policy needs.
        SetupError: a setup step failed; the command never ran.
        FileNotFoundError, PermissionError: the command cannot be executed.
    """

    def __init__(self, args, *, policy: Policy | None = None, backend: str = "auto",
                 env=None, pass_fds=(), allow_host_mountpoints: bool = False, on_start=None,
                 close_in_setup=(), **kwargs):
        for bad in ("cwd", "preexec_fn", "user", "group", "extra_groups", "shell", "executable",
                    "umask", "process_group", "start_new_session", "close_fds"):
            if kwargs.get(bad) not in (None, False) and not (bad == "close_fds" and kwargs[bad] is True):
                raise PolicyError(f"{bad}= is decided by the policy in a sandbox", Reason.CONFLICTING_OPTIONS, bad)
            kwargs.pop(bad, None)
        if isinstance(args, (str, bytes, os.PathLike)):
            args = [args]
        argv = [os.fsdecode(a) for a in args]
        if not argv or not argv[0]:
            raise PolicyError("empty command", Reason.INVALID_VALUE, args)
        if any("\x00" in a for a in argv):
            raise PolicyError("command arguments must not contain NUL", Reason.INVALID_VALUE, argv)
        self.policy = policy if policy is not None else Policy.default()
        self.plan = compiled(self.policy, allow_host_mountpoints)
        self.backend = select_backend(backend, self.plan)
        base_env = os.environ if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}
        self._sandbox_env = self.policy.env.apply(base_env)
        # As bubblewrap does after its chdir: PWD names the sandbox's working directory.
        chdir = self.plan.first(_plan.Chdir)
        self._sandbox_env["PWD"] = chdir.path if chdir is not None else "/"
        self._sandbox_pass_fds = tuple(sorted(set(self.policy.pass_fds) | set(pass_fds)))
        if on_start is not None and not callable(on_start):
            raise PolicyError("on_start must be callable", Reason.INVALID_VALUE, on_start)
        self._on_start = on_start
        self._close_in_setup = tuple(check_fd(fd, "close_in_setup entry") for fd in close_in_setup)
        self._child = None
        super().__init__(argv, pass_fds=(), **kwargs)

    # Popen calls this with its prepared pipe ends; the first 16 parameters are stable
    # since Python 3.2, the rest (restore_signals, ids, session) we refuse or ignore.
    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                       errread, errwrite, *_ignored):
        launch = Launch(argv=list(args), env=self._sandbox_env,
                        stdin=p2cread if p2cread != -1 else 0,
                        stdout=c2pwrite if c2pwrite != -1 else 1,
                        stderr=errwrite if errwrite != -1 else 2,
                        pass_fds=self._sandbox_pass_fds, on_start=self._on_start,
                        close_in_setup=self._close_in_setup)
        try:
            self._child = self.backend.spawn(self.plan, launch)
            self.pid = self._child.pid
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _handle_exitstatus(self, sts, *_a, **_k):
        child = self._child
        if child is None:
            return super()._handle_exitstatus(sts)
        self.returncode = child.returncode(sts)
        child.close()

    def send_signal(self, sig):
        """Deliver ``sig`` to the sandboxed command (as subprocess does to its child).

        SIGKILL goes to the sandbox's outermost process and so ends every process in
        it; other signals reach the command itself, through the backend where its
        pid 1 does not forward them (bwrap)."""
        forward = getattr(self._child, "forward_signal", None)
        if sig == signal.SIGKILL:
            # The backend's pid 1 first where it has one the command cannot outlive by
            # clearing its own PR_SET_PDEATHSIG (bwrap: our init, or the as_pid_1 command).
            kill_sandbox = getattr(self._child, "kill_sandbox", None)
            if kill_sandbox is not None and self.returncode is None:
                kill_sandbox()
            return super().send_signal(sig)
        if forward is None:
            return super().send_signal(sig)
        self.poll()
        if self.returncode is None:
            try:
                forward(sig)
            except ProcessLookupError:
                pass

    @property
    def backend_name(self) -> str:
        return self.backend.name


def Popen(args, *, policy: Policy | None = None, backend: str = "auto", **kwargs) -> SandboxProcess:
    """Start ``args`` in a sandbox; see :class:`SandboxProcess`.

    Raises:
        PolicyError, BackendUnavailable, CapabilityUnavailable, SetupError,
        FileNotFoundError, PermissionError: as :class:`SandboxProcess`.
    """
    return SandboxProcess(args, policy=policy, backend=backend, **kwargs)


def run(args, *, policy: Policy | None = None, backend: str = "auto", input=None,
        capture_output: bool = False, timeout: float | None = None, check: bool = False,
        kill_grace: float = KILL_GRACE, **kwargs) -> CompletedProcess:
    """Run ``args`` in a sandbox and wait for it, as :func:`subprocess.run`.

    When ``timeout`` passes, the command gets SIGTERM; if it has not exited
    ``kill_grace`` seconds later the whole sandbox is killed (SIGKILL). Either way
    every descendant dies with the sandbox, and TimeoutExpired is raised.

    Raises:
        TimeoutExpired: the timeout passed; the sandbox is gone.
        CalledProcessError: ``check`` and a non-zero returncode.
        PolicyError, BackendUnavailable, CapabilityUnavailable, SetupError,
        FileNotFoundError, PermissionError: as :class:`SandboxProcess`.
    """
    if input is not None:
        if kwargs.get("stdin") is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        kwargs["stdin"] = PIPE
    if capture_output:
        if kwargs.get("stdout") is not None or kwargs.get("stderr") is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        kwargs["stdout"] = PIPE
        kwargs["stderr"] = PIPE
    with SandboxProcess(args, policy=policy, backend=backend, **kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            proc.terminate()
            try:
                exc.stdout, exc.stderr = proc.communicate(timeout=max(kill_grace, 0))
            except subprocess.TimeoutExpired:
                proc.kill()
                exc.stdout, exc.stderr = proc.communicate()
            proc.kill()   # the command is gone; make sure nothing of the sandbox is left
            raise
        except BaseException:
            proc.kill()
            raise
        retcode = proc.poll()
        if check and retcode:
            raise CalledProcessError(retcode, proc.args, output=stdout, stderr=stderr)
    return CompletedProcess(proc.args, retcode, stdout, stderr)


def find_executable(plan: _plan.Plan, name: str, env: dict) -> str:
    """Find ``name`` as the sandbox will see it (PATH search through the plan's binds).

    Returns the sandbox path. Raises FileNotFoundError or PermissionError as exec
    would; a path not backed by the host (tmpfs, created by the plan) is assumed
    executable and left to the backend's exec to judge.
    """
    mounts = plan.mount_ops
    if "/" in name:
        candidates = [name if name.startswith("/") else os.path.join(plan.policy.chdir or "/", name)]
    else:
        search = env.get("PATH", DEFAULT_PATH)
        candidates = [os.path.join(d or ".", name) for d in search.split(":")]
    denied = None
    for cand in candidates:
        cand = os.path.normpath(cand) if cand.startswith("/") else cand
        if not cand.startswith("/"):
            continue
        host, cover = _plan.host_path(cand, mounts)
        if host is None:
            if cover is not None and (cover.dest == cand or not isinstance(
                    cover, (_plan.MountTmpfs, _plan.MinimalDev, _plan.MountMqueue)) or any(
                    getattr(op, "dest", None) == cand for op in mounts)):
                return cand   # not host-backed: the backend's exec decides
            continue   # an empty tmpfs/dev holds nothing the plan did not put there
        try:
            st = os.stat(host)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
            return cand
        denied = cand
    if denied is not None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), denied)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
