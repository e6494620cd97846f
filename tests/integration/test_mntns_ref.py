"""The launcher's reference to a sandbox's mount namespace (native/psb_nsref.c): held
from the clone so the unmount of the sandbox's tree happens on the closer thread, not
inside the caller's waitpid. What a hostile or careless party could do with it: keep
the namespace alive (it must be dropped once the sandbox is reaped, also after a failed
launch), or receive it (it must never reach a child: close-on-exec, and a sandbox's
setup marks every inherited descriptor close-on-exec). Each test shows, as its live
control, that the check sees the reference where it is."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

import pysandbox
from pysandbox import policy as PP
from pysandbox.backends import native as N
from pysandbox.errors import SetupError
from tests.reliability.leaks import open_fds

pytestmark = pytest.mark.requires("userns", "native")

LIST_FDS = [sys.executable, "-c", "import os\nfor n in os.listdir('/proc/self/fd'):\n"
            "    try: print(os.readlink('/proc/self/fd/' + n))\n    except OSError: pass"]


def mnt_fds() -> dict[int, str]:
    """This process's descriptors naming a mount namespace: {fd: 'mnt:[inode]'}."""
    return {fd: link for fd, link in open_fds() if link.startswith("mnt:[")}


def waiting(**kw) -> pysandbox.SandboxProcess:
    """A native sandbox whose command waits for its stdin to close."""
    return pysandbox.Popen(["cat"], policy=PP.Policy.default(), backend="native",
                           stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, **kw)


def held_by(proc) -> int:
    """The launcher's descriptor naming ``proc``'s mount namespace (its pid 1's)."""
    theirs = os.readlink(f"/proc/{proc.pid}/ns/mnt")
    assert theirs != os.readlink("/proc/self/ns/mnt")
    fds = [fd for fd, link in mnt_fds().items() if link == theirs]
    assert len(fds) == 1, (theirs, mnt_fds())
    return fds[0]


def finish(proc) -> None:
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0


def test_held_while_the_sandbox_runs_and_dropped_after_the_reap():
    N.drain_closes()
    before = mnt_fds()
    proc = waiting()
    try:
        fd = held_by(proc)   # live control: the reference exists while the sandbox runs
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    finally:
        finish(proc)
    N.drain_closes()
    assert mnt_fds() == before


def test_many_launches_and_failures_leave_no_reference():
    N.drain_closes()
    before = mnt_fds()
    pol = PP.Policy.default()
    # mqueue without an ipc namespace of its own: the kernel refuses that mount (EPERM)
    refused = pol.replace(namespaces=pol.namespaces - {"ipc"}, fs=pol.fs + (PP.Mqueue("/dev/mqueue"),))
    for _ in range(30):
        assert pysandbox.run(["true"], policy=pol, backend="native").returncode == 0
        with pytest.raises(FileNotFoundError):   # setup ran, the exec failed
            pysandbox.run(["/no/such/program"], policy=pol, backend="native")
        with pytest.raises(SetupError):          # a setup step failed
            pysandbox.run(["true"], policy=refused, backend="native")
    proc = waiting()
    try:
        held_by(proc)   # live control: the count below would see a reference
        N.drain_closes()   # the clone-time namespace's reference, dropped at the exec
        assert len(mnt_fds()) == len(before) + 1
    finally:
        finish(proc)
    N.drain_closes()
    assert mnt_fds() == before


def test_a_plain_child_never_inherits_it():
    proc = waiting()
    try:
        theirs = os.readlink(f"/proc/{proc.pid}/ns/mnt")
        fd = held_by(proc)
        seen = subprocess.run(LIST_FDS, close_fds=False, capture_output=True, text=True, check=True).stdout
        assert theirs not in seen.split()
        # live control: the same listing shows it when the child is given it
        given = subprocess.run(LIST_FDS, pass_fds=(fd,), capture_output=True, text=True, check=True).stdout
        assert theirs in given.split()
    finally:
        finish(proc)


def test_another_sandbox_never_inherits_it():
    proc = waiting()
    try:
        theirs = os.readlink(f"/proc/{proc.pid}/ns/mnt")
        fd = held_by(proc)
        pol = PP.Policy.default()
        seen = pysandbox.run(LIST_FDS, policy=pol, backend="native", capture_output=True, text=True).stdout
        assert theirs not in seen.split()
        # live control: a sandbox given the descriptor lists it
        given = pysandbox.run(LIST_FDS, policy=pol, backend="native", capture_output=True, text=True,
                              pass_fds=(fd,)).stdout
        assert theirs in given.split()
    finally:
        finish(proc)


def test_a_fork_of_the_launcher_does_not_keep_the_reference():
    """A fork without exec (a multiprocessing worker) would keep a running sandbox's
    namespace alive for its own life: its copy is closed in the child (at-fork hook).
    Live control: an untracked duplicate made before the fork is still seen there."""
    proc = waiting()
    try:
        fd = held_by(proc)
        theirs = os.readlink(f"/proc/{proc.pid}/ns/mnt")
        dup = os.dup(fd)
        try:
            pid = os.fork()
            if pid == 0:
                def names(n):
                    try:
                        return os.readlink(f"/proc/self/fd/{n}") == theirs
                    except OSError:
                        return False
                os._exit(0 if not names(fd) and names(dup) else 1)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
        finally:
            os.close(dup)
        assert held_by(proc) == fd   # the parent still holds its own
    finally:
        finish(proc)
