"""The policy sources are sound: the corpus covers the whole grammar, generated
policies are valid, and (once bwrap_compat exists) Policy -> bwrap argv ->
bwrap_compat -> Policy is the identity on what the sandbox gets."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings

from pysandbox import plan as P
from pysandbox import policy as pol
from tests.support import need

from tests.support import policy_corpus as corpus
from . import runner
from .strategies import policies


@pytest.fixture(scope="module")
def world():
    w = runner.World.create()
    yield w
    w.remove()


# Launch-coordination fields the bwrap backend refuses (its launch cannot wait on a
# descriptor or join given namespaces), so a differential case cannot hold them. They
# change when and where the setup runs, not what the sandbox looks like; tested on the
# native backend and against bwrap's own command line in tests/integration/test_block_fds.py,
# tests/integration/test_join_ns.py and tests/compat/test_launch.py.
NATIVE_ONLY = {"block_fd", "userns_block_fd", "userns_fd", "pidns_fd", "userns2_fd"}
# pybwrap's own mount points created on the host inside a writable bind, as bwrap does,
# are no Policy field (plan.compile's allow_host_mountpoints): a differential case never
# creates files on the host; tested in tests/unit/test_overlay.py and by pybwrap against
# bwrap in tests/compat.
# Filesystem operations the reference bwrap 0.8 lacks: Overlay (--overlay-src/--overlay/
# --tmp-overlay/--ro-overlay are bwrap 0.11). The generated policies leave it out; the
# corpus holds it ("overlay-family"), compared against bwrap 0.11
# (test_differential.py::test_corpus_bwrap_0_11; reference-unsupported on 0.8). Also tested
# on the native backend in tests/integration/test_overlay.py, against the real 0.11 in the
# compat corpus, and through the argv round trip in tests/unit/test_overlay.py.
NATIVE_ONLY_OPS = {pol.Overlay}


def _non_default_fields(policy) -> set[str]:
    default = pol.Policy()
    return {f.name for f in dataclasses.fields(pol.Policy)
            if f.name != "fs" and getattr(policy, f.name) != getattr(default, f.name)}


def test_corpus_covers_every_operation_and_option(world):
    assert len(corpus.CASES) >= 30
    built = [build(world) for _, build in corpus.CASES]
    kinds = {type(op) for p in built for op in p.fs}
    assert kinds == set(pol.FS_OP_TYPES), set(pol.FS_OP_TYPES) - kinds
    options = set().union(*(_non_default_fields(p) for p in built))
    wanted = {f.name for f in dataclasses.fields(pol.Policy)} - {"fs"} - NATIVE_ONLY
    assert options == wanted, (wanted - options, options - wanted)
    ops = [op for p in built for op in p.fs]
    flags = {
        "bind ro": any(isinstance(o, pol.Bind) and o.readonly for o in ops),
        "bind dev": any(isinstance(o, pol.Bind) and o.dev for o in ops),
        "bind optional": any(isinstance(o, pol.Bind) and o.optional for o in ops),
        "bind fd": any(isinstance(o, pol.Bind) and o.src_fd is not None for o in ops),
        "tmpfs size": any(isinstance(o, pol.Tmpfs) and o.size for o in ops),
        "tmpfs mode": any(isinstance(o, pol.Tmpfs) and o.mode is not None for o in ops),
        "dir mode": any(isinstance(o, pol.Dir) and o.mode is not None for o in ops),
        "file fd": any(isinstance(o, pol.File) and o.fd is not None for o in ops),
        "file bind ro": any(isinstance(o, pol.File) and o.readonly for o in ops),
        "file mode": any(isinstance(o, pol.File) and o.mode is not None for o in ops),
        "env clear": any(p.env.clear for p in built),
        "env unset": any(p.env.unset for p in built),
        "network allow": any(p.network.mode == "allow" for p in built),
    }
    assert all(flags.values()), [k for k, v in flags.items() if not v]


def test_generated_policies_compile(world):
    """Valid by construction: every generated policy compiles (mount points exist,
    sources exist), chdir lands on a directory the plan makes."""
    seen = []

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(policies(world))
    def check(policy):
        fds = world.open_fds()
        try:
            plan = P.compile(policy)
        finally:
            world.close_fds(fds)
        assert plan.mount_ops
        seen.append(policy)

    check()
    assert len(seen) >= 300
    kinds = {type(op) for p in seen for op in p.fs}
    assert kinds == set(pol.FS_OP_TYPES) - NATIVE_ONLY_OPS, set(pol.FS_OP_TYPES) - kinds
    options = set().union(*(_non_default_fields(p) for p in seen))
    # argv0: the reference bwrap 0.8 lacks --argv0; keep_authority_sockets only changes
    # what Policy.default builds, which generated policies do not use
    assert options >= {f.name for f in dataclasses.fields(pol.Policy)} - {"fs", "argv0", "keep_authority_sockets"} \
        - NATIVE_ONLY


def _bwrap_compat():
    """bwrap_compat's parse/check/to_policy, or need() (a failure under MUST_WORK)."""
    try:
        from bwrap_compat import check, parse, to_policy
    except (ImportError, AttributeError) as exc:
        need("bwrap_compat", f"bwrap_compat parse/check/to_policy not importable: {exc}")
    # descriptors stay open: the test owns and closes them (a closed number could be
    # reused by the next memfd and closed twice)
    return lambda argv: to_policy(check(parse(argv, close_fd=lambda fd: None)))[0]


def _default_filters() -> dict:
    """Every default filter -> (allow_io_uring, allow_syscalls) it stands for (one program
    per network mode, io_uring switch and subset of the opt-in calls)."""
    from itertools import combinations

    from pysandbox import seccomp
    calls = seccomp.OPT_IN_CALLS
    subsets = [frozenset(c) for n in range(len(calls) + 1) for c in combinations(calls, n)]
    return {seccomp.default_filter(mode, uring, allow_syscalls=allowed): (uring, allowed)
            for mode in ("deny", "allow", "proxy") for uring in (False, True) for allowed in subsets}


def _without_builtin_filters(policy):
    """The renderer emits the plan's seccomp programs, the built-in ones (and the
    strict-unix one, which stands for ``strict_unix=True``) included; parsed back they
    are user programs. Give them back their policy-level meaning (the default filter
    exists per network mode, io_uring switch and opt-in calls)."""
    from pysandbox import seccomp
    base = _default_filters()
    strict = {seccomp.strict_unix_filter()}
    progs = tuple(p for p in policy.seccomp if p not in base.keys() | strict)
    uring, allowed = next((base[p] for p in policy.seccomp if p in base), (False, frozenset()))
    return policy.replace(seccomp=progs, strict_unix=any(p in strict for p in policy.seccomp),
                          allow_io_uring=uring, allow_syscalls=allowed)


def test_round_trip_through_bwrap_argv(world):
    """Policy -> bwrap argv (the bwrap backend's renderer) -> bwrap_compat -> Policy:
    the parsed policy compiles to the same mount operations and renders to the same
    bwrap arguments (descriptor numbers aside). The renderer works on the compiled
    plan (Hide already expanded, environment applied by the process layer), so the
    parsed policy is the plan's policy, not a field-by-field copy of the original."""
    to_policy = _bwrap_compat()
    from pysandbox.backends.bwrap import bwrap_render as renderer
    seen = []

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(policies(world))
    def check(policy):
        store = _MemStore()
        fds = world.open_fds()
        try:
            argv = renderer.flatten(renderer.render(P.compile(policy), store))
            parsed = _without_builtin_filters(to_policy(argv + ["--", "true"]))
            again = renderer.flatten(renderer.render(P.compile(parsed), store))
            ours, theirs = _mounts(P.compile(policy)), _mounts(P.compile(parsed))
        finally:
            store.close()
            world.close_fds(fds)
        assert _without_made_parents(theirs, ours) == ours
        assert _non_fs(again) == _non_fs(argv)
        seen.append(policy)

    check()
    assert len(seen) >= 200


class _MemStore:
    """data_fd for the renderer: each blob in a memfd, closed afterwards."""

    def __init__(self):
        self.fds = []

    def __call__(self, data: bytes) -> int:
        fd = os.memfd_create("psb-roundtrip")
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        self.fds.append(fd)
        return fd

    def close(self):
        for fd in self.fds:
            os.close(fd)


# bwrap's modes when --perms is absent: the same thing as mode=None in a policy
_DEFAULT_MODES = {P.MountTmpfs: 0o755, P.MakeDir: 0o755}


def _mounts(plan):
    """The plan's mount operations, with bwrap's default modes spelled out and data read
    from the world's descriptor spelled as that data (what the sandbox gets)."""
    out = []
    drained = False   # a pipe read once is empty the next time, in bwrap as anywhere
    for op in plan.mount_ops:
        if type(op) in _DEFAULT_MODES and op.mode is None:
            op = dataclasses.replace(op, mode=_DEFAULT_MODES[type(op)])
        if isinstance(op, P.WriteFile):
            if op.mode is None:
                op = dataclasses.replace(op, mode=0o600 if op.bind else 0o666)
            if op.fd == runner.DATA_FD:
                op = dataclasses.replace(op, fd=None, data=b"" if drained else runner.FD_DATA)
                drained = True
        # bwrap_compat binds --bind-fd by the path the descriptor resolves to (after
        # bwrap's same-inode check): compared as that path (README: D11)
        if isinstance(op, P.BindMount) and op.src_fd is not None:
            op = dataclasses.replace(op, src=os.path.realpath(f"/proc/self/fd/{op.src_fd}"), src_fd=None)
        # a read-only tmpfs (Hide) and a read-only device bind are rendered as the mount
        # followed by --remount-ro: the same two steps
        if isinstance(op, P.MountTmpfs) and op.readonly or isinstance(op, P.BindMount) and op.readonly and op.dev:
            out += [dataclasses.replace(op, readonly=False), P.RemountReadonly(op.dest)]
            continue
        out.append(op)
    return out


def _without_made_parents(theirs, ours):
    """bwrap_compat spells out, as Dir ops, the parents bwrap creates implicitly
    (bwrap_compat/README.md: "missing parents of any destination"); the original plan
    leaves them implicit. Walking both lists in step, drop from ``theirs`` a MakeDir
    that ``ours`` does not have at that point and that makes a parent of a later
    destination; everything else must match in order."""
    out, j = [], 0
    for i, op in enumerate(theirs):
        if j < len(ours) and op == ours[j]:
            out.append(op)
            j += 1
        elif isinstance(op, P.MakeDir) and any(
                getattr(later, "dest", "").startswith(op.dest.rstrip("/") + "/") for later in theirs[i + 1:]):
            continue
        else:
            out.append(op)
    return out


_FS_OPTIONS = {"--bind", "--ro-bind", "--dev-bind", "--bind-try", "--ro-bind-try", "--dev-bind-try",
               "--bind-fd", "--ro-bind-fd", "--remount-ro", "--tmpfs", "--perms", "--size", "--file",
               "--bind-data", "--ro-bind-data", "--dir", "--chmod", "--dev", "--proc", "--mqueue", "--symlink"}
_ARITY = {"--chmod": 2, "--symlink": 2, "--bind": 2, "--ro-bind": 2, "--dev-bind": 2, "--bind-try": 2,
          "--ro-bind-try": 2, "--dev-bind-try": 2, "--bind-fd": 2, "--ro-bind-fd": 2, "--file": 2,
          "--bind-data": 2, "--ro-bind-data": 2}


def _non_fs(argv):
    """The options other than filesystem ones (compared by _mounts), with the
    descriptor numbers of seccomp programs (which differ between two renderings) dropped."""
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word in _FS_OPTIONS:
            i += 1 + _ARITY.get(word, 1)
            continue
        out.append("<fd>" if i and argv[i - 1] == "--add-seccomp-fd" else word)
        i += 1
    return out
