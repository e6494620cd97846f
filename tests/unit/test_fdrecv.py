"""pysandbox/fdrecv.py: a descriptor from the sandbox's setup (a proxy listener, a pty
master, a seccomp listener) is close-on-exec the moment it arrives, so no other child of
the launcher inherits it. Live control: the same message received without
MSG_CMSG_CLOEXEC gives a descriptor a child would inherit."""

from __future__ import annotations

import array
import fcntl
import os
import socket

from pysandbox.fdrecv import receive


def _send(sock, fds):
    socket.send_fds(sock, [b"x"], fds)


def _cloexec(fd) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)


def test_received_descriptors_are_close_on_exec_and_extras_are_closed():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    r, w = os.pipe()
    try:
        _send(a, [r, w])
        data, fds = receive(b, 1, 1)
        assert data == b"x" and len(fds) == 1 and _cloexec(fds[0])
        assert os.path.samestat(os.fstat(fds[0]), os.fstat(r))
        os.close(fds[0])
        # control: without the flag the kernel hands over an inheritable descriptor
        _send(a, [r])
        _, anc, _, _ = b.recvmsg(1, socket.CMSG_LEN(4))
        raw = array.array("i")
        raw.frombytes(anc[0][2][:4])
        try:
            assert not _cloexec(raw[0])
        finally:
            os.close(raw[0])
    finally:
        for fd in (r, w):
            os.close(fd)
        a.close()
        b.close()
