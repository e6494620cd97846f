"""Descriptors received over a unix socket (SCM_RIGHTS), close-on-exec from the moment
they arrive: the sandbox's setup sends the launcher a proxy listener, a pty master, a
seccomp listener. Any other child of the launcher (a thread's ``os.system``, a library's
``fork``/``exec`` without ``close_fds``) must never inherit one. ``socket.recv_fds``
cannot promise that on CPython 3.11 (it drops its flags argument), so this asks the
kernel for ``MSG_CMSG_CLOEXEC`` with ``recvmsg`` itself.
"""

from __future__ import annotations

import array
import os
import socket

__all__ = ["receive"]


def receive(sock: socket.socket, bufsize: int, maxfds: int, flags: int = 0) -> tuple[bytes, list[int]]:
    """``(data, descriptors)`` of one message, every descriptor close-on-exec. Extra
    descriptors beyond ``maxfds`` (a truncated control message) are closed by the
    kernel; a partial one is never returned.

    Raises:
        OSError: as ``socket.recvmsg`` (``BlockingIOError`` with ``MSG_DONTWAIT``).
    """
    fds = array.array("i")
    data, anc, _, _ = sock.recvmsg(bufsize, socket.CMSG_LEN(maxfds * fds.itemsize), flags | socket.MSG_CMSG_CLOEXEC)
    for level, kind, cdata in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
    got = list(fds)
    for extra in got[maxfds:]:
        os.close(extra)
    return data, got[:maxfds]
