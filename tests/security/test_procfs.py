"""procfs/sysfs boundary: no host-global kernel knob is writable from a sandbox, whatever
the caller's uid (docs/ARCHITECTURE.md, invariant 9).

Sysctl and procfs permission checks look at the uid: a root caller's command (kuid 0,
capabilities in its own user namespace only) may write /proc/sys/kernel/core_pattern
although /proc/sys is 0555, so a "cover where access(W_OK) succeeds" rule never covers
it. Every test here is safe for the host: a knob is only ever written with its current
value, /proc/sysrq-trigger is never written at all, and the audit opens for writing
and closes at once without writing.
"""

from __future__ import annotations

import os
import stat

import pytest

import pysandbox
from pysandbox.plan import PROC_READONLY
from tests.security import oracles
from tests.support import not_applicable

pytestmark = pytest.mark.requires("userns")



KNOBS_SCRIPT = oracles.PRELUDE + r'''
def write_back(path):
    # Open for writing; only if that succeeds, write the CURRENT value back (a no-op for
    # the kernel) so the result is a real write, never a new value.
    with open(path, "rb") as f:
        current = f.read()
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, current)
    finally:
        os.close(fd)
    return "written back"
def open_only(path):
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    os.close(fd)   # never a byte written
    return "opened"
step("open"); attempt("core_pattern", lambda: write_back("/proc/sys/kernel/core_pattern"))
step("open"); attempt("drop_caches", lambda: open_only("/proc/sys/vm/drop_caches"))
step("open"); attempt("sysrq_trigger", lambda: open_only("/proc/sysrq-trigger"))
step("open"); attempt("pressure", lambda: open_only("/proc/pressure/cpu") if os.path.exists("/proc/pressure/cpu") else (_ for _ in ()).throw(OSError(errno.ENOENT, "absent")))
step("open"); attempt("control_comm", lambda: write_back("/proc/self/comm"))
step("open"); attempt("control_tmp", lambda: open_only("/tmp/x") if open("/tmp/x", "w") else None)
RESULTS["mounts"] = [l.split()[4] for l in open("/proc/self/mountinfo") if l.split()[4].startswith("/proc/")]
RESULTS["conf"] = sorted(os.listdir("/proc/sys/net/ipv4/conf"))
done()
'''


@pytest.mark.parametrize("uid,as_pid_1", [(None, False), (0, False), (None, True)])
def test_host_knobs_read_only(backend, uid, as_pid_1):
    """core_pattern (written back with its own value), drop_caches, sysrq-trigger and PSI
    triggers cannot be opened for writing; /proc/self/comm (per process) and /tmp can;
    the sysctls still show the sandbox's own network namespace (only lo)."""
    if os.geteuid() == 0:
        # Live control outside: the host lets this caller write the knob (opened only).
        fd = os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)
        os.close(fd)
    policy = pysandbox.Policy.default(uid=uid, gid=uid, as_pid_1=as_pid_1)
    res = oracles.run_probe(KNOBS_SCRIPT, policy, backend)
    assert res["conf"] == ["all", "default", "lo"], res["conf"]
    assert res["control_comm"]["ok"], res["control_comm"]
    assert res["control_tmp"]["ok"], res["control_tmp"]
    absent = () if os.path.exists("/proc/sysrq-trigger") else ("ENOENT",)   # CONFIG_MAGIC_SYSRQ=n
    for name in ("core_pattern", "drop_caches", "sysrq_trigger"):
        assert res[name]["ok"] is False, (name, res[name], res["_stderr"])
        allowed = ("EROFS", "EACCES", "EPERM") + (absent if name == "sysrq_trigger" else ())
        assert res[name]["errname"] in allowed, (name, res[name])
    if res["pressure"].get("errname") != "ENOENT":
        assert res["pressure"]["ok"] is False, res["pressure"]
    for name in PROC_READONLY:
        if os.path.lexists("/proc/" + name):
            assert "/proc/" + name in res["mounts"], (name, res["mounts"])


def test_every_proc_cover_is_in_plan():
    """The native translation covers exactly plan.PROC_READONLY, unconditionally (RO_COVER,
    the tail step both backends run; the bwrap init gets these same ops)."""
    from pysandbox.backends.bwrap import bwrap_tail
    from pysandbox.backends import native as N
    from pysandbox.process import compiled
    plan = compiled(pysandbox.Policy.default())
    ops = N.translate(plan, dev_nodes=())
    covers = [op for op in ops if op.kind == "RO_COVER"]
    assert [op.b for op in covers] == [f"/proc/{s}" for s in PROC_READONLY]
    assert [op.b for op in bwrap_tail.tail_ops(plan, []) if op.kind == "RO_COVER"] == [op.b for op in covers]
    assert "sys" in PROC_READONLY and "sysrq-trigger" in PROC_READONLY
    # Independent of the list under test: the entries THREAT_MODEL.md's procfs row promises,
    # written out here, so dropping one from plan.PROC_READONLY fails.
    assert set(PROC_READONLY) >= set(EXPECTED_PROC_READONLY), set(EXPECTED_PROC_READONLY) - set(PROC_READONLY)


# The host-global procfs entries covered read-only after every proc mount, as a literal.
EXPECTED_PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "driver", "acpi", "scsi", "asound",
                          "mtrr", "tty", "sysvipc", "pressure", "dynamic_debug", "latency_stats",
                          "timer_list", "timer_stats", "sched_debug")


def _writable(path):
    """A regular file with a write bit that access(W_OK) grants this caller."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o222) and os.access(path, os.W_OK)


def _host_writable_proc_files(per_entry=8, depth=3):
    """Regular files below each top-level host /proc entry (per-process ones excluded)
    that the caller may write on the host (a write bit and access(W_OK): nothing is
    opened), a few per
    entry. Found by scanning /proc, not from plan.PROC_READONLY."""
    found = {}

    def walk(path, left, out):
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            if len(out) >= per_entry:
                return
            full = path + "/" + name
            if os.path.islink(full):
                continue
            if os.path.isdir(full):
                if left > 0:
                    walk(full, left - 1, out)
            elif _writable(full):
                out.append(full)

    for name in sorted(os.listdir("/proc")):
        if name.isdigit() or name in ("self", "thread-self"):
            continue
        full = "/proc/" + name
        out = []
        if os.path.islink(full):
            continue
        if os.path.isdir(full):
            walk(full, depth, out)
        elif _writable(full):
            out.append(full)
        if out:
            found[name] = out
    return found


SCAN_SCRIPT = oracles.PRELUDE + r'''
def write_back(path):
    # Open for writing; only if that succeeds, write the CURRENT value back (never a new
    # value), or close without a byte where the file cannot be read.
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        try:
            with open(path, "rb") as f:
                current = f.read()
        except OSError:
            return "opened"
        os.write(fd, current)
    finally:
        os.close(fd)
    return "written back"
for path in json.loads(sys.argv[1]):
    step("open"); attempt(path, lambda: write_back(path))
step("open"); attempt("control_comm", lambda: write_back("/proc/self/comm"))
done()
'''


@pytest.mark.parametrize("uid", [0, None])
def test_host_writable_proc_entries_read_only_inside(backend, uid):
    """Every top-level /proc entry with a file the caller may write on the host (found by
    scanning the host's /proc) is read-only inside: opening that file for writing fails
    (EROFS/EACCES/EPERM; a value, if it were reached, is only its current one written
    back). Live controls: as root /proc/sys is among the entries found, and
    /proc/self/comm is written back inside."""
    import json
    found = _host_writable_proc_files()
    if os.geteuid() == 0:
        assert "sys" in found and os.access("/proc/sys/kernel/core_pattern", os.W_OK), sorted(found)
    if not found:
        not_applicable("no /proc file is writable for this caller on the host")
    paths = [p for files in found.values() for p in files]
    policy = pysandbox.Policy.default(uid=uid, gid=uid)
    res = oracles.run_probe(SCAN_SCRIPT, policy, backend, args=[json.dumps(paths)])
    assert res["control_comm"]["ok"], res["control_comm"]
    opened = {p: res[p] for p in paths if res[p]["ok"] or res[p]["errname"] not in ("EROFS", "EACCES", "EPERM")}
    assert opened == {}, (sorted(found), opened)


AUDIT_SCRIPT = oracles.PRELUDE + r'''
import stat
LIMIT = {"/proc": 60000, "/sys": 60000}
found, counts = [], {}
def walk(top, root, depth):
    try:
        names = os.listdir(top)
    except OSError:
        return
    for name in names:
        if counts[root] >= LIMIT[root]:
            return
        if top == "/proc" and (name.isdigit() or name in ("self", "thread-self")):
            continue   # per process: the sandbox's own, writable where the kernel allows
        path = top + "/" + name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        counts[root] += 1
        if stat.S_ISDIR(st.st_mode):
            if depth > 0:
                walk(path, root, depth - 1)
        elif stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
            except OSError:
                continue
            os.close(fd)   # never a byte written
            found.append(path)
for root in ("/proc", "/sys"):
    counts[root] = 0
    walk(root, root, 7)
RESULTS["writable"] = found
RESULTS["counts"] = counts
step("open"); attempt("control", lambda: os.close(os.open("/proc/self/comm", os.O_WRONLY)))
RESULTS["euid"] = os.geteuid()
done()
'''


@pytest.mark.parametrize("uid", [0, None])
def test_audit_no_writable_host_global_file(backend, uid):
    """Walk /proc (all but the per-process entries) and /sys inside a sandbox whose
    command is uid 0 (a root caller: kuid 0) and as the caller: nothing opens for
    writing. Live control: /proc/self/comm does."""
    policy = pysandbox.Policy.default(uid=uid, gid=uid)
    res = oracles.run_probe(AUDIT_SCRIPT, policy, backend)
    assert res["control"]["ok"], res["control"]
    assert res["counts"]["/proc"] > 100 and res["counts"]["/sys"] > 100, res["counts"]
    if uid == 0:
        assert res["euid"] == 0
    assert res["writable"] == [], res["writable"][:50]
