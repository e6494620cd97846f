"""console.end (the console scripts' last step): the process ends with its status and
its stdio flushed, skipping the interpreter's teardown only when that has nothing to run;
an atexit callback, a live thread, -X dev or a status that is not 0..255 keep the usual
exit (each control shows what the usual exit still does). Each case is a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Unflushed output on both streams, then end(STATUS); "returned" only if end returned.
SCRIPT = """
import sys
{setup}
from pysandbox.console import end
sys.stdout.write("out-unflushed")
sys.stderr.write("err-unflushed")
code = end({status})
sys.stdout.write("|returned")
sys.exit(code)
"""


def python_c(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=60)


def run(status="3", setup: str = "", *flags: str) -> subprocess.CompletedProcess:
    return python_c(SCRIPT.format(setup=setup, status=status), *flags)


def test_ends_at_once_with_the_status_and_flushed_stdio():
    done = run("3")
    assert (done.returncode, done.stdout, done.stderr) == (3, "out-unflushed", "err-unflushed")


def test_an_atexit_callback_keeps_the_usual_exit_and_runs():
    done = run("3", "import atexit; atexit.register(lambda: print('|atexit ran'))")
    assert done.returncode == 3 and done.stdout == "out-unflushed|returned|atexit ran\n"


def test_logging_imported_keeps_the_usual_exit():
    """logging registers its shutdown with atexit: handlers are flushed as usual."""
    done = run("0", "import logging")
    assert done.returncode == 0 and done.stdout.endswith("|returned")


def test_a_live_thread_keeps_the_usual_exit_and_is_joined():
    setup = ("import threading, time\n"
             "threading.Thread(target=lambda: (time.sleep(0.2), print('|thread done', flush=True))).start()")
    done = run("4", setup)
    assert done.returncode == 4 and done.stdout == "out-unflushed|returned|thread done\n"


@pytest.mark.parametrize("status,code", [("None", 0), ("'a message'", 1), ("256", 0), ("-1", 255), ("True", 1)])
def test_a_status_that_is_not_0_to_255_is_returned(status, code):
    done = run(status)
    assert done.stdout.endswith("|returned") and done.returncode == code


def test_development_mode_keeps_the_usual_exit():
    done = run("0", "", "-X", "dev")
    assert done.returncode == 0 and done.stdout.endswith("|returned")


def test_a_stdout_that_cannot_flush_keeps_the_usual_exit():
    """A stream whose flush fails: end returns (the usual exit then reports it)."""
    code = ("import io, sys\n"
            "class Broken(io.StringIO):\n"
            "    def flush(self):\n"
            "        raise OSError('broken')\n"
            "sys.stdout = Broken()\n"
            "from pysandbox.console import end\n"
            "code = end(6)\n"
            "sys.__stderr__.write('returned')\n"
            "sys.exit(code)\n")
    done = python_c(code)
    assert done.stderr.startswith("returned") and done.returncode in (6, 120), done.stderr


@pytest.mark.parametrize("module", ["pysandbox", "bwrap_compat"])
def test_python_m_exits_with_mains_status(module):
    """The entry points keep main()'s status: --version (0) and a usage error (2 / 1)."""
    ok = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip()
    bad = subprocess.run([sys.executable, "-m", module, "--no-such-option"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == (2 if module == "pysandbox" else 1), bad.stderr


def test_start_raises_only_the_young_threshold_and_the_collector_still_collects():
    """console.start: the young generation's threshold only, the collector on; a process
    that goes on allocating cycles still collects them (the control: the default threshold
    before start)."""
    code = ("import gc, sys\n"
            "before = gc.get_threshold()\n"
            "from pysandbox.console import YOUNG_THRESHOLD, start\n"
            "start()\n"
            "after = gc.get_threshold()\n"
            "assert before[0] < YOUNG_THRESHOLD and after == (YOUNG_THRESHOLD, *before[1:]), (before, after)\n"
            "assert gc.isenabled()\n"
            "runs = gc.get_stats()[0]['collections']\n"
            "for _ in range(3 * YOUNG_THRESHOLD):\n"
            "    a = []; a.append(a)\n"
            "assert gc.get_stats()[0]['collections'] > runs, 'no young collection'\n")
    done = python_c(code)
    assert done.returncode == 0, done.stderr


def test_the_console_scripts_entry_points_start_then_end():
    """pyproject installs the two commands as scripts (no entry points: pip's wrapper for
    one imports `re` first), each calling these entry points (start before main, end after)."""
    import ast
    import tomllib
    from pathlib import Path
    root = Path(__file__).parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert "scripts" not in project["project"]
    files = project["tool"]["setuptools"]["script-files"]
    assert files == ["scripts/pysandbox", "scripts/pybwrap"]
    for name, module, func in (("pysandbox", "pysandbox.console", "main"), ("pybwrap", "bwrap_compat.cli", "console_main")):
        text = (root / "scripts" / name).read_text()
        assert text.startswith("#!/usr/bin/env python3\n")   # the installer writes its interpreter there
        imported = [node for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.Import, ast.ImportFrom))]
        assert [(getattr(n, "module", None), [a.name for a in n.names]) for n in imported] == \
            [(None, ["sys"]), (module, [func])]
        assert f"sys.exit({func}())" in text


def test_the_scripts_run_their_command(tmp_path):
    """Each script, run as a file by this interpreter, is its command (--version)."""
    from pathlib import Path
    root = Path(__file__).parents[2]
    for name, expect in (("pysandbox", "pysandbox "), ("pybwrap", "bubblewrap ")):
        done = subprocess.run([sys.executable, str(root / "scripts" / name), "--version"], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == 0 and done.stdout.startswith(expect), done
