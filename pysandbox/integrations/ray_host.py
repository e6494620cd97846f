"""The host side of ``pysandbox.integrations.ray``: what one Ray actor on one node runs.

``SandboxHost`` imports no Ray (``pysandbox.integrations.ray`` wraps it as an actor), so
it is plain Python to read and test. At start it asks :func:`pysandbox.status` whether
this node can enforce the policy; a node that cannot answers every call with
``SessionError`` (``session_unavailable``) and runs nothing: it is never used
unsandboxed. A node that can keeps a :class:`pysandbox.Pool` of staged sandboxes (one
fresh sandbox per command), or, for a policy a pool refuses (resource limits, network
proxy mode), launches each command one-shot with :func:`pysandbox.run`: the whole policy
either way. Sessions (:class:`pysandbox.Sandbox`) are held by id for the driver's
``sc.session()``.

Results are :class:`CommandResult`: plain picklable data, each output stream cut at
:data:`OUTPUT_LIMIT` bytes.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field

from ..errors import Reason, SessionError
from ..policy import Policy
from .ray_capture import bounded_run

__all__ = ["OUTPUT_LIMIT", "ClusterBusy", "CommandResult", "HostLost", "SandboxHost"]

OUTPUT_LIMIT = 1 << 20
"""Bytes of each of stdout and stderr a result carries (1 MiB); the rest is read and
dropped as it comes (``ray_capture.py``: the host holds no more than this), and
``stdout_truncated``/``stderr_truncated`` say so."""


class ClusterBusy(SessionError):
    """``block=False`` and the driver's or the host's bound of calls in flight is reached."""

    default_reason = Reason.SESSION_UNAVAILABLE


class HostLost(SessionError):
    """The host (its node, its actor) a call or a session was on died. ``node_id`` names it."""

    default_reason = Reason.SESSION_LOST

    def __init__(self, message: str, reason=None, node_id: str = "", **details):
        super().__init__(message, reason, **details)
        self.node_id = node_id


@dataclass(frozen=True)
class CommandResult:
    """One command's outcome: :class:`subprocess.CompletedProcess`'s fields and where and
    how long it ran. Plain data (picklable, no handle).

    ``returncode`` is None when the command timed out (``timed_out``; the sandbox was
    ended, every descendant with it). ``limit`` names the resource limit that ended it
    (``"memory"``, ``"pids"``, ``"cpu_time"``, ``"file_size"``, ``"wall_time"``) or is
    None. ``queued_seconds``: from the driver's submit to the host's start (two machines'
    wall clocks: as close as they are);
    ``run_seconds``: the host's launch to exit (sandbox setup included); ``attempts``: 2
    when the first host died and the command was run again elsewhere.
    """

    args: list
    returncode: int | None
    stdout: bytes | str | None = None
    stderr: bytes | str | None = None
    node_id: str = ""
    host: str = ""
    limit: str | None = None
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    queued_seconds: float = 0.0
    run_seconds: float = 0.0
    attempts: int = 1
    extra: dict = field(default_factory=dict)

    def check_returncode(self) -> None:
        """Raise :class:`subprocess.CalledProcessError` for a non-zero exit and
        :class:`subprocess.TimeoutExpired` for a timeout, as CompletedProcess does."""
        if self.timed_out:
            raise subprocess.TimeoutExpired(self.args, self.extra.get("timeout") or 0, self.stdout, self.stderr)
        if self.returncode:
            raise subprocess.CalledProcessError(self.returncode, self.args, self.stdout, self.stderr)


class SandboxHost:
    """One node's sandboxes; see the module. Thread-safe: the actor runs up to
    ``pool_size`` calls at once (its ``max_concurrency``)."""

    def __init__(self, policy: Policy, pool_size: int = 4, backend: str = "auto", node_id: str = ""):
        from .. import status
        self.policy, self.backend, self.node_id = policy, backend, node_id
        self.name = f"{os.uname().nodename}:{os.getpid()}"
        self._lock = threading.Lock()
        self._sessions: dict = {}
        self._running = self._most_running = self._done = 0
        self._pool = None
        self._closed = False
        st = status(policy, backend=backend)
        self.available, self.reason, self.detail = st.available, st.reason, st.detail
        self.backend_name = st.backend
        self.mode = "none"
        if not self.available:
            return
        if policy.limits is None and policy.network.mode != "proxy":
            from ..pool import Pool
            self._pool = Pool(policy, size=pool_size, backend=backend)
            self.mode = "pool"
        else:
            self.mode = "one-shot"   # a pool refuses this policy; the launch takes it whole

    # ------------------------------------------------------------------ state
    def info(self) -> dict:
        """Where this host is and whether it runs anything (plain data)."""
        with self._lock:
            return {"node_id": self.node_id, "host": self.name, "pid": os.getpid(),
                    "available": self.available, "reason": self.reason, "detail": self.detail,
                    "backend": self.backend_name, "mode": self.mode, "sessions": len(self._sessions),
                    "running": self._running, "most_running": self._most_running, "done": self._done}

    def _check(self) -> None:
        if self._closed:
            raise SessionError("this sandbox host is closed", Reason.SESSION_CLOSED)
        if not self.available:
            raise SessionError(f"node {self.node_id} cannot enforce the policy ({self.reason}: {self.detail})",
                               Reason.SESSION_UNAVAILABLE)

    # ------------------------------------------------------------------ commands
    def run(self, args, *, capture_output=False, input=None, timeout=None, env=None, cwd=None,
            text=False, submitted_at=None, session=None, attempts=1, merge_stderr=False) -> CommandResult:
        """Run ``args`` in a fresh sandbox (or in session ``session``) and wait
        (``merge_stderr``: ``bounded_run``'s)."""
        self._check()
        start = time.time()
        queued = max(0.0, start - submitted_at) if submitted_at is not None else 0.0
        with self._lock:
            make = self._popen(session)
            self._running += 1
            self._most_running = max(self._most_running, self._running)
        t0 = time.monotonic()
        try:
            returncode, out, err, out_cut, err_cut, limit, timed_out = bounded_run(
                make, args, capture_output=capture_output, input=input, timeout=timeout, text=text, env=env,
                cwd=cwd, limit=OUTPUT_LIMIT, merge_stderr=merge_stderr)
        finally:
            with self._lock:
                self._running -= 1
                self._done += 1
        return CommandResult(list(args), returncode, out, err, self.node_id, self.name, limit, timed_out,
                             out_cut, err_cut, queued, time.monotonic() - t0, attempts,
                             {"timeout": timeout} if timed_out else {})

    def _popen(self, session):
        """Under the lock: the Popen-like factory of one command."""
        if session is not None:
            sb = self._sessions.get(session)
            if sb is None:
                raise SessionError(f"no session {session} on this host (closed)", Reason.SESSION_CLOSED)
            return sb.Popen
        if self._pool is not None:
            return self._pool.Popen
        from ..process import Popen
        return lambda args, **kw: Popen(args, policy=self.policy, backend=self.backend, **kw)

    # ------------------------------------------------------------------ sessions
    def open_session(self) -> str:
        """Start a session of the policy on this host; its id."""
        self._check()
        from ..session import Sandbox
        sb = Sandbox(self.policy, self.backend)
        sid = uuid.uuid4().hex
        with self._lock:
            if self._closed:
                sb.close()
                raise SessionError("this sandbox host is closed", Reason.SESSION_CLOSED)
            self._sessions[sid] = sb
        return sid

    def close_session(self, sid: str) -> None:
        with self._lock:
            sb = self._sessions.pop(sid, None)
        if sb is not None:
            sb.close()

    def close(self) -> dict:
        """Close every session and the pool; nothing of them is left. Returns ``info()``."""
        with self._lock:
            self._closed = True
            sessions, self._sessions = list(self._sessions.values()), {}
        for sb in sessions:
            sb.close()
        if self._pool is not None:
            self._pool.close()
        return self.info()
