"""The native backend's pid-1 init against a hostile command (THREAT_MODEL.md, lifetime rows).

Fork mode (``PYSANDBOX_NATIVE_NO_EXEC_INIT=1``, or where the memfd init cannot be
exec'd) keeps a private copy of the caller's memory as the sandbox's init. It must be
undumpable before the command's process exists: otherwise, between the command's exec
and the init's prctl, the command (same uid) could ptrace it and read the caller's
memory and descriptors. ``status`` says which init runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import pysandbox
from pysandbox.backends.native import NO_EXEC_INIT_ENV
from pysandbox.backends.native.probe import probe_native
from tests.support import host_capability, need

pytestmark = [pytest.mark.requires("userns")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LAUNCH = r'''
import json, sys
import pysandbox
probe = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name in ("environ", "mem", "fd"):
    try:
        p = "/proc/1/" + name
        if name == "fd":   # the fd numbers may be listed (DAC); what they name must not be
            [os.readlink(p + "/" + n) for n in os.listdir(p)]
        else:
            open(p, "rb").read(1)
        out[name] = "readable"
    except OSError as exc:
        out[name] = exc.errno
PTRACE_ATTACH = 16
r = libc.ptrace(PTRACE_ATTACH, 1, None, None)
out["ptrace"] = "attached" if r == 0 else ctypes.get_errno()
try:   # live control: the same reads of the command's own process work
    open("/proc/self/environ", "rb").read(1)
    os.readlink("/proc/self/fd/0")
    out["control"] = "ok"
except OSError as exc:
    out["control"] = exc.errno
print(json.dumps(out))
"""
done = pysandbox.run([sys.executable, "-I", "-c", probe], policy=pysandbox.Policy.default(),
                     backend="native", capture_output=True, timeout=60)
print(done.stdout.decode().strip().splitlines()[-1])
'''


def _native():
    why = host_capability("native")
    if why is not None:
        need("native", why)


def test_fork_mode_init_is_undumpable_before_the_command_exists(tmp_path):
    _native()
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("not applicable here: strace(1) is not installed (the ordering is read from a trace)")
    trace = tmp_path / "trace"
    env = dict(os.environ, **{NO_EXEC_INIT_ENV: "1"}, PYTHONPATH=ROOT)
    done = subprocess.run([strace, "-f", "-qq", "-e", "trace=prctl,clone,clone3", "-o", str(trace),
                           sys.executable, "-c", LAUNCH], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    res = json.loads(done.stdout.decode().strip().splitlines()[-1])
    # The command cannot reach its init: no memory, no environment, no descriptors, no ptrace.
    assert res["environ"] != "readable" and res["mem"] != "readable" and res["fd"] != "readable", res
    assert res["ptrace"] != "attached", res
    assert res["control"] == "ok", res
    lines = trace.read_text().splitlines()
    # The launcher's line comes first (every other process is a child it cloned). It
    # clones with CLONE_VM|CLONE_VFORK too, for its probes (native/psb_probe.c).
    launcher = lines[0].split()[0]
    # The init: the other process that clones the command with CLONE_VM|CLONE_VFORK (fork mode).
    vfork = [ln for ln in lines if ln.split()[0] != launcher
             and re.search(r"clone3?\(.*CLONE_VM.*CLONE_VFORK|clone3?\(.*CLONE_VFORK.*CLONE_VM", ln)]
    assert vfork, "no fork-mode clone in the trace (live control: fork mode must have run)\n" + "\n".join(lines[-40:])
    init_pid = vfork[0].split()[0]
    mine = [ln for ln in lines if ln.split()[0] == init_pid]
    first_clone = next(i for i, ln in enumerate(mine) if "CLONE_VFORK" in ln)
    dumpable = [i for i, ln in enumerate(mine) if "PR_SET_DUMPABLE, 0" in ln or "PR_SET_DUMPABLE, SUID_DUMP_DISABLE" in ln]
    assert dumpable and dumpable[0] < first_clone, "\n".join(mine)


def test_status_names_the_init_mode(monkeypatch):
    _native()
    from pysandbox.backends import native as N
    default = probe_native(pysandbox.Policy.default())
    assert default.info["init_mode"] == ("exec" if N.init_fd() >= 0 else "fork")
    assert probe_native(pysandbox.Policy.default(as_pid_1=True)).info["init_mode"] == "none"
    monkeypatch.setenv(NO_EXEC_INIT_ENV, "1")
    assert probe_native(pysandbox.Policy.default()).info["init_mode"] == "fork"
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "pysandbox", "status"], env=env, capture_output=True,
                         text=True, timeout=120).stdout
    assert "init_mode fork" in out, out
    env.pop(NO_EXEC_INIT_ENV)
    out = subprocess.run([sys.executable, "-m", "pysandbox", "status", "--json"], env=env, capture_output=True,
                         text=True, timeout=120).stdout
    assert json.loads(out)["backends"]["native"]["info"]["init_mode"] in ("exec", "fork")
