"""The public process API: ``Popen``, ``run``, ``call``, ``check_call``, ``check_output``,
following :mod:`subprocess`.

``SandboxProcess`` is a :class:`subprocess.Popen` whose child is started by a
backend instead of fork/exec, so pipes, ``communicate``, ``wait(timeout)`` and the
context manager behave exactly as in subprocess. The pid it holds is the
sandbox's outermost process: killing it ends every process of the sandbox.
"""

from __future__ import annotations

import subprocess

from ._popen import BackendPopen
from .lifecycle import DRAIN_AFTER_END, KILL_GRACE, stop
from .policy import Policy
# compiled, with_start_directory, caller_directory: re-exported (bwrap_compat, sessions, integrations)
from .sandbox_start import SandboxStart, caller_directory, compiled, with_start_directory  # noqa: F401

# subprocess names, re-exported so callers need one import
PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT
CompletedProcess = subprocess.CompletedProcess
CalledProcessError = subprocess.CalledProcessError
TimeoutExpired = subprocess.TimeoutExpired


class SandboxProcess(SandboxStart, BackendPopen):
    """A sandboxed command, with the interface of :class:`subprocess.Popen` (through
    the adapter :class:`pysandbox._popen.BackendPopen`).

    Accepts Popen's stdio, ``env``, ``pass_fds``, ``text``/``encoding`` and
    ``bufsize`` arguments, and ``cwd``: the directory the command starts in, a path
    inside the sandbox (relative: to the policy's ``chdir``; the rule of a session's
    ``cwd``), refused when the sandbox's view has no directory there
    (:class:`~pysandbox.errors.StartDirectoryMissing`, as a session refuses it). With no
    ``policy`` and no ``cwd``, the command starts in the caller's current directory when
    the sandbox can see it (else in ``/``). ``preexec_fn``, ``user``, ``group`` and ``shell``
    are refused: the policy decides those; ``close_fds=False`` is refused (a sandbox never
    inherits descriptors: name them in ``pass_fds``). ``on_start(pid)`` is called (on
    another thread, before the constructor returns) with the host pid of the
    sandbox's first process as soon as it exists: with ``policy.userns_block_fd``
    that is the process whose ``uid_map``/``gid_map`` the caller writes.
    ``close_in_setup``: descriptors the sandbox's setup process closes before its
    first step (native; a pipe whose reader must see EOF while the setup waits); one
    also in ``pass_fds`` (or the policy's) is refused (``conflicting_options``).
    ``pty_socket``: the sandbox gets a terminal of its own (:mod:`pysandbox.terminal`
    drives it): right before the exec, the setup opens a pty in the sandbox's devpts
    and sends its master over this unix socket; the slave is the command's controlling
    terminal and becomes each descriptor n (0, 1, 2) whose bit ``1 << n`` is in
    ``pty_stdio``; ``pty_winsize`` ``(rows, cols)`` is its first size.

    Raises:
        PolicyError: invalid policy or arguments.
        BackendUnavailable: the backend cannot run here (bwrap_not_found, ...).
        CapabilityUnavailable: the host lacks an isolation the policy needs.
        SetupError: a setup step failed; the command never ran.
        FileNotFoundError, PermissionError: the command cannot be executed.
    """

    def __init__(self, args, *, policy: Policy | None = None, backend: str = "auto",
                 env=None, pass_fds=(), on_start=None, cwd=None,
                 close_in_setup=(), pty_socket=None, pty_stdio=0b111, pty_winsize=None,
                 on_proxy_event=None, _proxy_resolver=None, _proxy_tenants=None, _session_server: bool = False,
                 _host_mountpoints: bool = False,
                 **kwargs):
        argv = self._set_up(args, kwargs, policy=policy, backend=backend, env=env, pass_fds=pass_fds,
                            on_start=on_start, cwd=cwd, close_in_setup=close_in_setup, pty_socket=pty_socket,
                            pty_stdio=pty_stdio, pty_winsize=pty_winsize, on_proxy_event=on_proxy_event,
                            _proxy_resolver=_proxy_resolver, _proxy_tenants=_proxy_tenants,
                            _session_server=_session_server, _host_mountpoints=_host_mountpoints)
        try:
            super().__init__(argv, pass_fds=(), **kwargs)
        except BaseException:
            self._finish()
            raise

    def _execute_child(self, *args):
        super()._execute_child(*args)
        self._started()

    def _handle_exitstatus(self, sts, *args, **kwargs):
        try:
            super()._handle_exitstatus(sts, *args, **kwargs)
        finally:
            self._finish()


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
    return run_process(lambda **kw: SandboxProcess(args, policy=policy, backend=backend, **kw), input=input,
                       capture_output=capture_output, timeout=timeout, check=check, kill_grace=kill_grace,
                       kwargs=kwargs)


def call(args, *, policy: Policy | None = None, backend: str = "auto", timeout: float | None = None,
         **kwargs) -> int:
    """Run ``args`` in a sandbox, wait, return its returncode, as :func:`subprocess.call`
    (the timeout ends the whole sandbox, as :func:`run`'s).

    Raises:
        TimeoutExpired, PolicyError, BackendUnavailable, CapabilityUnavailable, SetupError,
        FileNotFoundError, PermissionError: as :func:`run`.
    """
    return run(args, policy=policy, backend=backend, timeout=timeout, **kwargs).returncode


def check_call(args, *, policy: Policy | None = None, backend: str = "auto", timeout: float | None = None,
               **kwargs) -> int:
    """:func:`call`, raising CalledProcessError on a non-zero returncode, as
    :func:`subprocess.check_call`; returns 0.

    Raises:
        CalledProcessError: a non-zero returncode (negative for a signal).
        TimeoutExpired, PolicyError, ...: as :func:`run`.
    """
    return run(args, policy=policy, backend=backend, timeout=timeout, check=True, **kwargs).returncode


def check_output(args, *, policy: Policy | None = None, backend: str = "auto", timeout: float | None = None,
                 **kwargs):
    """The command's standard output, as :func:`subprocess.check_output` (bytes, or str
    with ``text``/``encoding``/``errors``); stderr is not captured unless asked
    (``stderr=STDOUT`` or ``PIPE``).

    Raises:
        ValueError: ``stdout=`` given (it is the output).
        CalledProcessError: a non-zero returncode; ``output`` holds what was read.
        TimeoutExpired, PolicyError, ...: as :func:`run`.
    """
    if "stdout" in kwargs:
        raise ValueError("stdout argument not allowed, it will be overridden.")
    if "input" in kwargs and kwargs["input"] is None:
        # as subprocess: an explicit input=None means empty input, not the caller's stdin
        text = kwargs.get("universal_newlines") or kwargs.get("text") or kwargs.get("encoding") \
            or kwargs.get("errors")
        kwargs["input"] = "" if text else b""
    return run(args, policy=policy, backend=backend, stdout=PIPE, timeout=timeout, check=True, **kwargs).stdout


def _output(proc, timeout):
    """``proc.communicate(timeout=timeout)``; with None (after the kill), once the command
    ended, its output read for at most DRAIN_AFTER_END more seconds: what it wrote
    before, without waiting for an EOF another process can withhold."""
    if timeout is not None:
        return proc.communicate(timeout=timeout)
    proc.wait()
    try:
        return proc.communicate(timeout=DRAIN_AFTER_END)
    except subprocess.TimeoutExpired as exc:
        return exc.stdout, exc.stderr


def run_process(make, *, input, capture_output: bool, timeout, check: bool, kill_grace: float,
                kwargs: dict) -> CompletedProcess:
    """:func:`subprocess.run`'s flow over ``make(**popen_kwargs)`` (a SandboxProcess or a
    session's command): input, capture, timeout (:func:`lifecycle.stop`), check."""
    if input is not None:
        if kwargs.get("stdin") is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        kwargs["stdin"] = PIPE
    if capture_output:
        if kwargs.get("stdout") is not None or kwargs.get("stderr") is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        kwargs["stdout"] = PIPE
        kwargs["stderr"] = PIPE
    with make(**kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            exc.stdout, exc.stderr = stop(proc, kill_grace, wait=lambda t: _output(proc, t))
            proc.kill()   # the command is gone; make sure nothing of the sandbox is left
            raise
        except BaseException:
            proc.kill()
            raise
        retcode = proc.poll()
        limit = getattr(proc, "limit", None)
        if check and retcode:
            exc = CalledProcessError(retcode, proc.args, output=stdout, stderr=stderr)
            exc.limit = limit
            raise exc
    done = CompletedProcess(proc.args, retcode, stdout, stderr)
    done.limit = limit   # the resource limit that ended the command, or None (SandboxProcess.limit)
    done.denials = getattr(proc, "denials", None)   # SandboxProcess.denials
    if getattr(proc, "proxy", None) is not None:
        done.proxy = proc.proxy   # network proxy mode: its counts and events
    return done
