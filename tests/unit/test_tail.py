"""The setup tail's one failure reading (pysandbox/backends/tail.py): its step table is
native/psb_tail.h's enum, and the bwrap init's record reads as the native backend's (the failure-12 disagreement: an rlimit
read as the proxy listener). No kernel, no module: the header is read as text."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pysandbox
from pysandbox import plan as P
from pysandbox.backends import tail
from pysandbox.backends.bwrap.bwrap_init import init_failure
from pysandbox.cli_errors import without_step
from pysandbox.errors import Reason, SetupError
from pysandbox.limits import Limits

HEADER = Path(__file__).resolve().parents[2] / "native" / "psb_tail.h"


def test_the_step_table_is_the_headers_enum():
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"enum psb_tail_step \{(.*?)\};", text, re.S).group(1)
    names = re.findall(r"PSB_TAIL_([A-Z_]+)", body)
    assert tuple(names) == tail.STEPS
    assert "PSB_TAIL_USAGE = 1" in body


def _plan(**kw):
    return P.compile(pysandbox.Policy.default(workdir=None, **kw))


def test_the_bwrap_inits_rlimit_failure_reads_as_an_rlimit_not_the_listener():
    plan = _plan(limits=Limits(open_files=1 << 30))
    exc = init_failure(tail.STEP["RLIMIT"], errno.EPERM, 1, "/bin/true", plan)
    assert isinstance(exc, SetupError) and exc.reason is Reason.SETUP_FAILED
    assert exc.stage == "rlimit" and exc.errno == errno.EPERM and exc.filename == "RLIMIT_NOFILE"
    assert "proxy" not in str(exc) and "None" not in str(exc)
    # live control: the listener's own record still reads as the listener
    listen = init_failure(tail.STEP["LISTEN"], errno.EADDRINUSE, 0, "/bin/true", _plan(network="proxy"))
    assert listen.stage == "proxy listener" and "cannot listen at 127.0.0.1" in str(listen)


def test_a_native_and_a_bwrap_record_read_alike():
    plan = _plan()
    i = next(i for i, op in enumerate(plan.ops) if isinstance(op, P.Seccomp))
    bwrap = init_failure(tail.STEP["SECCOMP"], errno.EINVAL, 0, "/bin/true", plan)
    native = tail.error("SECCOMP", errno.EINVAL, plan_index=i)
    assert (bwrap.stage, bwrap.op, bwrap.errno, str(bwrap)) == (native.stage, native.op, native.errno, str(native))
    assert f"(plan step {i}, tail step SECCOMP)" in str(bwrap)


def test_the_command_line_drops_the_step_detail():
    line = "seccomp: Invalid argument; the command did not run (plan step 12, tail step SECCOMP)"
    assert without_step(line) == "seccomp: Invalid argument; the command did not run"
    assert without_step("x (tail step LANDLOCK)") == "x"
    assert without_step("rlimit x (plan rlimits RLIMIT_NOFILE=9:9, tail step RLIMIT)") == "rlimit x"
    assert without_step("bind /a: No such file (plan step 3, native op 7 BIND)") == "bind /a: No such file"
