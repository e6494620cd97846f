"""Start-up (issue 15): ``import pysandbox`` imports none of its submodules, and the
``--help`` and ``--version`` paths of both command lines import no backend and no cffi
module. Each case runs in a fresh interpreter and reports its ``sys.modules``; the
control runs the same harness on an import that does reach the backends.
No timing here: the figures are benchmarks/run.py's ``startup`` section."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Runs CODE's main(ARGV) with stdout/stderr captured, then prints the loaded modules.
HARNESS = """
import contextlib, io, json, sys
out = io.StringIO()
code = None
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    try:
        code = {call}
    except SystemExit as exc:
        code = exc.code
sys.__stdout__.write(json.dumps({{"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}}))
"""


def loaded(call: str, setup: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", setup + HARNESS.format(call=call)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def backends(modules) -> list[str]:
    return [m for m in modules if m.startswith("pysandbox.backends") or m == "pysandbox._native"
            or m.startswith("_cffi_backend") or m == "cffi" or m.startswith("cffi.")]


CLI_CASES = [
    ("pysandbox.cli", ["--help"], "usage: pysandbox"),
    ("pysandbox.cli", ["--version"], "pysandbox "),
    ("pysandbox.cli", ["run", "--help"], "usage: pysandbox run"),
    ("pysandbox.cli", ["status", "--help"], "usage: pysandbox status"),
    ("bwrap_compat.cli", ["--help"], "--ro-bind SRC DEST"),
    ("bwrap_compat.cli", ["--version"], "bubblewrap "),
    # --help after other options goes through bwrap's parser (which stops at it)
    ("bwrap_compat.cli", ["--unshare-net", "--ro-bind", "/", "/", "--help"], "--ro-bind SRC DEST"),
]


@pytest.mark.parametrize("module,argv,expect", CLI_CASES, ids=[" ".join([m.split(".")[0], *a]) for m, a, _ in CLI_CASES])
def test_help_and_version_import_no_backend(module, argv, expect):
    got = loaded(f"main({argv!r})", setup=f"from {module} import main\n")
    assert got["code"] in (0, None), got["out"]
    assert expect in got["out"]
    assert backends(got["modules"]) == []


def test_import_pysandbox_imports_no_submodule():
    got = loaded("None", setup="import pysandbox\n")
    assert [m for m in got["modules"] if m.startswith("pysandbox")] == ["pysandbox"]


def test_control_the_harness_sees_backends_when_imported():
    got = loaded("None", setup="import pysandbox.process\n")
    assert "pysandbox.backends" in backends(got["modules"])


def test_public_names_resolve_lazily_in_a_fresh_interpreter():
    code = ("import pysandbox, pysandbox.status, types\n"
            "assert callable(pysandbox.status), pysandbox.status   # the function, not the submodule\n"
            "from pysandbox import *\n"
            "assert all(not isinstance(getattr(pysandbox, n), types.ModuleType) for n in pysandbox.__all__)\n"
            "from pysandbox.status import Status\n"
            "assert pysandbox.plan.Plan and pysandbox.errors.PolicyError   # submodules as attributes, as before\n"
            "assert callable(pysandbox.status) and pysandbox.status.__module__ == 'pysandbox.status'\n"
            "try:\n    pysandbox.no_such_name\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# What a launch's start-up must not import (issue 15): dataclasses and inspect
# (pysandbox/records.py stands in for dataclasses), socket (proxy mode only: egress.py
# imports it when a proxy is made) and, on the native path, ctypes (the native module
# answers the Landlock probe; the bwrap backend's pre-exec hook still calls prctl
# through ctypes).
# Nor asyncio and ssl (proxy mode only), and `pysandbox run -- CMD` (no option) nor
# argparse and gettext (cli_fast.py reads it; issue 28).
HEAVY = ("dataclasses", "inspect", "socket", "ctypes", "asyncio", "ssl")
PARSER = ("argparse", "gettext")
# Nor what only a failed native launch (its error mapping), a listener of the per-step
# stamps (or --verbose) or a proxy reads (issue 28 item 5).
DEFAULT_POLICY = ("pysandbox.credentials", "pysandbox.gitmeta", "pysandbox.home", "pysandbox.launcher_files")
ON_DEMAND = ("pysandbox.backends.native.native_errors", "pysandbox.backends.native.native_stamps",
             "pysandbox.egress")
RUN_CASES = [
    # the probe package (bwrap's probes) only for a native launch's error message
    # and the cgroup modules only with a limit
    pytest.param("pysandbox.cli", ["run", "--", "/bin/true"],
                 HEAVY + PARSER + ON_DEMAND + ("pysandbox.probe", "pysandbox.cgroup", "pysandbox.nproc"),
                 id="pysandbox run"),
    # pybwrap's host facts are its own (bwrap_compat/hostfacts.py), not the probe package's;
    # its Policy is built field by field: Policy.default's protections stay out
    pytest.param("bwrap_compat.cli", ["--ro-bind", "/", "/", "/bin/true"],
                 HEAVY + PARSER + ON_DEMAND + ("pysandbox.probe",) + DEFAULT_POLICY, id="pybwrap"),
    pytest.param("pysandbox.cli", ["run", "--backend", "bwrap", "--", "/bin/true"],
                 tuple(m for m in HEAVY if m != "ctypes"),
                 id="pysandbox run --backend bwrap", marks=pytest.mark.requires("bwrap")),
]


@pytest.mark.requires("native")
@pytest.mark.parametrize("module,argv,heavy", RUN_CASES)
def test_a_launch_imports_no_heavy_module(module, argv, heavy):
    got = loaded(f"main({argv!r})", setup=f"from {module} import main\n")
    assert got["code"] in (0, None), got["out"]
    assert [m for m in heavy if m in got["modules"]] == []


@pytest.mark.requires("native")
@pytest.mark.requires("netns")
def test_control_a_proxy_launch_does_import_socket():
    got = loaded("main(['run', '--network', 'proxy', '--allow-host', 'pypi.test', '--', '/bin/true'])",
                 setup="from pysandbox.cli import main\n")
    assert got["code"] in (0, None), got["out"]
    assert "socket" in got["modules"] and "pysandbox.egress" in got["modules"]


@pytest.mark.requires("native")
def test_control_a_failed_or_verbose_native_launch_imports_what_it_reads():
    """ON_DEMAND's control: a command that cannot be executed maps its failure record
    (native_errors); --verbose logs the launch's steps (native_stamps)."""
    failed = loaded("main(['run', '--backend', 'native', '--', '/nonexistent/cmd'])",
                    setup="from pysandbox.cli import main\n")
    assert failed["code"] not in (0, None) and "pysandbox.backends.native.native_errors" in failed["modules"]
    verbose = loaded("main(['--verbose', 'run', '--backend', 'native', '--', '/bin/true'])",
                     setup="from pysandbox.cli import main\n")
    assert verbose["code"] in (0, None), verbose["out"]
    assert "pysandbox.backends.native.native_stamps" in verbose["modules"]


@pytest.mark.requires("native")
def test_control_a_launch_with_an_option_does_import_argparse():
    """The fast path's control: the same launch with an option goes through argparse."""
    got = loaded("main(['run', '--network', 'deny', '--', '/bin/true'])", setup="from pysandbox.cli import main\n")
    assert got["code"] in (0, None), got["out"]
    assert "argparse" in got["modules"] and "gettext" in got["modules"]


@pytest.mark.requires("native")
def test_control_pysandbox_run_imports_the_default_policys_protections():
    """DEFAULT_POLICY's control: Policy.default (pysandbox run) does load them."""
    got = loaded("main(['run', '--', '/bin/true'])", setup="from pysandbox.cli import main\n")
    assert got["code"] in (0, None), got["out"]
    assert [m for m in DEFAULT_POLICY if m not in got["modules"]] == []


# A launch's own imports, with nothing of the harness's (json, contextlib and io import
# `re`, `subprocess` would hide behind a test runner's): `python -S` with only the
# package's and cffi's directories on the path, main's modules listed before json is
# imported to print them. `pysandbox run -- CMD` and pybwrap launch through
# pysandbox/direct.py, not subprocess.Popen: no subprocess (nor locale, selectors), and
# no `re` while nothing asks a pattern, no threading while nothing starts a thread (issue 28).
# Nor enum (errors.Reason is a pysandbox/codes.py class), signal (its IntEnums: _signal's
# ints serve), functools, collections (collections.abc's classes come from
# _collections_abc), weakref, types and operator (the builtins they re-export), select
# (a wait with a timeout only): each a share of the start-up.
BARE = """
import sys
sys.path[:0] = {paths!r}
from {module} import {call}
result = {call}({argv!r})
code = result if isinstance(result, int) else result.returncode   # main's status, or run's CompletedProcess
modules = sorted(sys.modules)
import json
sys.stdout.write(json.dumps({{"code": code, "modules": modules}}))
"""
LAUNCH_FREE = ("subprocess", "locale", "selectors", "re", "threading",
               "enum", "signal", "functools", "collections", "weakref", "_weakrefset", "types", "operator",
               "select")


def bare(module: str, argv: list[str], env: dict | None = None) -> dict:
    import os
    import _cffi_backend
    import pysandbox
    paths = [os.path.dirname(os.path.dirname(pysandbox.__file__)), os.path.dirname(_cffi_backend.__file__)]
    done = subprocess.run([sys.executable, "-S", "-c", BARE.format(paths=paths, module=module, argv=argv,
                                                                      call="run" if module == "pysandbox.process" else "main")],
                          capture_output=True, text=True, timeout=120, env=env, cwd=paths[0])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


BARE_CASES = [pytest.param("pysandbox.cli", ["run", "--", "/bin/true"], id="pysandbox run"),
              pytest.param("bwrap_compat.cli", ["--ro-bind", "/", "/", "/bin/true"], id="pybwrap")]


@pytest.mark.requires("native")
@pytest.mark.parametrize("module,argv", BARE_CASES)
def test_a_launch_imports_no_subprocess_re_nor_threading(module, argv):
    import os
    env = {k: v for k, v in os.environ.items() if k.isascii() and "://" not in v}   # no pattern to ask
    got = bare(module, argv, env)
    assert got["code"] == 0
    assert [m for m in LAUNCH_FREE if m in got["modules"]] == []


@pytest.mark.requires("native")
def test_control_the_bare_harness_sees_subprocess_and_re():
    """The library API is a subprocess.Popen; a URL with a password in the environment
    makes the default policy ask its pattern: both show up in the same harness."""
    import os
    library = bare("pysandbox.process", ["/bin/true"], dict(os.environ))
    assert library["code"] == 0 and "subprocess" in library["modules"]
    assert [m for m in ("enum", "signal", "functools", "collections", "types", "operator", "select")
            if m not in library["modules"]] == []
    env = dict(os.environ, PSB_TEST_URL="postgres://u:p@db.test/x")
    asked = bare("pysandbox.cli", ["run", "--", "/bin/true"], env)
    assert asked["code"] == 0 and "re" in asked["modules"] and "subprocess" not in asked["modules"]
    timed = bare("pysandbox.cli", ["run", "--limit-wall", "60", "--", "/bin/true"], dict(os.environ))
    assert timed["code"] == 0 and "threading" in timed["modules"]   # a wall-time limit's timer thread
