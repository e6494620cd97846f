"""Namespaces for the join tests (Policy.userns_fd/pidns_fd/userns2_fd, pybwrap's
--userns/--pidns/--userns2): a process made by the test that holds them.

``holder()`` starts ``unshare -Urpf --mount-proc`` (a user namespace A mapping the
caller to 0, a pid namespace P owned by A) whose pid 1 is ``sleep``; with
``inner_user=True`` the sleep sits in one more user namespace B, a child of A with no
id maps. It yields descriptors for A, P and B and the host pids, and ends the holder
by its pid (never by name); every wait is bounded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import time

from tests.support import need


@dataclasses.dataclass
class Held:
    user: int            # descriptor of user namespace A
    pid: int             # descriptor of pid namespace P (the sleep is its pid 1)
    user2: int | None    # descriptor of user namespace B (inner_user=True)
    sleeper: int         # host pid of the sleep
    ids: dict            # "user", "pid", "user2": the namespaces' links (user:[N])


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s children (none if it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


@contextlib.contextmanager
def holder(*, inner_user: bool = False):
    tool = shutil.which("unshare")
    if tool is None:
        need("userns", "util-linux unshare(1) missing")
    inner = "exec unshare -U sleep 300" if inner_user else "exec sleep 300"
    proc = subprocess.Popen([tool, "-Urpf", "--kill-child", "--mount-proc", "sh", "-c", inner],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    fds: list[int] = []
    sleeper = None
    try:
        for _ in range(200):                       # bounded: up to 10 s to reach the sleep
            kids = children(proc.pid)
            if kids and _comm(kids[0]) == "sleep":
                sleeper = kids[0]
                break
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        if sleeper is None:
            err = proc.stderr.read().decode() if proc.poll() is not None else "timed out"
            need("userns", f"unshare -Urpf could not hold namespaces here: {err.strip()}")
        links = {"user": f"/proc/{proc.pid}/ns/user", "pid": f"/proc/{sleeper}/ns/pid"}
        if inner_user:
            links["user2"] = f"/proc/{sleeper}/ns/user"
        opened = {}
        for name, link in links.items():
            opened[name] = os.open(link, os.O_RDONLY | os.O_CLOEXEC)
            fds.append(opened[name])
        ids = {name: os.readlink(link) for name, link in links.items()}
        yield Held(opened["user"], opened["pid"], opened.get("user2"), sleeper, ids)
    finally:
        for fd in fds:
            os.close(fd)
        if sleeper is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(sleeper, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()
