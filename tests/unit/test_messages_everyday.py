"""Messages a person reads (issue 31 item 5): a non-UTF-8 path echoed as its own bytes by
pysandbox's command line, as the shell and pybwrap echo it; pybwrap's hint for a missing
native module names its own switch (PYBWRAP_BACKEND), not the Python API's argument."""

from __future__ import annotations

import subprocess
import sys

from bwrap_compat.messages import bwrap_message
from pysandbox import cli
from pysandbox.errors import NativeModuleMissing, Reason


def test_a_non_utf8_path_is_echoed_as_its_bytes():
    code = ("import sys\nfrom pysandbox import cli\n"
            "sys.exit(cli.main(['run', '--no-workdir', '--chdir', '/psb-missing-\\udcff', '--', 'true']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd="/var/tmp")
    assert done.returncode == 2, done.stderr
    assert b"--chdir /psb-missing-\xff: " in done.stderr and b"\\udcff" not in done.stderr, done.stderr
    # control: the UTF-8 name is unchanged by the same path
    same = subprocess.run([sys.executable, "-c", code.replace("\\udcff", "\u00e9")], capture_output=True,
                          timeout=60, cwd="/var/tmp")
    assert "--chdir /psb-missing-\u00e9: ".encode() in same.stderr, same.stderr


def test_write_line_falls_back_on_a_text_only_stream(monkeypatch):
    import io
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    cli.write_line("pysandbox: x")
    assert stream.getvalue() == "pysandbox: x\n"


def test_pybwrap_names_its_own_backend_switch():
    exc = NativeModuleMissing("the compiled module pysandbox._native cannot be used (gone); reinstall pysandbox "
                              "with a C compiler (rebuild the module), or use backend='bwrap'",
                              Reason.NATIVE_MODULE_MISSING)
    text = bwrap_message(exc)
    assert "PYBWRAP_BACKEND=bwrap" in text and "backend='bwrap'" not in text
    assert "cannot be used (gone)" in text   # the rest of the message as it was
