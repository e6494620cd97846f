"""Whether kept capabilities are also made inheritable and ambient (Policy.caps_ambient):
bwrap's rule for pybwrap, the native op flag, the bwrap backend's refusal. No kernel
needed; the behaviour against /usr/bin/bwrap is tests/compat/test_caps_root.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pysandbox import plan as P
from pysandbox import policy as PP
from pysandbox.backends import native as N
from pysandbox.backends.bwrap.bwrap_render import check_expressible
from pysandbox.errors import BwrapOptionUnsupported, PolicyError, Reason
from tests.unit.test_bwrap_compat import _policy

ROOT_CAPS = frozenset({0, 1, 12, 13, 21})   # chown, dac_override, net_admin, net_raw, sys_admin


@pytest.mark.parametrize("argv", [["c"], ["--unshare-pid", "c"], ["--unshare-user", "c"]])
def test_root_without_cap_edits_keeps_its_set_unraised(argv):
    policy, _ = _policy(argv, uid=0, caps=ROOT_CAPS)
    assert policy.caps_keep == {"chown", "dac_override", "net_admin", "net_raw", "sys_admin"}
    assert policy.caps_ambient is False


@pytest.mark.parametrize("argv", [["--cap-drop", "CAP_NET_RAW", "c"], ["--cap-add", "CAP_SYS_TIME", "c"],
                                  ["--unshare-user", "--cap-drop", "ALL", "--cap-add", "CAP_CHOWN", "c"]])
def test_root_with_a_cap_edit_raises_the_requested_set(argv):
    policy, _ = _policy(argv, uid=0, caps=ROOT_CAPS)
    assert policy.caps_ambient is True


@pytest.mark.parametrize("argv", [["c"], ["--cap-add", "CAP_NET_RAW", "c"]])
def test_unprivileged_caller_unchanged(argv):
    """A non-root caller's --cap-add caps are ambient inside its namespace, as before."""
    policy, _ = _policy(argv, uid=1000)
    assert policy.caps_ambient is True
    assert policy.caps_keep == ({"net_raw"} if "--cap-add" in argv else set())


def _caps_op(**kw):
    plan = P.compile(PP.Policy.default(**kw), outer_ids=(1000, 1000))
    return next(op for op in N.translate(plan, base="/tmp", last_cap=40) if op.kind == "CAPS")


def test_native_caps_op_flag():
    assert _caps_op(caps_keep={"chown"}, caps_ambient=False).flags & N.F_NO_RAISE
    assert not _caps_op(caps_keep={"chown"}).flags & N.F_NO_RAISE          # the default raises
    assert _caps_op(caps_keep={"chown"}).n == 1


def test_policy_flag_is_a_bool():
    with pytest.raises(PolicyError) as exc:
        PP.Policy.default(caps_ambient="no")
    assert exc.value.reason == Reason.INVALID_VALUE


def test_bwrap_backend_leaves_kept_caps_unraised_through_its_init():
    """bwrap's --cap-add raises the kept set into inheritable and ambient; our init's -n
    clears both before the command's exec (its CAPS op: PSB_F_NO_RAISE, as on the native
    backend). Without the init (no procfs) it is refused."""
    from pysandbox.backends.bwrap import bwrap_tail as T
    from pysandbox.backends.native_ops import F_NO_RAISE
    info = SimpleNamespace(version="0.8.0")
    policy = PP.Policy.default(caps_keep={"chown"}, caps_ambient=False)
    plan = P.compile(policy, outer_ids=(1000, 1000))
    check_expressible(plan, info)
    assert next(op for op in T.tail_ops(plan, []) if op.kind == "CAPS").flags & F_NO_RAISE
    raised = P.compile(PP.Policy.default(caps_keep={"chown"}), outer_ids=(1000, 1000))
    assert not next(op for op in T.tail_ops(raised, []) if op.kind == "CAPS").flags & F_NO_RAISE
    bare = policy.replace(fs=tuple(op for op in policy.fs if not isinstance(op, PP.Proc)) + (PP.Tmpfs("/proc"),),
                          namespaces=frozenset({"user"}))   # no procfs, no pid namespace: no init
    with pytest.raises(BwrapOptionUnsupported) as exc:
        check_expressible(P.compile(bare, outer_ids=(1000, 1000)), info)
    assert exc.value.reason == Reason.BWRAP_OPTION_UNSUPPORTED
    # controls: nothing kept, or kept and raised, render as before without an init too
    for ok in (bare.replace(caps_keep=frozenset()), bare.replace(caps_ambient=True)):
        check_expressible(P.compile(ok, outer_ids=(1000, 1000)), info)
