"""The interpreter of Deep Agents' file operations in a :class:`PysandboxSandbox`.

deepagents' ``BaseSandbox`` runs ``ls``, ``read``, ``write``'s preflight, ``edit``,
``grep`` and ``glob`` as ``python3 -c "..."`` commands through ``execute``: whichever
``python3`` comes first on the command's PATH (a pyenv shim costs ~100 ms a call; a
project's virtual environment may be anything). These operations need only the standard
library, so they run on one fixed interpreter the sandbox can see, found once per
sandbox by running it there (:func:`choose`): this interpreter's base executable, else
``/usr/bin/python3``, else ``python3`` from PATH as before. The model's own ``execute``
commands are never rewritten: only a command a file operation sends, while it is being
sent (a context variable, so the async twins, run through ``asyncio.to_thread``, carry
it too), and only its leading ``python3 -c``.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
import shlex
import subprocess
import sys

__all__ = ["FILE_OPERATIONS", "choose", "file_operations", "in_file_operation", "rewrite"]

FILE_OPERATIONS = ("ls", "read", "write", "edit", "grep", "glob", "delete")
_IN_FILE_OP = contextvars.ContextVar("pysandbox_deepagents_file_op", default=False)
_PREFIX = "python3 -c "


def in_file_operation() -> bool:
    """Whether the current command is sent by one of deepagents' file operations."""
    return _IN_FILE_OP.get()


def _marked(func):
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def op(*args, **kwargs):
            token = _IN_FILE_OP.set(True)
            try:
                return await func(*args, **kwargs)
            finally:
                _IN_FILE_OP.reset(token)
    else:
        @functools.wraps(func)
        def op(*args, **kwargs):
            token = _IN_FILE_OP.set(True)
            try:
                return func(*args, **kwargs)
            finally:
                _IN_FILE_OP.reset(token)
    return op


def file_operations(cls):
    """Class decorator: each file operation of ``cls`` (and its async twin) marks the
    commands it sends (:func:`in_file_operation`)."""
    for name in FILE_OPERATIONS:
        for attr in (name, "a" + name):
            func = getattr(cls, attr, None)
            if func is not None:
                setattr(cls, attr, _marked(func))
    return cls


def candidates() -> list[str]:
    """Interpreters to try, in order: this one's base executable (its real path: a
    virtual environment's ``python`` is a symlink), then ``/usr/bin/python3``."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    out = [os.path.realpath(base)] if base else []
    out.append("/usr/bin/python3")
    return list(dict.fromkeys(p for p in out if os.path.isabs(p)))


def choose(run) -> str:
    """The first candidate that runs in the sandbox (``run(argv)`` returns a
    CompletedProcess), else ``"python3"`` (PATH's, as deepagents would)."""
    for path in candidates():
        try:
            done = run([path, "-I", "-c", "pass"])
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return path
    return "python3"


def rewrite(command: str, python: str) -> str:
    """``command`` with its leading ``python3 -c`` run by ``python``, when it has one."""
    if python == "python3" or not command.startswith(_PREFIX):
        return command
    return shlex.quote(python) + command[len("python3"):]
