"""The Deep Agents standard sandbox suite (``langchain_tests``' SandboxIntegrationTests)
on PysandboxSandbox, once per backend."""

from __future__ import annotations

import inspect
import os
import sys

import pytest

pytest.importorskip("deepagents")
pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import SandboxIntegrationTests  # noqa: E402

from pysandbox.integrations.deepagents import PysandboxSandbox  # noqa: E402

# The suite's async tests carry no asyncio mark (langchain's own runs use
# asyncio_mode=auto). Our suite stays in pytest-asyncio's strict mode: the mark is put
# on the suite's own function objects, so nothing is overridden (the suite's
# test_no_overrides_DO_NOT_OVERRIDE compares them by identity).
for _name, _func in inspect.getmembers(SandboxIntegrationTests, inspect.iscoroutinefunction):
    if _name.startswith("test_"):
        pytest.mark.asyncio(_func)


def _env() -> dict[str, str]:
    """The caller's environment with this interpreter's directory first on PATH: the
    suite runs ``python -c``, and a plain PATH (CI's unprivileged user) has only python3."""
    return {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


# Where langchain-tests 1.1.9 and Deep Agents' protocol disagree (write onto an existing
# file; glob paths relative or absolute, directories or not), the suite's conventions are
# PysandboxSandbox's opt-in ones: overwrite=False, glob_paths="relative".


def _sandbox(backend: str):
    sandbox = PysandboxSandbox(backend=backend, env=_env(), overwrite=False, glob_paths="relative")
    try:
        yield sandbox
    finally:
        sandbox.delete()


class _PysandboxStandard(SandboxIntegrationTests):
    pass


@pytest.mark.requires("native")
class TestNativeStandard(_PysandboxStandard):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls):
        yield from _sandbox("native")


@pytest.mark.requires("bwrap")
class TestBwrapStandard(_PysandboxStandard):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls):
        yield from _sandbox("bwrap")
