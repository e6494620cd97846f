"""The proxy's share of the launcher's descriptor table.

The engine runs in the launcher's process (the embedding program), and every connection
it serves costs that process descriptors: the client's socket from ``accept()``, and
once connected the upstream's: two for a tunnel. The launcher's soft ``RLIMIT_NOFILE``
is usually 1024, so a proxy that served as many connections as a sandbox opens would
leave the program itself without descriptors (its ``open()`` failing with EMFILE, its
next launch failing). Every engine of the process therefore draws on one
:class:`DescriptorPool`, which allows at most

    connections = (soft RLIMIT_NOFILE - reserve - descriptors open not held by the proxy) // 2
    reserve     = max(RESERVE_MIN, soft RLIMIT_NOFILE // RESERVE_DIVISOR)   (a quarter, at least 64)

at once, measured when an engine starts and again while one waits at the budget (at
most once a second: a program that closed descriptors gives them back, one that opened
more takes them from the proxy). Each engine also keeps its own cap
(``EgressProxy(max_connections=)``): it serves ``min(max_connections, what the pool
has left)``. The reserve is what the embedding program, its other launches and the
proxy's resolver threads can still open while every proxy of the process is at its
budget. With the usual soft limit of 1024 and some 20 descriptors open, that is 256
descriptors kept and about 370 connections served; at 256, 64 kept and about 86.
"""

from __future__ import annotations

import os
import resource
import threading

__all__ = ["RESERVE_DIVISOR", "RESERVE_MIN", "DescriptorPool", "POOL", "open_descriptors", "reserve_for"]

PER_CONNECTION = 2       # the client's socket and the upstream's
RESERVE_MIN = 64
RESERVE_DIVISOR = 4
_NO_LIMIT = 1 << 20      # RLIM_INFINITY read as the kernel's default nr_open


def soft_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return _NO_LIMIT if soft == resource.RLIM_INFINITY or soft > _NO_LIMIT else soft


def reserve_for(soft: int) -> int:
    """The descriptors kept free for the program when the proxy is at its budget."""
    return max(RESERVE_MIN, soft // RESERVE_DIVISOR)


def open_descriptors(soft: int) -> int:
    """How many descriptors this process has open (``/proc/self/fd``, less the one the
    listing itself holds); without procfs, a quarter of the limit is assumed."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(os.listdir(where)) - 1)
        except OSError:
            continue
    return soft // 4


class DescriptorPool:
    """The connections every engine of this process may hold together (the module's
    docstring has the formula). ``take()``/``give()`` a connection's slot; ``opened(n)``
    and ``closed(n)`` count the descriptors the engines hold, so that ``measure()``
    sees what the rest of the program holds."""

    def __init__(self):
        self._lock = threading.Lock()
        self.connections = 0      # slots taken, each good for PER_CONNECTION descriptors
        self.descriptors = 0      # descriptors the engines hold now
        self.limit = 0            # connections allowed, as of the last measure()
        self.soft = self.reserve = self.others = 0   # the figures of the last measure()

    def measure(self) -> int:
        """Compute :attr:`limit` from the limit and the descriptors open now; return it."""
        soft = soft_limit()
        opened = open_descriptors(soft)
        with self._lock:
            others = max(0, opened - self.descriptors)
            reserve = reserve_for(soft)
            self.soft, self.reserve, self.others = soft, reserve, others
            self.limit = max(0, (soft - reserve - others) // PER_CONNECTION)
            return self.limit

    def take(self) -> bool:
        """A slot for one more connection, if the budget has one."""
        with self._lock:
            if self.connections >= self.limit:
                return False
            self.connections += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.connections = max(0, self.connections - 1)

    def opened(self, n: int = 1) -> None:
        with self._lock:
            self.descriptors += n

    def closed(self, n: int = 1) -> None:
        with self._lock:
            self.descriptors = max(0, self.descriptors - n)


POOL = DescriptorPool()   # one per process: every engine of the launcher shares it
