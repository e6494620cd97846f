"""A TCP server on the host's 127.0.0.1 for the proxy tests, one thread per connection:
``LoopbackServer(handle)`` calls ``handle(conn)`` for each client (``hits`` counts
them); :func:`echo` sends back every byte, :func:`one_line` answers ``HOST-ECHO`` and
closes."""

from __future__ import annotations

import socket
import threading


def echo(conn: socket.socket) -> None:
    while data := conn.recv(65536):
        conn.sendall(data)


def one_line(conn: socket.socket) -> None:
    conn.sendall(b"HOST-ECHO\n")


class LoopbackServer:
    def __init__(self, handle=echo, backlog: int = 256):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._handle = handle
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            try:
                self._handle(conn)
            except OSError:
                pass

    def close(self):
        # close() alone does not wake a thread blocked in accept(); shutdown() does
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(10)
        assert not self._thread.is_alive()
