"""The bwrap backend's init speaks the Plan: the setup tail it runs is the native
executor's op array (:func:`tail_ops`: :func:`~.native_translate.translate`'s ops for the
tail steps, with the init's own checks of the binds bwrap made), packed into a sealed
memfd (:func:`plan_memfd`; native/psb_bwrap_init.c reads and validates it), and its
failure record ``{stage, op index, errno}`` reads as the native backend's own
(:func:`failure`, by :func:`~.native_errors.setup_error`): a tail failure names the same
plan step on both backends.
"""

from __future__ import annotations

import fcntl
import os
import struct

from ... import plan as P
from ...errors import BackendUnavailable, Reason, SetupError
from .. import landlock
from ..native.native_errors import setup_error
from ..native.native_host import HostView, cap_last_cap
from ..native_ops import OP, COp, Compiled, pack
from ..native.native_translate import translate

# The plan op types whose native ops the init runs, and the op kinds it accepts of them.
TAIL_TYPES = (P.ProxyListener, P.DropCapabilities, P.NoNewPrivs, P.Seccomp)
TAIL_KINDS = ("LISTEN", "MOUNT_PRIVATE", "RO_COVER", "CAPS", "NNP", "INIT", "LANDLOCK", "SECCOMP", "RLIMIT")

# native/psb.h: struct psb_tail_hdr and struct psb_op (x86_64; tests/unit/test_bwrap_tail.py
# checks both sizes against the compiled module).
HEADER = struct.Struct("<IIiiiiiiQii")
OP_RECORD = struct.Struct("<6i3q")
MAGIC = 0x54425350   # PSB_PLAN_MAGIC, "PSBT"
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


_HOSTS: dict[int, HostView] = {}   # by Landlock ABI (cap_last_cap is the kernel's, read once)
# (plan, host, binds) -> (ops, Compiled, the op records): a plan's array is made once
# (its translation costs more than the launch may; the binds' identities are stable).
_cache: dict = {}


def _host() -> HostView:
    abi = landlock.abi()
    host = _HOSTS.get(abi)
    if host is None:
        host = _HOSTS[abi] = HostView(last_cap=cap_last_cap(), landlock_abi=abi)
    return host


def _bind_index(plan: P.Plan, dest: str) -> int | None:
    return next((i for i in range(len(plan.ops) - 1, -1, -1)
                 if isinstance(plan.ops[i], P.BindMount) and plan.ops[i].dest == dest), None)


def tail_ops(plan: P.Plan, binds, host=None) -> list[COp]:
    """The op array our init runs for ``plan``: the native executor's own ops for the
    tail (LISTEN, before anything of the command exists; MOUNT_PRIVATE and the procfs
    covers, RO_COVER; CAPS, NNP, INIT, LANDLOCK, SECCOMP, RLIMIT), with the init's bind
    checks (BIND_CHECK: ``binds`` from bwrap_init.bind_identities) right before CAPS.
    Every op names its plan step."""
    tail = [op for op in translate(plan, host or _host(), only=TAIL_TYPES) if op.kind in TAIL_KINDS]
    checks = [COp("BIND_CHECK", b=dest, n=dev, m=ino, stage="bind", plan_index=_bind_index(plan, dest),
                  reason=Reason.BIND_SOURCE_CHANGED, filename=dest) for dest, dev, ino in binds]
    at = next(k for k, op in enumerate(tail) if op.kind == "CAPS")
    return tail[:at] + checks + tail[at:]


def pack_plan(plan: P.Plan, ops: list[COp], *, exec_mode: bool, gate: int | None = None,
              pty: tuple[int, int, int] | None = None, proxy_socket: int | None = None,
              notify_socket: int | None = None) -> tuple[bytes, Compiled]:
    """The memfd's bytes (native/psb.h struct psb_tail_hdr, the ops, the string table)
    and the :class:`Compiled` that reads its failures.

    Raises:
        SetupError: network proxy mode without the launcher's proxy socket.
        BackendUnavailable (bwrap_init_unavailable): report_denials without the
            launcher's notification socket.
    """
    return _pack(plan, ops, _body(plan, ops), exec_mode, gate, pty, proxy_socket, notify_socket)


def _body(plan: P.Plan, ops: list[COp]) -> tuple[Compiled, bytes]:
    compiled = pack(plan, ops)
    records = b"".join(OP_RECORD.pack(OP[op.kind], op.flags, a, b, c, d, op.n, op.m, op.mode)
                       for op, (a, b, c, d) in zip(ops, compiled.offsets))
    return compiled, records + compiled.strtab


def _pack(plan, ops, body, exec_mode, gate, pty, proxy_socket, notify_socket) -> tuple[bytes, Compiled]:
    if any(op.kind == "LISTEN" for op in ops) and proxy_socket is None:
        raise SetupError("network proxy mode needs the launcher's proxy socket", Reason.SETUP_FAILED,
                         stage="proxy listener")
    if any(op.kind == "SECCOMP" and op.m == 1 for op in ops) and notify_socket is None:
        raise BackendUnavailable("report_denials on the bwrap backend needs the launcher's notification socket",
                                 Reason.BWRAP_INIT_UNAVAILABLE)
    compiled, rest = body
    pty_fd, pty_stdio, winsize = pty if pty is not None else (-1, 0, 0)
    head = HEADER.pack(MAGIC, _abi(), len(ops), len(compiled.strtab), int(exec_mode),
                       -1 if gate is None else gate, pty_fd, pty_stdio, winsize,
                       -1 if proxy_socket is None else proxy_socket, -1 if notify_socket is None else notify_socket)
    return head + rest, compiled


def launch_plan(plan: P.Plan, binds, *, exec_mode: bool, **fds) -> tuple[bytes, Compiled]:
    """:func:`pack_plan` of :func:`tail_ops`, the array made once per plan (and binds);
    ``fds``: as pack_plan's (gate, pty, proxy_socket, notify_socket)."""
    host = _host()
    key = (plan, host, tuple(binds))
    got = _cache.get(key)
    if got is None:
        ops = tail_ops(plan, binds, host)
        if len(_cache) >= 64:
            _cache.clear()
        _cache[key] = got = (ops, _body(plan, ops))
    ops, body = got
    return _pack(plan, ops, body, exec_mode, fds.get("gate"), fds.get("pty"), fds.get("proxy_socket"),
                 fds.get("notify_socket"))


def _abi() -> int:
    from .._native_lib import ABI_VERSION
    return ABI_VERSION


def plan_memfd(data: bytes) -> int:
    """A memfd holding ``data``, sealed against any change (write, shrink, grow, new
    seals) before anyone else can see it; close-on-exec (the launcher passes it to bwrap,
    whose init closes it before the command exists)."""
    fd = os.memfd_create("psb-tail-plan", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def failure(compiled: Compiled, plan: P.Plan, stage: int, index: int, err: int, exe: str) -> Exception:
    """The typed error for our init's failure record, as the native backend reads its own
    (``index``: the op in the memfd's array, -1 for none)."""
    if index >= 0x80000000:
        index -= 1 << 32
    return setup_error(compiled, stage, index, err, exe, plan.namespaces)
