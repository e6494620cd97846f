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
for each rlimit and the wall time, the smaller of the session's and the command's. A
command's own ``memory`` or ``pids`` is a cgroup of its own below the session's
(:meth:`pysandbox.cgroup.Cgroups.nested`, ``cmd-<id>``): the launcher makes it and sends
its ``cgroup.procs``, opened for writing, with the LIMITS frame; the command's process
moves itself in before anything else (so all it starts is in it; the keeper is not), and
the launcher removes it when the command's exit comes. The kernel bounds it by the
session's too (the hierarchy), so it never widens. Where there is no session cgroup to
nest in (cgroup v2, whose session cgroup holds the server; the pids limit held by
RLIMIT_NPROC) it fails closed (``LimitUnavailable``, ``cgroup_unavailable``).

Which limit ended a command is reported on its result (``limit``), as for a one-shot
launch (:func:`pysandbox.enforcement.which_limit`): ``wall_time``, ``cpu_time`` and
``file_size`` are the command's own, and so are ``memory`` and ``pids`` of its own
cgroup; for the session's, ``memory`` when the command was SIGKILLed and the session's
cgroup counted an OOM kill while it ran, ``pids`` when it refused a fork while it ran
(with commands running at once, a hit is reported on each command that ran meanwhile).
"""

from __future__ import annotations

import os
import signal
import struct
from typing import NamedTuple

from . import session_proto as W
from .backends import tail
from .errors import LimitUnavailable, PolicyError, Reason
from .limits import CGROUP_KINDS, RLIMIT_KINDS, Limits
from .enforcement import deadline, which_limit

LIMITS = 3                 # the LIMITS frame (native/psb_session_limits.h)
SPAWN_LIMITED = 0x80000000  # in the SPAWN frame's D word: its LIMITS came first
_HEADER = struct.Struct("<8I")


def _smaller(a, b):
    return b if a is None else a if b is None else min(a, b)


def limits_frame(cid: int, rlimits, ncgroups: int = 0) -> bytes:
    """The LIMITS frame for command ``cid``: ``(resource, soft, hard)`` triples; the
    ``ncgroups`` descriptors of its own cgroups ride with it."""
    words = []
    for res, soft, hard in rlimits:
        soft, hard = soft & (2 ** 64 - 1), hard & (2 ** 64 - 1)
        words += [res, soft & 0xFFFFFFFF, soft >> 32, hard & 0xFFFFFFFF, hard >> 32]
    payload = struct.pack(f"<{len(words)}I", *words)
    return _HEADER.pack(W.MAGIC, LIMITS, cid, len(rlimits), ncgroups, 0, 0, len(payload)) + payload


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

    def command(self, limits: Limits | None) -> "Requested | None":
        """A command's limits: the session's, narrowed by ``limits`` (its own memory and
        pids: a cgroup of its own, :class:`CommandLimits`).

        Raises:
            PolicyError (invalid_value): ``limits`` is not a Limits.
        """
        if limits is not None and not isinstance(limits, Limits):
            raise PolicyError(f"limits= must be a pysandbox.Limits: {limits!r}", Reason.INVALID_VALUE,
                              limits, field="limits")
        mine, theirs = self.limits, limits
        if mine is None and theirs is None:
            return None
        fields = {k: _smaller(getattr(mine, k, None), getattr(theirs, k, None))
                  for k in RLIMIT_KINDS + ("wall_time",) + CGROUP_KINDS}
        return Requested(Limits(**fields), {k: fields[k] for k in (theirs.cgroup if theirs else {})})


class Requested(NamedTuple):
    """What a command runs under: ``limits`` (the session's narrowed by its own) and
    ``own``, the memory/pids it asked for itself (``{kind: value}``: its own cgroup)."""
    limits: Limits
    own: dict


class CommandLimits:
    """One command's limits while it runs: its own cgroups (``fds``: their cgroup.procs,
    for the LIMITS frame; the caller closes them once sent), its deadline, and the
    session's cgroup counters read when it started, for :meth:`finish`.

    Raises (from the constructor):
        LimitUnavailable: its own memory/pids cannot be a cgroup below the session's.
    """

    def __init__(self, requested: Requested, cgroups, kill, cid: int):
        self.limits = requested.limits
        self.cgroups = cgroups
        self.own = None
        self.fds: list[int] = []
        if requested.own:
            if cgroups is None:
                kind = next(iter(requested.own))
                raise LimitUnavailable(f"a command's own {kind} limit needs a cgroup below the session's, and "
                                       "this session has none (its policy sets no memory or pids limit, or "
                                       "RLIMIT_NPROC holds its pids)", Reason.CGROUP_UNAVAILABLE, limit=kind)
            self.own = cgroups.nested(f"{os.getpid()}-{cid}", requested.own)
            try:
                self.fds = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in self.own.procs_files]
            except OSError as exc:
                self.own.close()
                raise LimitUnavailable(f"opening a command's cgroup.procs failed ({exc.strerror})",
                                       Reason.CGROUP_UNAVAILABLE, exc.errno) from None
        self.before = cgroups.counters() if cgroups is not None else {}
        self.wall_fired = False
        self.result: str | None = None   # set by finish
        self._done = False
        self._timer = None
        if self.limits.wall_time is not None:
            def expired():
                self.wall_fired = True
                kill()
            self._timer = deadline(self.limits.wall_time, expired, "pysandbox-session-wall-time")

    def finish(self, returncode: int | None) -> str | None:
        """Called once its exit came (None: it never started): stops the deadline and
        sets ``result``, the limit that ended the command (limits.KINDS) or None."""
        if self._done:
            return self.result
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
        own = self.own.close(timeout=1.0) if self.own is not None else {}   # its leftovers: the session's close
        if returncode is None:
            return None
        after = self.cgroups.counters() if self.cgroups is not None else {}
        hits = {c: after.get(c, 0) - self.before.get(c, 0) for c in after}
        if returncode != -signal.SIGKILL:
            hits.pop("memory", None)   # an OOM kill elsewhere in the session did not end this one
        hits.update(own)   # its own cgroups: exactly its own
        self.result = which_limit(self.limits, returncode, hits, self.wall_fired)
        return self.result


def mark_limited(spawn: bytes) -> bytes:
    """A SPAWN frame (session_proto.spawn_frame) marked: its LIMITS frame comes first."""
    d = struct.unpack_from("<I", spawn, 24)[0]
    return spawn[:24] + struct.pack("<I", d | SPAWN_LIMITED) + spawn[28:]


def send_spawn(channel, cid: int, frame: bytes, fds, limits: "CommandLimits | None") -> None:
    """Send command ``cid``'s SPAWN ``frame`` (with its descriptors ``fds``), after its
    LIMITS frame when it has limits (then the SPAWN is marked: never run without them).

    Raises:
        SessionError: the server is gone (the command's deadline is stopped).
    """
    rl = limits.limits.rlimits() if limits is not None else ()
    cg = limits.fds if limits is not None else []
    try:
        if rl or cg:
            channel.send(mark_limited(frame), fds, before=limits_frame(cid, rl, len(cg)), before_fds=cg)
        else:
            channel.send(frame, fds)
    except BaseException:
        if limits is not None:
            limits.finish(None)
        raise
    finally:
        for fd in cg:
            os.close(fd)


def limits_failure(ev, limits: "CommandLimits | None") -> Exception | None:
    """The error for a FAILED event of the RLIMIT step (the failed rlimit's index above
    bit 16 of its step word), as a one-shot launch names it (backends/tail.py), or of
    the CGROUP step (the kernel refused the command's move into its own cgroup); None
    for any other event."""
    step, index = ev.b & 0xFFFF, ev.b >> 16
    name = tail.STEPS[step - 1] if 0 < step <= len(tail.STEPS) else None
    if name == "CGROUP":
        return LimitUnavailable(f"moving the command into its own cgroup failed ({os.strerror(ev.a or 5)}); "
                                "the command did not run", Reason.CGROUP_UNAVAILABLE, ev.a)
    if name != "RLIMIT":
        return None
    rl = limits.limits.rlimits() if limits is not None else ()
    return tail.error("RLIMIT", ev.a, rlimit=rl[index] if index < len(rl) else None)
