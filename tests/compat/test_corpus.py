"""The corpus of tests/compat/corpus.py through /usr/bin/bwrap and through pybwrap."""

from __future__ import annotations

import json
import os
import re

import pytest

from pysandbox.plan import PROC_READONLY
from tests.compat import harness
from tests.compat.corpus import CASES
from tests.support import host_capability, need, not_applicable

# Every option of bubblewrap 0.11 (its --help), each used by at least one case.
ALL_OPTIONS = {
    "--help", "--version", "--args", "--argv0", "--level-prefix", "--unshare-all", "--share-net",
    "--unshare-user", "--unshare-user-try", "--unshare-ipc", "--unshare-pid", "--unshare-net",
    "--unshare-uts", "--unshare-cgroup", "--unshare-cgroup-try", "--userns", "--userns2",
    "--disable-userns", "--assert-userns-disabled", "--pidns", "--uid", "--gid", "--hostname", "--chdir",
    "--clearenv", "--setenv", "--unsetenv", "--lock-file", "--sync-fd", "--bind", "--bind-try",
    "--dev-bind", "--dev-bind-try", "--ro-bind", "--ro-bind-try", "--bind-fd", "--ro-bind-fd",
    "--remount-ro", "--overlay-src", "--overlay", "--tmp-overlay", "--ro-overlay", "--exec-label",
    "--file-label", "--proc", "--dev", "--tmpfs", "--mqueue", "--dir", "--file", "--bind-data",
    "--ro-bind-data", "--symlink", "--seccomp", "--add-seccomp-fd", "--block-fd", "--userns-block-fd",
    "--info-fd", "--json-status-fd", "--new-session", "--die-with-parent", "--as-pid-1", "--cap-add",
    "--cap-drop", "--perms", "--size", "--chmod",
}


_PROC_COVER = re.compile(r"^mount /proc/(%s)#0\." % "|".join(re.escape(e) for e in PROC_READONLY))


def tolerate(case, key: str, a, b) -> bool:
    """The documented differences (bwrap_compat/README.md, "Differences the corpus tolerates")."""
    root_no_userns = os.geteuid() == 0 and "--unshare-user" not in case.args and \
        "--unshare-user-try" not in case.args and "--unshare-all" not in case.args
    if root_no_userns and key in ("uid_map", "gid_map", "setgroups", "namespaces.user", "status.CapBnd"):
        return True   # D1: root without --unshare-user runs in a 0->0 user namespace (bounding: the kept set)
    if key in ("nested_userns", "max_user_namespaces") and root_no_userns:
        return True   # D1 again: nesting is decided by the 0->0 namespace
    if root_no_userns and key.endswith((".uid", ".gid")) and b == 65534:
        return True   # D1: host files of ids other than 0 show as the overflow id
    if key == "status.Seccomp" and b == "2":
        return True   # D2: pysandbox's built-in TIOCSTI/TIOCLINUX filter is always loaded
    if key == "status.Seccomp_filters" and isinstance(a, str) and b == str(int(a) + 1):
        return True   # D2
    if key.startswith("tmp.") and not _tmpfs_on_tmp(case):
        return True   # the host's shared /tmp, listed live while other tests use it
    no_cap_edits = "--cap-add" not in case.args and "--cap-drop" not in case.args
    if os.geteuid() == 0 and no_cap_edits and key == "status.CapBnd" and b == "0000000000000000":
        return True   # D3: root as another uid: bwrap leaves the bounding set, native clears it
    if re.match(r"^mount .*#\d+\.superopts$", key) and isinstance(a, str) and \
            b == a.replace("rw", "rw,mode=755", 1) and \
            any(o in case.args for o in ("--bind-data", "--ro-bind-data")):
        return True   # D4: a --bind-data file lives on native's setup tmpfs (mode=755)
    if _PROC_COVER.match(key) and a == "<absent>" and "--proc" in case.args:
        return True   # D5: pybwrap always re-binds plan.PROC_READONLY read-only (bwrap: where writable)
    if key == "mounts.order" and isinstance(a, str) and isinstance(b, str) and _same_mounts(a, b, case):
        return True   # D7: the same mount points (each compared field by field), in pybwrap's order
    nonroot_dev = os.geteuid() != 0 and "--dev" in case.args
    if nonroot_dev and key in ("uid_map", "gid_map") and isinstance(a, str) and isinstance(b, str) and \
            a.split()[::2] == b.split()[::2]:
        return True   # D6: bwrap maps via a second user namespace for devpts; native uses one
    if nonroot_dev and re.match(r"^dev\.entries\.pts\.(uid|gid)$", key) and b == 65534:
        return True   # D6: devpts' root belongs to the first namespace's root under bwrap
    return False


def _same_mounts(a: str, b: str, case) -> bool:
    """D7: bwrap's and pybwrap's tables list the same mount points, but for the procfs
    covers only pybwrap makes (D5)."""
    theirs = a.split()
    ours = [m for m in b.split() if not ("--proc" in case.args and m not in theirs
                                          and os.path.basename(m) in PROC_READONLY)]
    return sorted(theirs) == sorted(ours)


def _tmpfs_on_tmp(case) -> bool:
    return any(a == "--tmpfs" and b == "/tmp" for a, b in zip(case.args, case.args[1:]))



def _check_needs(case):
    if case.only == "root" and os.geteuid() != 0:
        not_applicable("root-only case (bwrap's rules differ for root)")
    if case.only == "nonroot" and os.geteuid() == 0:
        not_applicable("unprivileged-only case")
    why = host_capability("native")
    if why is not None:
        need("native", why)


def _ids(cases):
    return [c.name for c in cases]


DOC_CASES = [c for c in CASES if c.doc]

# Cases not run on a reference as old as the version given, each with why.
NOT_RUN_ON = {
    # 0.8 and 0.11: the monitor dies and its child waits for good, holding the caller's stdout
    "userns2-not-a-ns": ((0, 11, 99), "bwrap orphans its child, which holds the caller's stdout for good"),
}


@pytest.fixture
def tree():
    base = harness.make_tree()
    yield base
    harness.cleanup(base)
    assert not os.path.lexists(base), f"{base} left behind"


def _reference(name):
    path, version = harness.reference(name)
    if path is None:
        need("bwrap", version)
    return path, version


def _vtext(version) -> str:
    return ".".join(map(str, version))


@pytest.mark.parametrize("reference", harness.REFERENCES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_same_as_bwrap(case, reference, tree):
    """pybwrap against each reference bwrap: the same outcome where the reference is at
    least ``case.since_version``; a different one where it is older (pybwrap follows the
    newer bwrap there, and is held to the case's documented ``want``)."""
    _check_needs(case)
    path, version = _reference(reference)
    skip = NOT_RUN_ON.get(case.name)
    if skip is not None and version <= skip[0]:
        not_applicable(f"bwrap {_vtext(version)}: {skip[1]}")
    theirs = harness.run_one([path], case, tree)
    base = harness.make_tree()   # a fresh tree: bwrap may have created mount points in the first
    try:
        ours = harness.run_one(harness.PYBWRAP, case, base)
        diffs = harness.compare(case, _rebase(theirs, tree, base), ours, base, tolerate)
        since = case.since_version
        if since is not None and version < since:
            # Expected per reference: bwrap >= since behaves as pybwrap; this older one does not.
            assert diffs or theirs["stdout"] != ours["stdout"], (
                f"{case.name}: pybwrap follows bwrap {_vtext(since)} here, yet bwrap {_vtext(version)} "
                f"({path}) behaves the same: the case does not tell the versions apart")
            for rel in case.want.get("absent", ()):
                # live control: the older bwrap really did what pybwrap refuses
                assert os.path.lexists(rel.replace("{t}", tree)), (rel, theirs)
            _check_want(case, ours, base)
            return
    finally:
        harness.cleanup(base)
    assert not os.path.lexists(base), f"{base} left behind"
    assert not diffs, f"{case.name}: bwrap {_vtext(version)} vs pybwrap differ:\n" + "\n".join(
        f"  {k}: bwrap={a!r} pybwrap={b!r}" for k, a, b in diffs[:40]) + \
        f"\n  bwrap stderr: {theirs['stderr'][-400:]!r}\n  pybwrap stderr: {ours['stderr'][-400:]!r}"
    if case.expect == "usage":
        assert ours["stderr"].startswith("usage: ") and ours["rc"] == 1
    # Documents are compared when the sandbox ran: after a fast setup failure bwrap's
    # namespace ids depend on whether its child was still alive when it looked.
    if case.expect == "ok" and case.fds and any(what == ("out",) for what in case.fds.values()):
        for number in case.fds:
            if case.fds[number] == ("out",):
                assert _shape(theirs["outs"][number]) == _shape(ours["outs"][number]), (
                    theirs["outs"][number], ours["outs"][number])


def _rebase(record, old, new):
    """bwrap ran in another private tree: name it as pybwrap's for the comparison."""
    return {k: (v.replace(old, new) if isinstance(v, str) else v) for k, v in record.items()}


def _shape(text: str):
    """Each JSON document's keys and value types (pids and inode numbers differ per run)."""
    docs = []
    for chunk in re.split(r"(?<=})\n", text.strip()):
        if chunk.strip():
            doc = json.loads(chunk)
            docs.append(sorted((k, type(v).__name__) for k, v in doc.items()))
    return docs


@pytest.mark.parametrize("case", DOC_CASES, ids=_ids(DOC_CASES))
def test_as_bwrap_documents(case, tree):
    """pybwrap alone against the documented behaviour of the bwrap version it follows
    (``case.since_version``): runs where no reference binary is installed too."""
    _check_needs(case)
    ours = harness.run_one(harness.PYBWRAP, case, tree)
    _check_want(case, ours, tree)


def _check_want(case, ours, base):
    want = case.want
    assert ours["rc"] == want["rc"], ours
    if "error" in want:
        assert harness.error_class(ours["stderr"]) == want["error"], ours["stderr"]
    if "error_prefix" in want:
        assert harness.error_class(ours["stderr"]).startswith(want["error_prefix"]), ours["stderr"]
    if "error_suffix" in want:
        assert harness.error_class(ours["stderr"]).endswith(want["error_suffix"]), ours["stderr"]
    if "stderr" in want:
        assert ours["stderr"] == want["stderr"]
    if "stdout" in want:
        assert ours["stdout"] == want["stdout"]
    if "stdout_first_line" in want:
        assert ours["stdout"].splitlines()[0] == want["stdout_first_line"], ours["stdout"]
    for rel in want.get("absent", ()):
        assert not os.path.lexists(rel.replace("{t}", base)), rel
    for key, value in want.get("probe", {}).items():
        assert json.loads(ours["stdout"])[key] == value


def test_corpus_covers_every_option():
    used = set()
    for case in CASES:
        used |= case.options
    assert ALL_OPTIONS - used == set()
    assert len(CASES) >= 60


def test_every_version_dependent_case_is_documented():
    """A case where pybwrap follows a bwrap newer than some reference carries the
    documented outcome it is held to there; the rest of the corpus runs on 0.8 too."""
    for case in CASES:
        if case.since_version is not None:
            assert case.doc and case.want, case.name
            assert case.since_version >= (0, 9), case.name
    assert {c.since_version for c in CASES} >= {(0, 9), (0, 11), (0, 12), (0, 13)}


def test_the_overlay_family_runs_in_doc_cases():
    """pybwrap runs every overlay option (none is refused): each has a doc case that succeeds."""
    for option in ("--overlay", "--tmp-overlay", "--ro-overlay"):
        assert any(option in case.options and case.want.get("rc") == 0 for case in DOC_CASES), option
