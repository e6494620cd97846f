"""The bwrap backend's init speaks the Plan (pysandbox/backends/bwrap/bwrap_tail.py): its op
array is native_translate's tail ops, laid out as native/psb.h says, and its failure
record reads exactly as the native backend's own (the failure-12 disagreement: an rlimit
read as the proxy listener, a plan step of ``None``)."""

from __future__ import annotations

import errno
import resource

import pytest

import pysandbox
from pysandbox import plan as P
from pysandbox.backends.bwrap import bwrap_tail as T
from pysandbox.backends.native import native_translate as N
from pysandbox.backends._native_lib import load_module
from pysandbox.backends.native.native_errors import setup_error
from pysandbox.backends.native_ops import STAGE_OP, pack
from pysandbox.errors import BackendUnavailable, Reason, SetupError
from pysandbox.limits import Limits

pytestmark = pytest.mark.filterwarnings("ignore")


def _plan(**kw):
    return P.compile(pysandbox.Policy.default(workdir=None, **kw))


def test_the_layout_is_the_modules():
    ffi = load_module()[0]
    assert ffi.sizeof("struct psb_tail_hdr") == T.HEADER.size
    assert ffi.sizeof("struct psb_op") == T.OP_RECORD.size
    assert load_module()[1].PSB_PLAN_MAGIC == T.MAGIC


def test_the_tail_is_the_native_executors_ops():
    plan = _plan(network="proxy", limits=Limits(open_files=9))
    host = T._host()
    dest = next(op.dest for op in plan.ops if isinstance(op, P.BindMount))
    ops = T.tail_ops(plan, [(dest, 1, 2)], host)
    kinds = [op.kind for op in ops]
    assert kinds[0] == "LISTEN" and kinds[1] == "MOUNT_PRIVATE"
    assert kinds.index("BIND_CHECK") < kinds.index("CAPS") < kinds.index("INIT") < kinds.index("SECCOMP")
    assert kinds.index("INIT") < kinds.index("RLIMIT")
    # every op names its plan step (rlimits: the plan's rlimits, named by the error)
    assert all(op.plan_index is not None for op in ops if op.kind != "RLIMIT"), ops
    native = [op for op in N.translate(plan, host) if op.kind in T.TAIL_KINDS]
    assert [op for op in ops if op.kind in T.TAIL_KINDS] == native


def test_exec_mode_has_no_init():
    assert "INIT" not in [op.kind for op in T.tail_ops(_plan(as_pid_1=True), [])]
    assert "INIT" in [op.kind for op in T.tail_ops(_plan(), [])]   # control


def _failure(plan, kind, err, which=lambda op: True):
    ops = T.tail_ops(plan, [])
    blob, compiled = T.pack_plan(plan, ops, exec_mode=False, proxy_socket=5)
    assert blob.startswith(T.HEADER.pack(T.MAGIC, T._abi(), len(ops), len(compiled.strtab), 0, -1, -1, 0, 0, 5, -1))
    index = next(i for i, op in enumerate(ops) if op.kind == kind and which(op))
    return T.failure(compiled, plan, STAGE_OP, index, err, "/bin/true")


def test_an_rlimit_failure_reads_as_an_rlimit_not_the_listener():
    exc = _failure(_plan(limits=Limits(open_files=1 << 30)), "RLIMIT", errno.EPERM,
                   lambda op: op.n == resource.RLIMIT_NOFILE)
    assert isinstance(exc, SetupError) and exc.reason is Reason.SETUP_FAILED
    assert exc.stage == "rlimit" and exc.errno == errno.EPERM and exc.filename == "RLIMIT_NOFILE"
    assert "proxy" not in str(exc) and "None" not in str(exc)
    # live control: the listener's own record still reads as the listener
    listen = _failure(_plan(network="proxy"), "LISTEN", errno.EADDRINUSE)
    assert listen.stage == "proxy listener" and "cannot listen at 127.0.0.1" in str(listen)


def test_a_native_and_a_bwrap_record_read_alike():
    plan = _plan()
    native_ops = N.translate(plan, T._host())
    i = next(i for i, op in enumerate(native_ops) if op.kind == "SECCOMP")
    native = setup_error(pack(plan, native_ops), STAGE_OP, i, errno.EINVAL, "/bin/true", plan.namespaces)
    bwrap = _failure(plan, "SECCOMP", errno.EINVAL)
    assert (bwrap.stage, bwrap.op, bwrap.errno, str(bwrap)) == (native.stage, native.op, native.errno, str(native))
    assert f"(plan step {native_ops[i].plan_index}, tail step SECCOMP)" in str(bwrap)


def test_a_changed_bind_reads_as_such():
    plan = _plan()
    ops = T.tail_ops(plan, [("/x", 1, 2)])
    compiled = pack(plan, ops)
    exc = T.failure(compiled, plan, STAGE_OP, [op.kind for op in ops].index("BIND_CHECK"), errno.ELOOP, "/bin/true")
    assert exc.reason is Reason.BIND_SOURCE_CHANGED and exc.stage == "bind"


def test_the_launchers_sockets_are_required():
    plan = _plan(network="proxy")
    with pytest.raises(SetupError):
        T.pack_plan(plan, T.tail_ops(plan, []), exec_mode=False)
    denials = _plan(report_denials=True)
    with pytest.raises(BackendUnavailable) as exc:
        T.pack_plan(denials, T.tail_ops(denials, []), exec_mode=False)
    assert exc.value.reason is Reason.BWRAP_INIT_UNAVAILABLE
    T.pack_plan(denials, T.tail_ops(denials, []), exec_mode=False, notify_socket=7)   # control
