"""The session channel's wire format, the launcher's side (the server's is
native/psb_session.c, whose header comment is the reference). Pure: bytes in, bytes
out; no sockets. Shared by the sync sessions (pysandbox/session.py) and the asyncio
ones (pysandbox/aio.py).
"""

from __future__ import annotations

import errno as _errno
import os
import struct
from typing import NamedTuple

from .backends import tail

MAGIC = 0x50534253
SPAWN = 1
SIGNAL = 2
SPAWN_QUIET = 4   # as SPAWN, without a STARTED event: the launcher waits for the end only

READY = 0x10
STARTED = 0x11
FAILED = 0x12
EXITED = 0x13
ERROR = 0x14

EVENT_SIZE = 16
MAX_FDS = 64
MAX_PAYLOAD = 8 << 20
MAX_TARGET_FD = 899   # the server moves received descriptors to 900 and up first

# FAILED's step word: enum psb_tail_step (native/psb_tail.h), read by backends/tail.py
# ERROR's code word
SERVER_ERRORS = {1: "a malformed frame", 2: "it is not the pid 1 of its pid namespace",
                 3: "no /proc/1/task/1/children in the sandbox (a procfs at /proc, with "
                    "CONFIG_PROC_CHILDREN, is needed to end a command's descendants)",
                 4: "a writable destination of the policy is not a writable mount's root in the sandbox, or "
                    "there are more than 4096 (each command's Landlock write rules go there: "
                    "native/psb_session.c)"}

_HEADER = struct.Struct("<8I")
_EVENT = struct.Struct("<4I")
_STDIO = [0, 1, 2]
_STDIO_PACKED = struct.pack("<3I", *_STDIO)


class Event(NamedTuple):
    """One event of the server (a tuple: made from the unpacked words at C speed)."""
    kind: int
    id: int
    a: int
    b: int


def _strings(strings) -> bytes:
    """NUL-terminated, each encoded as os.fsencode does (at once).

    Raises:
        ValueError: a NUL inside one of them.
    """
    if not strings:
        return b""
    joined = "\0".join(strings)
    if joined.count("\0") != len(strings) - 1:
        raise ValueError("a NUL byte in the command, its environment or its working directory")
    return joined.encode("utf-8", "surrogateescape") + b"\0"


class EnvEncoder:
    """The encoded strings of the environment last sent with a key: a session's commands
    mostly run with one environment, so each SPAWN pays no formatting nor encoding of every
    variable, and no comparison of its own: the key is the launcher's
    (pysandbox/environment.py ``EnvCache.keyed``), the same object exactly while the
    environment but its ``PWD`` is (pysandbox/session.py keeps one encoder per session)."""

    def __init__(self):
        self.last: tuple[object, str | None, bytes] | None = None   # (key, PWD, encoded)

    def encode(self, env: dict[str, str], key: object | None = None) -> bytes:
        """``env``'s strings; from the last encoding when ``key`` is that one's (``is``)
        and PWD is the same. ``key`` None: encoded, not kept."""
        last = self.last
        pwd = env.get("PWD")
        if key is not None and last is not None and last[0] is key and last[1] == pwd:
            return last[2]
        blob = _strings(list(map("=".join, env.items())))
        if key is not None:
            self.last = (key, pwd, blob)
        return blob


def spawn_frame(cid: int, cwd: str, candidates: list[str], argv: list[str], env: dict[str, str],
                targets: list[int], quiet: bool = False, encoder: EnvEncoder | None = None,
                env_key: object | None = None) -> bytes:
    """The SPAWN frame for command ``cid``; its descriptors (one per ``targets`` entry,
    in order) go as SCM_RIGHTS with it. ``quiet``: SPAWN_QUIET, no STARTED will come.
    ``encoder``: the session's cache of the encoded environment; ``env_key``: ``env``'s key
    there (:meth:`EnvEncoder.encode`), None when ``env`` is not one ``EnvCache.keyed``
    named (given by the caller, or edited beyond its PWD).

    Raises:
        ValueError: a NUL in a string, too many descriptors, a target out of range, or
            a frame over MAX_PAYLOAD.
    """
    if targets == _STDIO:   # the usual command's: packed once
        packed = _STDIO_PACKED
    elif len(targets) > MAX_FDS or any(not 0 <= t <= MAX_TARGET_FD for t in targets) or len(set(targets)) != len(targets):
        raise ValueError(f"descriptor targets must be distinct, 0..{MAX_TARGET_FD}, at most {MAX_FDS}")
    else:
        packed = struct.pack(f"<{len(targets)}I", *targets)
    env_blob = (encoder or EnvEncoder()).encode(env, env_key)
    payload = packed + _strings([cwd, *candidates, *argv]) + env_blob
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"the command and its environment exceed {MAX_PAYLOAD} bytes")
    return _HEADER.pack(MAGIC, SPAWN_QUIET if quiet else SPAWN, cid, len(candidates), len(argv), len(env), len(targets),
                        len(payload)) + payload


def signal_frame(cid: int, sig: int) -> bytes:
    return _HEADER.pack(MAGIC, SIGNAL, cid, sig, 0, 0, 0, 0)


def parse_events(buf: bytearray) -> list[Event]:
    """The complete events at the front of ``buf``, removed from it."""
    size = len(buf) - len(buf) % EVENT_SIZE
    if not size:
        return []
    out = list(map(Event._make, _EVENT.iter_unpack(bytes(buf[:size]))))
    del buf[:size]
    return out


def events_of(data: bytes, buf: bytearray) -> list[Event]:
    """The complete events of ``data`` read after ``buf`` (the part of an event read
    before), the rest left in ``buf``: with none pending and whole events (the usual
    read), no copy through ``buf``."""
    if not buf and not len(data) % EVENT_SIZE:
        return list(map(Event._make, _EVENT.iter_unpack(data)))
    buf += data
    return parse_events(buf)


def failure(ev: Event, argv0: str, cwd: str) -> OSError:
    """The exception for a FAILED event, as subprocess raises it: the errno with the
    file it concerns (the working directory for chdir, the command for exec); a step of
    the setup tail reads as it does on a one-shot launch (backends/tail.py)."""
    err = ev.a or _errno.EIO
    step = tail.STEPS[ev.b - 1] if 0 < ev.b <= len(tail.STEPS) else None
    if step == "CHDIR":
        if err in (_errno.ENOENT, _errno.ENOTDIR):   # the one-shot launch's rule (view.check_start_directory)
            from .errors import StartDirectoryMissing
            return StartDirectoryMissing(f"cwd {cwd}: {'not a' if err == _errno.ENOTDIR else 'no such'} directory "
                                         "in the sandbox view", cwd, err)
        return OSError(err, os.strerror(err), cwd)
    if step in ("EXEC", "LANDLOCK"):
        return tail.error(step, err, exe=argv0)
    what = {"FORK": "starting the command", "FDS": "placing its descriptors",
            "USAGE": "reading the command's frame",
            "RLIMIT": "setting the command's resource limits"}.get(step, f"step {ev.b}")
    return OSError(err, f"the session server failed {what}: {os.strerror(err)}")
