"""The denial observer answers exactly as the filter would (pysandbox/denials.py): the
kernel-surface probes of tests/security/bpf_harness.py (keyrings, io_uring, the opt-in
calls, socket families; the i386 entry too) give the same results with
``report_denials`` on and off, on both backends (the "off" run is the live control of
every refusal), and a command that hands the observer hostile arguments (a path with no
end, a pointer to nowhere) gets the kernel's own answers and leaves no record.
"""

from __future__ import annotations

import errno
import json
import os
import sys

import pytest

import pysandbox
from tests.security import bpf_harness

pytestmark = pytest.mark.requires("userns")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SURFACE = f'''
import json, sys
sys.path.insert(0, {ROOT!r})
from tests.security import bpf_harness as h
print(json.dumps({{"keyring": h.keyring_probe(), "io_uring": h.io_uring_probe(), "opt_in": h.opt_in_probe(),
                  "families": h.family_probe(), "int80": h.int80_surface_probe(),
                  "int80_opt_in": h.int80_opt_in_probe()}}))
'''


def _surface(backend, tmp_path, report):
    pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=report)
    done = pysandbox.run([sys.executable, "-c", SURFACE], policy=pol, backend=backend, capture_output=True,
                         timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().splitlines()[-1]), done.denials


def test_the_observer_answers_as_the_filter(backend, tmp_path):
    assert bpf_harness.KERNEL_SURFACE_SOURCE   # the probes the filter's own tests use
    off, none = _surface(backend, tmp_path, False)
    on, denials = _surface(backend, tmp_path, True)
    assert none is None
    assert on == off
    assert off["int80"]["keyctl"] == errno.EPERM and off["int80"]["io_uring_enter"] == errno.ENOSYS
    names = {d.target for d in denials if d.kind == "syscall"}
    assert {"keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "bpf",
            "perf_event_open", "userfaultfd"} <= names, denials


HOSTILE = r'''
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *a):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
    return 0 if r >= 0 else ctypes.get_errno()
endless = ctypes.create_string_buffer(b"/etc/" + b"a" * (1 << 20), (1 << 20) + 5)   # no NUL in it
out = {"endless": call(2, endless, os.O_WRONLY | os.O_CREAT, 0o644),       # open: ENAMETOOLONG
       "nowhere": call(2, 8, os.O_WRONLY | os.O_CREAT, 0o644),             # a pointer to nothing: EFAULT
       "connect_nowhere": call(42, 0, 8, 16),                             # EBADF or EFAULT, never a record
       "mkdir_nowhere": call(83, 8, 0o755)}
print(json.dumps(out))
'''


def test_hostile_arguments_get_the_kernels_answer_and_no_record(backend, tmp_path):
    pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True)
    done = pysandbox.run([sys.executable, "-I", "-c", HOSTILE], policy=pol, backend=backend, capture_output=True,
                         timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout.decode().splitlines()[-1])
    assert out == {"endless": errno.ENAMETOOLONG, "nowhere": errno.EFAULT,
                   "connect_nowhere": out["connect_nowhere"], "mkdir_nowhere": errno.EFAULT}
    assert out["connect_nowhere"] in (errno.EBADF, errno.ENOTSOCK, errno.EFAULT)
    assert list(done.denials) == []
