"""What the sandbox refused, reported on the command's result (``Policy(report_denials=True)``,
``pysandbox run --report-denials``): ``result.denials``, a list of :class:`Denial`.

Observe, never decide. The built-in filter (:func:`pysandbox.seccomp.default_filter`,
``report=True``) is loaded with a seccomp notification listener (native/psb_tail.h
``psb_tail_seccomp_notify``) that the sandbox's setup sends to the launcher before the
command exists; the command never holds it. One thread of the launcher, the
:class:`Observer`, answers the notifications:

- ``syscall``: the calls the filter refuses whole (keyrings, io_uring, the opt-in calls
  the policy does not allow) notify instead of failing; the observer answers each with
  the errno the filter would have returned, chosen by the call's number alone, and
  records it. An unknown notification is refused (EPERM). Without an observer (it died,
  or the sandbox outlived it) the kernel answers ENOSYS: still refused.
- ``write`` and ``connect``: the x86_64 write-intent calls of
  :mod:`pysandbox.denial_calls` and (network deny and proxy) ``connect`` notify; the
  observer reads the path or address from ``/proc/PID/mem`` and answers
  ``SECCOMP_USER_NOTIF_FLAG_CONTINUE``: the kernel runs the call as it would have, and
  decides it (EROFS from a read-only mount, ENETUNREACH off loopback). Only then does the
  observer classify what it read: a write is recorded when the nearest existing
  ancestor of the path, resolved in the command's own root (``openat2`` with
  ``RESOLVE_IN_ROOT`` from ``/proc/PID/root``; no magic links), is on a read-only mount
  and is not a device, fifo or socket; a connect when the address is IPv4 or IPv6 off
  loopback. The command controls its memory, so the record may be wrong (another thread
  changed the path between the call and the read): the decision never is, the kernel
  made it. Without an observer these calls fail with ENOSYS: the command continues,
  its writes and connects fail.
- network proxy mode: the proxy's refused requests are ``connect`` records too
  (:func:`with_proxy_refusals`; its events keep the reason).

Bounded: at most :data:`MAX_RECORDS` distinct ``(kind, target)`` records per command,
each counted (``count``), and :data:`MAX_TOTAL` in a session (what escaped into sessions
of its own stays until the session ends); later distinct targets are dropped and counted
in ``denials.cut``; a path
read is at most 4096 bytes, an address 128. Not observed: the i386 ABI's writes and
connects, ``sendto``/``sendmsg`` with an address, ``openat2`` (refused with ENOSYS by the
filter), refusals of the filter's argument rules (ioctl, set-id modes, socket families),
denials by Landlock or by permissions.

Sessions and pools (:mod:`pysandbox.session`): the server's sandbox has the observer, and
every command inherits its filter; a record is keyed by the caller's session id in the
sandbox (``NSsid``, read before the answer; a session's command leads its own session),
and a command's result takes its records once it exited (:meth:`Observer.take`). A
descendant that makes a session of its own is counted on the session
(``Sandbox.denials``), not on the command.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import ipaddress
import os
import select
import socket
import struct
import threading
from dataclasses import dataclass

from . import denial_calls as _calls
from . import seccomp as _seccomp
from .denial_paths import base_fd, read_only_target
from .errors import CapabilityUnavailable, Reason, SetupError
from .fdrecv import receive

MAX_RECORDS = 256    # distinct targets per command (one-shot: per sandbox)
MAX_TOTAL = 4096     # a session's, every command's and the unattributed ones together
PATH_MAX = 4096
# <linux/seccomp.h>: struct seccomp_notif (80 bytes), seccomp_notif_resp (24 bytes)
NOTIF_RECV = 0xC0502100
NOTIF_SEND = 0xC0182101
NOTIF_ID_VALID = 0x80082102   # the first (_IOR) number: every kernel takes it, 5.17+ both
FLAG_CONTINUE = 1
NOTIF = struct.Struct("=QII iI Q 6Q")   # id, pid, flags, data{nr, arch, ip, args[6]}
RESP = struct.Struct("=QqiI")           # id, val, error, flags
KIND_ERRNO = {"write": _errno.EROFS, "connect": _errno.ENETUNREACH}


@dataclass(frozen=True)
class Denial:
    """One refused target: ``kind`` (``write``, ``connect``, ``syscall``), ``target`` (the
    path as the command named it, ``address:port``, or the call's name), ``errno`` (the
    sandbox's refusal: EROFS for a write, a read-only mount; ENETUNREACH for a connect;
    the filter's errno for a call; a write may have failed earlier with the host's own
    permission check, EACCES for an unprivileged caller's root-owned file), ``pid`` (host
    pid of the first process refused) and ``count``."""
    kind: str
    target: str
    errno: int
    pid: int
    count: int = 1


class Denials(list):
    """The denials of one command, first seen first; ``cut``: how many refusals of further
    distinct targets were dropped (:data:`MAX_RECORDS`)."""
    cut: int = 0


def summary(denials) -> str:
    """The one line ``pysandbox run --report-denials`` prints (empty when nothing was denied):
    ``pysandbox: denied: write /etc/hosts (EROFS) x2; connect 192.0.2.1:80; syscall keyctl``."""
    parts = []
    for d in denials:
        part = f"{d.kind} {d.target}"
        if d.kind == "write":
            part += f" ({_errno.errorcode.get(d.errno, d.errno)})"
        parts.append(part + (f" x{d.count}" if d.count > 1 else ""))
    cut = getattr(denials, "cut", 0)
    if cut:
        parts.append(f"... {cut} more not listed")
    return f"pysandbox: denied: {'; '.join(parts)}" if parts else ""


def with_proxy_refusals(denials: Denials, events) -> Denials:
    """``denials`` and, counted per ``host:port`` as ``connect`` (``EACCES``, pid 0: the
    proxy refused a request, not the kernel a call), the refused events of network proxy
    mode's proxy (pysandbox/egress.py), within :data:`MAX_RECORDS`."""
    out = Denials(denials)
    out.cut = denials.cut
    index = {(d.kind, d.target): i for i, d in enumerate(out)}
    for ev in events:
        if ev.verdict != "refused":
            continue
        key = ("connect", f"{ev.host}:{ev.port}")
        if key in index:
            old = out[index[key]]
            out[index[key]] = Denial(old.kind, old.target, old.errno, old.pid, old.count + 1)
        elif len(out) < MAX_RECORDS:
            index[key] = len(out)
            out.append(Denial("connect", key[1], _errno.EACCES, 0))
        else:
            out.cut += 1
    return out


def check_kernel(release: str | None = None) -> None:
    """The observer needs ``SECCOMP_USER_NOTIF_FLAG_CONTINUE`` (Linux 5.5): on an older
    kernel an answer it gives would fail and the call wait for ever, so refuse first.

    Raises:
        CapabilityUnavailable: ``seccomp_unavailable`` before Linux 5.5.
    """
    release = release or os.uname().release
    try:
        version = tuple(int(x) for x in release.split("-")[0].split(".")[:2])
    except ValueError:
        version = (0, 0)
    if version < (5, 5):
        raise CapabilityUnavailable(f"report_denials needs Linux 5.5 or later (seccomp notifications answered "
                                    f"with CONTINUE); this kernel is {release}", Reason.SECCOMP_UNAVAILABLE)


def refused_calls(policy) -> dict:
    """``{(audit arch, number): (name, errno)}``: the calls the report-mode filter notifies
    that the observer refuses, for ``policy``."""
    calls = dict.fromkeys(_seccomp.KEYRING_CALLS, _seccomp.KEYRING_ERRNO)
    calls.update((c, _seccomp.OPT_IN_ERRNO) for c in _seccomp.OPT_IN_CALLS if c not in policy.allow_syscalls)
    if not policy.allow_io_uring:
        calls.update(dict.fromkeys(_seccomp.IO_URING_CALLS, _seccomp.IO_URING_ERRNO))
    out = {}
    for abi, arch in (("x86_64", _seccomp.AUDIT_ARCH_X86_64), ("i386", _seccomp.AUDIT_ARCH_I386)):
        for name, err in calls.items():
            out[(arch, _seccomp.NR[abi][name])] = (name, err)
    return out


class Observer:
    """The launcher's side of one sandbox's notification listener (module docstring).
    ``their_fd`` goes to the launch (``Launch.notify_socket``); :meth:`begin` before the
    spawn, :meth:`start` after it; :meth:`finish` once the command was reaped."""

    def __init__(self, policy, by_session: bool = False):
        check_kernel()
        self._by_session = by_session   # a session's server: records keyed by the caller's session id
        self._begun = self._handled = 0
        self._settled = threading.Condition()
        self._refused = refused_calls(policy)
        self._connect = policy.network.mode != "allow"
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener = -1
        self._received = False   # the listener came (the observer may have closed it since)
        self._records: dict = {}   # (session id or None, kind, target) -> Denial
        self._lock = threading.Lock()
        self._cuts: dict = {}      # session id or None -> distinct targets dropped
        self._held: dict = {}      # session id or None -> distinct targets held
        self._stop = False
        self._thread = None

    @property
    def their_fd(self) -> int:
        return self._theirs.fileno()

    def begin(self) -> None:
        """Before the spawn: the observer thread waits for the listener, so a call the
        setup itself makes after loading the filter (the terminal's pty, native) is
        answered while the launcher still waits for the command's exec."""
        self._thread = threading.Thread(target=self._serve, name="pysandbox-denials", daemon=True)
        self._thread.start()

    def start(self) -> None:
        """After the spawn (the setup sent the listener before the command's exec):
        check the observer holds it.

        Raises:
            SetupError: no listener came (``setup_failed``, stage ``seccomp``); the caller
                ends the sandbox.
        """
        self._theirs.close()   # ours only now: the setup closed its copy
        if not self._take():
            raise SetupError("report_denials: the sandbox's setup sent no seccomp listener", Reason.SETUP_FAILED,
                             stage="seccomp")

    def _take(self) -> bool:
        """The listener, if it came (either thread; once)."""
        with self._lock:
            if self._listener < 0 and self._ours.fileno() >= 0:
                # close-on-exec at once (fdrecv.py): no other child of the launcher may
                # ever hold it (it could answer CONTINUE to the filter's refusals)
                try:
                    _, fds = receive(self._ours, 1, 1, socket.MSG_DONTWAIT)
                except OSError:
                    fds = []
                if fds:
                    self._listener, self._received = fds[0], True
                    self._ours.close()
            # received, not held: a command that exited at once may already have ended the
            # observer (its listener hung up and closed) before the spawn returned (bwrap)
            return self._received

    def finish(self, wait: float = 2.0) -> None:
        """The command is gone: wait (at most ``wait`` seconds) for the listener to hang up
        (every process under the filter exited), then stop. Idempotent."""
        self._theirs.close()
        if self._thread is not None:
            if self._listener >= 0:
                self._thread.join(wait)
            self._stop = True
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._listener >= 0:
                os.close(self._listener)
                self._listener = -1
            self._ours.close()

    @property
    def denials(self) -> Denials:
        """Every record so far (a session's: of all its commands)."""
        with self._lock:
            out = Denials(self._records.values())
            out.cut = sum(self._cuts.values())
        return out

    def take(self, sid: int) -> Denials:
        """A session's command ended (its processes are gone): the records of the processes
        in its session (``sid``, the command's pid in the sandbox), removed from here. The
        notifications those processes made were all received before they died; this waits
        until the observer has handled each one it received so far."""
        with self._settled:
            target = self._begun
            self._settled.wait_for(lambda: self._handled >= target or self._thread is None, 5.0)
        with self._lock:
            keys = [k for k in self._records if k[0] == sid]
            out = Denials(self._records.pop(k) for k in keys)
            out.cut = self._cuts.pop(sid, 0)
            self._held.pop(sid, None)
        return out

    # -- the observer thread ------------------------------------------------------

    def _serve(self) -> None:
        while not self._take():
            if self._stop:
                return
            select.select([self._ours], [], [], 0.2)
        try:
            poll = select.poll()
            poll.register(self._listener, select.POLLIN)
            while not self._stop:
                events = poll.poll(200)
                if any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in events):
                    return   # no process left under the filter
                if events:
                    try:
                        self._one()
                    except OSError:
                        pass   # ENOENT: the caller died meanwhile; the kernel already answered it
        finally:
            # however the thread ends (an error of ours included), the listener closes:
            # the kernel then answers ENOSYS, no call waits for an observer that is gone
            with self._lock:
                if self._listener >= 0:
                    os.close(self._listener)
                    self._listener = -1

    def _one(self) -> None:
        buf = bytearray(NOTIF.size)   # zeroed, as the kernel requires
        fcntl.ioctl(self._listener, NOTIF_RECV, buf, True)
        with self._settled:
            self._begun += 1
        try:
            self._answer(*NOTIF.unpack(buf))
        finally:
            with self._settled:
                self._handled += 1
                self._settled.notify_all()

    def _answer(self, nid, pid, _flags, nr, arch, _ip, *args) -> None:
        sid = _session_of(pid) if self._by_session else None   # before the answer: it may exit after
        refused = self._refused.get((arch, nr))
        if refused is not None:
            self._reply(nid, refused[1])
            self._record("syscall", refused[0], refused[1], pid, sid)
            return
        if arch != _seccomp.AUDIT_ARCH_X86_64 or (nr not in _calls.BY_NR and nr != _calls.CONNECT_NR):
            self._reply(nid, _errno.EPERM)   # never selected by our filter: refuse
            return
        seen = None
        try:
            seen = self._read(pid, nr, args)
            fcntl.ioctl(self._listener, NOTIF_ID_VALID, struct.pack("=Q", nid))
        except Exception:   # noqa: BLE001 - whatever the command's memory held: no record
            if nr != _calls.CONNECT_NR and seen:
                _close_bases(seen)
            seen = None   # gone, or memory we cannot read: no record
        finally:
            self._reply(nid, 0)   # the kernel decides
        if seen is not None:
            try:
                self._classify(pid, nr, seen, sid)
            except Exception:   # noqa: BLE001 - a record is best effort, the answer was given
                pass

    def _reply(self, nid: int, err: int) -> None:
        resp = RESP.pack(nid, 0, -err, 0 if err else FLAG_CONTINUE)
        fcntl.ioctl(self._listener, NOTIF_SEND, bytearray(resp), True)

    def _read(self, pid: int, nr: int, args):
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if nr == _calls.CONNECT_NR:
                return os.pread(fd, min(args[2] & 0xFFFFFFFF, 128), args[1]) if args[1] else None
            paths = []   # (where the path starts, an O_PATH descriptor; the path)
            try:
                for dirfd_arg, path_arg in _calls.BY_NR[nr][1]:
                    dirfd = _calls.AT_FDCWD if dirfd_arg is None else _signed(args[dirfd_arg])
                    path = _cstring(fd, args[path_arg])
                    if path:
                        paths.append((base_fd(pid, dirfd, path), path))
            except OSError:
                _close_bases(paths)
                raise
            return paths
        finally:
            os.close(fd)

    def _classify(self, pid: int, nr: int, seen, sid) -> None:
        if nr == _calls.CONNECT_NR:
            target = _address(seen)
            if target is not None and self._connect:
                self._record("connect", target, KIND_ERRNO["connect"], pid, sid)
            return
        try:
            for start, path in seen:
                if read_only_target(start, path):
                    self._record("write", os.fsdecode(path), KIND_ERRNO["write"], pid, sid)
                    return
        finally:
            _close_bases(seen)

    def _record(self, kind: str, target: str, err: int, pid: int, sid=None) -> None:
        key = (sid, kind, target)
        with self._lock:
            old = self._records.get(key)
            if old is not None:
                self._records[key] = Denial(kind, target, old.errno, old.pid, old.count + 1)
            elif self._held.get(sid, 0) < MAX_RECORDS and len(self._records) < MAX_TOTAL:
                self._records[key] = Denial(kind, target, err, pid)
                self._held[sid] = self._held.get(sid, 0) + 1
            else:
                self._cuts[sid] = self._cuts.get(sid, 0) + 1


def _session_of(pid: int):
    """The session id of host process ``pid`` as its innermost pid namespace numbers it
    (``NSsid``: a session's command is its session's leader), or None."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSsid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _close_bases(paths) -> None:
    for start, _path in paths:
        os.close(start)


def _signed(value: int) -> int:
    value &= 0xFFFFFFFF   # an int argument: the low 32 bits
    return value - (1 << 32) if value >= 1 << 31 else value


def _cstring(fd: int, addr: int) -> bytes:
    """The NUL-terminated string at ``addr`` (at most PATH_MAX bytes), read a page at most
    at a time so an unmapped page after it does not fail the read."""
    out = b""
    while addr and len(out) < PATH_MAX:
        chunk = os.pread(fd, min(4096 - addr % 4096, PATH_MAX - len(out)), addr)
        if not chunk:
            break
        end = chunk.find(b"\0")
        if end >= 0:
            return out + chunk[:end]
        out += chunk
        addr += len(chunk)
    return out


def _address(raw: bytes | None) -> str | None:
    """``addr:port`` of an IPv4/IPv6 sockaddr off loopback, else None."""
    if not raw or len(raw) < 2:
        return None
    family = struct.unpack_from("=H", raw)[0]
    if family == socket.AF_INET and len(raw) >= 8:
        addr = ipaddress.IPv4Address(raw[4:8])
        port = struct.unpack_from("!H", raw, 2)[0]
        return None if addr.is_loopback else f"{addr}:{port}"
    if family == socket.AF_INET6 and len(raw) >= 24:
        addr6 = ipaddress.IPv6Address(raw[8:24])
        port = struct.unpack_from("!H", raw, 2)[0]
        mapped = addr6.ipv4_mapped
        if addr6.is_loopback or (mapped is not None and mapped.is_loopback):
            return None
        return f"[{addr6}]:{port}"
    return None
