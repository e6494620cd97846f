"""``--die-with-parent`` ends bwrap itself, not only the sandbox, when bwrap's parent
dies: a shell that started it is SIGKILLed, then bwrap, its sandbox and its
``--lock-file`` lock are gone. Without the option (the live control) bwrap outlives
the shell, reparented, still holding the lock. /usr/bin/bwrap and pybwrap side by side."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.compat.harness import PYBWRAP
from tests.compat.test_launch import ENV, _write_lock_blocked, tool  # noqa: F401  (fixture)
from tests.support import host_capability, need, wait_until

WAIT = 60.0


def _gone(pid: int) -> bool:
    """Exited (a zombie counts: it holds no lock and runs nothing) or reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _start_under_shell(tool, lock, die_with_parent: bool):
    """A shell that starts ``tool`` in the background and waits; returns (shell, tool
    pid, sandboxed command's pid), once the sandbox runs."""
    opts = ["--die-with-parent"] if die_with_parent else []
    words = tool + opts + ["--ro-bind", "/", "/", "--lock-file", str(lock),
                           "sh", "-c", 'echo "$$"; exec sleep 1000']
    script = '"$@" & echo "$!"; wait'
    shell = subprocess.Popen(["sh", "-c", script, "sh", *words], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, env=ENV)
    tool_pid = int(shell.stdout.readline())
    inner = int(shell.stdout.readline())   # no pid namespace: the host pid
    return shell, tool_pid, inner


def _kill_shell(shell) -> None:
    shell.kill()
    shell.wait(timeout=WAIT)
    shell.stdout.close()


def test_die_with_parent_ends_bwrap_when_its_parent_is_killed(tool, tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("")
    shell, tool_pid, inner = _start_under_shell(tool, lock, die_with_parent=True)
    try:
        assert _write_lock_blocked(lock)                     # held while it runs
        _kill_shell(shell)
        assert wait_until(lambda: _gone(tool_pid), WAIT), f"{tool[0]} outlived its parent"
        assert wait_until(lambda: _gone(inner), WAIT), "the sandboxed command outlived bwrap"
        assert wait_until(lambda: not _write_lock_blocked(lock), WAIT), "the lock is still held"
    finally:
        for pid in (tool_pid, inner):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_without_die_with_parent_bwrap_outlives_its_parent(tool, tmp_path):
    """The live control: the same shell killed, bwrap stays (reparented) with its lock."""
    lock = tmp_path / "lock"
    lock.write_text("")
    shell, tool_pid, inner = _start_under_shell(tool, lock, die_with_parent=False)
    try:
        _kill_shell(shell)
        # Reparenting and a parent-death signal happen in the same step of the
        # shell's exit, which has been reaped: a signal would already be pending.
        assert wait_until(lambda: _gone(tool_pid) or _ppid(tool_pid) != shell.pid, WAIT)
        time.sleep(0.5)
        assert not _gone(tool_pid)
        assert not _gone(inner)
        assert _write_lock_blocked(lock)
    finally:
        for pid in (tool_pid, inner):   # ours, by pid
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not _write_lock_blocked(lock), WAIT)


def test_bind_to_parent_refuses_a_thread_other_than_main():
    import threading

    from bwrap_compat.lifeline import bind_to_parent
    box = {}

    def other():
        try:
            bind_to_parent(os.getppid())
        except RuntimeError as exc:
            box["error"] = exc

    t = threading.Thread(target=other)
    t.start()
    t.join(30)
    assert "error" in box


def test_only_the_entry_point_gets_a_death_signal():
    """cli.main(argv) called in-process (a library caller, a test) leaves the calling
    process's PR_SET_PDEATHSIG alone; main() reading sys.argv (the pybwrap process) sets it."""
    why = host_capability("native")
    if why is not None:
        need("native", why)
    code = ("import ctypes, sys\n"
            "from bwrap_compat.cli import main\n"
            "libc = ctypes.CDLL(None)\n"
            "def sig():\n"
            "    v = ctypes.c_int(-1); libc.prctl(2, ctypes.byref(v), 0, 0, 0); return v.value\n"  # PR_GET_PDEATHSIG
            "argv = ['--die-with-parent', '--ro-bind', '/', '/', 'true']\n"
            "assert main(argv) == 0\n"
            "print(sig())\n"
            "sys.argv = ['pybwrap'] + argv\n"
            "assert main() == 0\n"
            "print(sig())\n")
    out = subprocess.run([PYBWRAP[0], "-c", code], capture_output=True, text=True, timeout=WAIT, env=ENV)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", str(int(signal.SIGKILL))]
