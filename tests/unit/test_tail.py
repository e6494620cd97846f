"""The setup tail's one failure reading (pysandbox/backends/tail.py): its step table (the
session server's records) is native/psb_tail.h's enum. The bwrap init's records read as
the native backend's: tests/unit/test_bwrap_tail.py. No kernel, no module: the header is
read as text."""

from __future__ import annotations

import re
from pathlib import Path

from pysandbox.backends import tail
from pysandbox.cli_errors import without_step

HEADER = Path(__file__).resolve().parents[2] / "native" / "psb_tail.h"


def test_the_step_table_is_the_headers_enum():
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"enum psb_tail_step \{(.*?)\};", text, re.S).group(1)
    names = re.findall(r"PSB_TAIL_([A-Z_]+)", body)
    assert tuple(names) == tail.STEPS
    assert "PSB_TAIL_USAGE = 1" in body


def test_the_command_line_drops_the_step_detail():
    line = "seccomp: Invalid argument; the command did not run (plan step 12, tail step SECCOMP)"
    assert without_step(line) == "seccomp: Invalid argument; the command did not run"
    assert without_step("x (tail step LANDLOCK)") == "x"
    assert without_step("rlimit x (plan rlimits RLIMIT_NOFILE=9:9, tail step RLIMIT)") == "rlimit x"
    assert without_step("bind /a: No such file (plan step 3, native op 7 BIND)") == "bind /a: No such file"
