"""A sandboxed command cannot leave a setuid or setgid file in a writable host path.

Why: inside its user namespace a root caller's command still has kernel uid 0, so a
file it creates in the workdir is owned by root on the host; the owner may set the
setuid bit without any capability, and the host (where the workdir is not nosuid)
would run that file as root for whoever executes it. An unprivileged caller's
command could leave a setuid-to-the-caller file the same way. Every way to set the
bits is tried (chmod, fchmod, fchmodat, creating with the mode: open, openat, creat,
mknod, mknodat; openat2, whose mode seccomp cannot read, is refused whole); the
live controls are the same calls without the bits inside, and with the bits outside.
"""

from __future__ import annotations

import os
import stat

import pytest

import pysandbox
from tests.security import oracles

pytestmark = pytest.mark.requires("userns")

SCRIPT = oracles.PRELUDE + r'''
import ctypes, stat
work = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
def sys_call(nr, *args):
    def call():
        r = libc.syscall(nr, *args)
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        if nr in (2, 257, 85):
            os.close(r)
    return call
def path(name):
    return os.path.join(work, name).encode()
for name in ("chmod", "fchmod", "fchmodat", "setgid", "plain"):
    open(os.path.join(work, name), "w").close()
step("chmod"); attempt("chmod", sys_call(90, path("chmod"), 0o4755))
fd = os.open(os.path.join(work, "fchmod"), os.O_RDONLY)
step("fchmod"); attempt("fchmod", sys_call(91, fd, 0o4755))
os.close(fd)
step("fchmodat"); attempt("fchmodat", sys_call(268, -100, path("fchmodat"), 0o6755, 0))
step("chmod"); attempt("setgid", sys_call(90, path("setgid"), 0o2755))
step("open"); attempt("open", sys_call(2, path("open"), os.O_CREAT | os.O_WRONLY, 0o4755))
step("openat"); attempt("openat", sys_call(257, -100, path("openat"), os.O_CREAT | os.O_WRONLY, 0o4755))
step("creat"); attempt("creat", sys_call(85, path("creat"), 0o4755))
step("mknod"); attempt("mknod", sys_call(133, path("mknod"), stat.S_IFREG | 0o4755, 0))
step("mknodat"); attempt("mknodat", sys_call(259, -100, path("mknodat"), stat.S_IFREG | 0o4755, 0))
how = ctypes.create_string_buffer(24)   # struct open_how {flags, mode, resolve}
ctypes.memmove(how, (os.O_CREAT | os.O_WRONLY).to_bytes(8, "little") + (0o4755).to_bytes(8, "little"), 16)
step("openat2"); attempt("openat2", sys_call(437, -100, path("openat2"), how, 24))
# live controls: the same calls without the set-id bits
step("chmod"); attempt("control_chmod", sys_call(90, path("plain"), 0o755))
step("open"); attempt("control_open", sys_call(2, path("control-open"), os.O_CREAT | os.O_WRONLY, 0o755))
step("mknod"); attempt("control_mknod", sys_call(133, path("control-mknod"), stat.S_IFREG | 0o644, 0))
done()
'''

ATTEMPTS = ("chmod", "fchmod", "fchmodat", "setgid", "open", "openat", "creat", "mknod", "mknodat", "openat2")


@pytest.mark.parametrize("uid", [None, 0])
def test_no_setid_file_reaches_the_host(backend, tmp_path, uid):
    work = tmp_path / "work"
    work.mkdir()
    # Outside the sandbox the owner may set the bit: the threat is real on this host.
    outside = tmp_path / "outside"
    outside.touch()
    os.chmod(outside, 0o4755)
    assert os.stat(outside).st_mode & stat.S_ISUID
    policy = pysandbox.Policy.default(workdir=work, uid=uid, gid=uid)
    res = oracles.run_probe(SCRIPT, policy, backend, args=[work])
    for label in ("control_chmod", "control_open", "control_mknod"):
        assert res[label]["ok"], (label, res[label])
    for label in ATTEMPTS:
        assert not res[label]["ok"], (label, res[label])
    for entry in work.iterdir():
        mode = os.lstat(entry).st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), (entry.name, oct(mode))
