"""Resource limits in sessions and pools (pysandbox/limits.py applied to a session).

The session's ``policy.limits`` is its budget, split by what each limit binds:

- ``memory`` and ``pids`` bind the whole session: its sandbox (server, keepers and every
  command) is launched in cgroups of its own, made and removed by the one-shot code
  (:func:`pysandbox.enforcement.prepare`, :mod:`pysandbox.cgroup`); where no cgroup can
  hold the pids limit, ``RLIMIT_NPROC`` counted per user namespace does
  (:mod:`pysandbox.nproc`); where nothing can, the session does not start (fail closed);
- ``cpu_time``, ``file_size``, ``open_files`` and ``RLIMIT_CORE`` 0 are rlimits of each
  command, set in the command's own process right before its exec
  (native/psb_session_limits.h): never in the server or a keeper, so no command can
  use them to stop the session ending the next one;
- ``wall_time`` is each command's deadline: at it the command and all it started are
  killed (the session's SIGKILL path), and the session lives on.

A command may narrow them, never widen them: ``sb.run(argv, limits=Limits(...))`` takes,
for each rlimit and the wall time, the smaller of the session's and the command's.
A per-command ``memory`` or ``pids`` would need a child cgroup per command (not built):
it is refused with ``conflicting_options`` rather than ignored.

Which limit ended a command is reported on its result (``limit``), as for a one-shot
launch (:func:`pysandbox.enforcement.which_limit`): ``wall_time``, ``cpu_time`` and
``file_size`` are the command's own; ``memory`` when the command was SIGKILLed and the
session's cgroup counted an OOM kill while it ran; ``pids`` when the session's cgroup
refused a fork while it ran. Those two counters are the session's: with commands running
at once, a hit is reported on each command that ran while it happened.
"""

from __future__ import annotations

import signal
import struct
import threading

from . import session_proto as W
from .backends import tail
from .errors import PolicyError, Reason
from .limits import CGROUP_KINDS, RLIMIT_KINDS, Limits
from .enforcement import which_limit

LIMITS = 3                 # the LIMITS frame (native/psb_session_limits.h)
SPAWN_LIMITED = 0x80000000  # in the SPAWN frame's D word: its LIMITS came first
_HEADER = struct.Struct("<8I")


def _smaller(a, b):
    return b if a is None else a if b is None else min(a, b)


def limits_frame(cid: int, rlimits) -> bytes:
    """The LIMITS frame for command ``cid``: ``(resource, soft, hard)`` triples."""
    words = []
    for res, soft, hard in rlimits:
        soft, hard = soft & (2 ** 64 - 1), hard & (2 ** 64 - 1)
        words += [res, soft & 0xFFFFFFFF, soft >> 32, hard & 0xFFFFFFFF, hard >> 32]
    payload = struct.pack(f"<{len(words)}I", *words)
    return _HEADER.pack(W.MAGIC, LIMITS, cid, len(rlimits), 0, 0, 0, len(payload)) + payload


class Budget:
    """The limits of one session (``limits``: the policy's, or None)."""

    def __init__(self, limits: Limits | None):
        self.limits = limits

    def server_limits(self) -> Limits | None:
        """What the session's sandbox is launched under: its cgroup limits only (the
        rlimits and the deadline are each command's)."""
        if self.limits is None or not self.limits.cgroup:
            return None
        return Limits(**self.limits.cgroup)

    def command(self, limits: Limits | None) -> Limits | None:
        """A command's limits: the session's, narrowed by ``limits``.

        Raises:
            PolicyError (conflicting_options): a per-command memory or pids limit.
            PolicyError (invalid_value): ``limits`` is not a Limits.
        """
        if limits is not None and not isinstance(limits, Limits):
            raise PolicyError(f"limits= must be a pysandbox.Limits: {limits!r}", Reason.INVALID_VALUE,
                              limits, field="limits")
        if limits is not None and limits.cgroup:
            raise PolicyError("a command's own memory or pids limit needs a cgroup per command, which "
                              "sessions do not make: set it on the session's policy", Reason.CONFLICTING_OPTIONS,
                              "limits", field="limits")
        mine, theirs = self.limits, limits
        if mine is None and theirs is None:
            return None
        fields = {k: _smaller(getattr(mine, k, None), getattr(theirs, k, None))
                  for k in RLIMIT_KINDS + ("wall_time",)}
        fields.update({k: getattr(mine, k) for k in CGROUP_KINDS if mine is not None})
        return Limits(**fields)


class CommandLimits:
    """One command's limits while it runs: its deadline, and the session's cgroup
    counters read when it started, for :meth:`finish`."""

    def __init__(self, limits: Limits, cgroups, kill):
        self.limits = limits
        self.cgroups = cgroups
        self.before = cgroups.counters() if cgroups is not None else {}
        self.wall_fired = False
        self.result: str | None = None   # set by finish
        self._done = False
        self._timer = None
        if limits.wall_time is not None:
            def expired():
                self.wall_fired = True
                kill()
            self._timer = threading.Timer(limits.wall_time, expired)
            self._timer.daemon = True
            self._timer.name = "pysandbox-session-wall-time"
            self._timer.start()

    def finish(self, returncode: int | None) -> str | None:
        """Called once its exit came (None: it never started): stops the deadline and
        sets ``result``, the limit that ended the command (limits.KINDS) or None."""
        if self._done:
            return self.result
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
        if returncode is None:
            return None
        after = self.cgroups.counters() if self.cgroups is not None else {}
        hits = {c: after.get(c, 0) - self.before.get(c, 0) for c in after}
        if returncode != -signal.SIGKILL:
            hits.pop("memory", None)   # an OOM kill elsewhere in the session did not end this one
        self.result = which_limit(self.limits, returncode, hits, self.wall_fired)
        return self.result


def mark_limited(spawn: bytes) -> bytes:
    """A SPAWN frame (session_proto.spawn_frame) marked: its LIMITS frame comes first."""
    d = struct.unpack_from("<I", spawn, 24)[0]
    return spawn[:24] + struct.pack("<I", d | SPAWN_LIMITED) + spawn[28:]


def rlimit_failure(ev, limits: "CommandLimits | None") -> Exception | None:
    """The error for a FAILED event of the RLIMIT step (the failed rlimit's index above
    bit 16 of its step word), as a one-shot launch names it (backends/tail.py); None for
    any other event."""
    step, index = ev.b & 0xFFFF, ev.b >> 16
    if not 0 < step <= len(tail.STEPS) or tail.STEPS[step - 1] != "RLIMIT":
        return None
    rl = limits.limits.rlimits() if limits is not None else ()
    return tail.error("RLIMIT", ev.a, rlimit=rl[index] if index < len(rl) else None)
