"""A LangChain Deep Agents sandbox backend on a pysandbox session.

    from deepagents import create_deep_agent
    from pysandbox.integrations.deepagents import PysandboxSandbox

    with PysandboxSandbox() as sandbox:          # default policy, fresh workdir
        agent = create_deep_agent(model=..., backend=sandbox)

``PysandboxSandbox`` is a ``deepagents.backends.sandbox.BaseSandbox``: it provides
``execute``, ``upload_files``, ``download_files`` and ``id``; Deep Agents derives
read, write, edit, ls, grep and glob (and their async twins) from them, as
``python3 -c`` scripts run in the sandbox.

Every file transfer is a command *inside* the sandbox (``sh`` with the content on
stdin or stdout), never a host-side open of a path: a command of the sandbox can plant
a symlink in the workdir pointing at any host file, and a host-side write would
follow it. In the sandbox the same symlink leads only where the policy lets the
sandbox write.

Needs the ``deepagents`` extra: ``pip install 'pysandbox[deepagents]'``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import tempfile
import threading

try:
    from deepagents.backends.protocol import (
        FILE_NOT_FOUND,
        INVALID_PATH,
        IS_DIRECTORY,
        PERMISSION_DENIED,
        ExecuteResponse,
        FileDownloadResponse,
        FileUploadResponse,
        GlobResult,
        WriteResult,
    )
    from deepagents.backends.sandbox import BaseSandbox
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("pysandbox.integrations.deepagents needs Deep Agents: "
                      "pip install 'pysandbox[deepagents]'") from exc

from ..denials import summary
from ..lifecycle import exit_status
from . import deepagents_conventions as conventions
from . import deepagents_python as interpreter
from ..policy import Policy
from ..session import Sandbox

__all__ = ["DEFAULT_TIMEOUT", "TIMEOUT_EXIT_CODE", "PysandboxSandbox"]

DEFAULT_TIMEOUT = 30 * 60
"""Seconds a command may run when ``execute`` is given no timeout (Deep Agents' execute
tool lets the model ask for up to an hour; a long build fits in half of it)."""

TIMEOUT_EXIT_CODE = 124
"""The exit code of a command that timed out (timeout(1)'s, and Deep Agents' local shell)."""

# The file transfers, run as ``sh -c SCRIPT sh PATH``. Exit 101: PATH is a directory;
# 102: nothing there. Any other failure is read from the tools' messages (C locale).
_UPLOAD = r"""LC_ALL=C; export LC_ALL
[ -d "$1" ] && exit 101
d=${1%/*}
[ -z "$d" ] || [ -d "$d" ] || mkdir -p -- "$d" || exit 1
exec cat >"$1"
"""
_DOWNLOAD = r"""LC_ALL=C; export LC_ALL
[ -d "$1" ] && exit 101
[ -e "$1" ] || exit 102
exec cat -- "$1"
"""
_BY_EXIT = {101: IS_DIRECTORY, 102: FILE_NOT_FOUND}
_GLOB_TIMEOUT = 30
"""Seconds a glob may take (Deep Agents' ASYNC_GLOB_TIMEOUT; the walk stops itself after 5)."""
# The end of an error message (after its last ": ") -> the Deep Agents literal.
_BY_MESSAGE = (
    (("Permission denied", "Read-only file system", "Operation not permitted"), PERMISSION_DENIED),
    (("No such file or directory", "Directory nonexistent"), FILE_NOT_FOUND),
    (("Is a directory",), IS_DIRECTORY),
    # a parent that is not a directory (mkdir -p says "File exists"): no file can be there
    (("Not a directory", "File exists", "File name too long", "Invalid argument"), INVALID_PATH),
)


def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _transfer_error(returncode: int, stderr: bytes | None) -> str:
    """The error of a failed transfer: a Deep Agents literal where one fits, else the
    command's own message (or its exit status when it said nothing)."""
    if returncode in _BY_EXIT:
        return _BY_EXIT[returncode]
    message = _decode(stderr).strip()
    for line in message.splitlines():
        tail = line.rsplit(": ", 1)[-1]
        for needles, literal in _BY_MESSAGE:
            if any(needle in tail for needle in needles):
                return literal
    return message or f"transfer failed with exit status {exit_status(returncode)}"


def _bad_path(path) -> bool:
    """Deep Agents' paths are absolute; a NUL cannot reach a command line."""
    return not isinstance(path, str) or not path.startswith("/") or "\x00" in path


def _remove_tree(path: str) -> None:
    """Remove ``path`` (the workdir) though the sandbox left unreadable directories in
    it: each real directory is made accessible to its owner first. Symlinks are never
    followed (one may point at any host file); nothing in the sandbox runs any more."""
    for dirpath, dirnames, _ in os.walk(path):
        for name in dirnames:
            full = os.path.join(dirpath, name)
            try:
                if stat.S_ISDIR(os.lstat(full).st_mode):
                    os.chmod(full, 0o700, follow_symlinks=False)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


@interpreter.file_operations
class PysandboxSandbox(BaseSandbox):
    """A Deep Agents sandbox: one pysandbox session, whose commands share its files.

    With no ``policy``, the sandbox runs under ``Policy.default(workdir=...)`` over a
    fresh host temporary directory (the commands' working directory, removed by
    ``close``), which hides the caller's credential stores (``pysandbox/credentials.py``). With a ``policy``, that policy as it is, and nothing is removed.
    ``backend``: ``"auto"``, ``"native"`` or ``"bwrap"``. ``env``: the commands'
    environment before the policy's Env edits (default: the caller's, as
    ``pysandbox.run``). ``default_timeout``: seconds for ``execute`` without a timeout
    (0: none).

    Two opt-in conventions, those of LangChain's standard sandbox suite
    (``langchain-tests``), where it and Deep Agents' protocol disagree:
    ``overwrite=False``: ``write`` refuses a path where something exists (the protocol:
    write creates or overwrites, as the write_file tool tells the model).
    ``glob_paths="relative"``: ``glob`` reports paths relative to the search root, and
    directories too (the protocol: absolute paths of regular files only; the
    FilesystemMiddleware matches its deny rules against those absolute paths, so an agent
    with permission rules must keep the default ``"absolute"``).

    ``workspace``: a :class:`pysandbox.Workspace` (instead of a ``policy``): the sandbox runs
    under ``Policy.default(workdir=workspace)``, every write (uploads too) lands in the
    workspace's layer, and ``changes()``/``commit()`` review and apply the agent's work
    (``commit`` closes the sandbox first); ``close`` keeps the workspace.

    ``close()`` ends every process of the sandbox and removes the temporary workdir;
    ``delete()`` with no argument is ``close()`` (the teardown the Deep Agents standard
    tests call), ``delete(path)`` deletes a file in the sandbox. Both are idempotent.

    Raises:
        PolicyError, BackendUnavailable, CapabilityUnavailable, SetupError,
        SessionError: the sandbox cannot start (as ``pysandbox.session.Sandbox``).
    """

    def __init__(self, *, policy: Policy | None = None, backend: str = "auto", env=None,
                 default_timeout: float = DEFAULT_TIMEOUT, overwrite: bool = True,
                 glob_paths: str = "absolute", workspace=None):
        if workspace is not None and policy is not None:
            raise ValueError("give a workspace or a policy: the workspace's policy is Policy.default(workdir=ws)")
        self._configure(env, default_timeout, overwrite, glob_paths, workspace)
        if workspace is not None:
            policy = Policy.default(workdir=workspace)
        if policy is None:
            self._workdir: str | None = tempfile.mkdtemp(prefix="pysandbox-deepagents-")
        try:
            if policy is None:
                policy = Policy.default(workdir=self._workdir)
            self._session = Sandbox(policy=policy, backend=backend)
        except BaseException:
            if self._workdir is not None:
                _remove_tree(self._workdir)
            raise
        self._id = self._session.id

    def _configure(self, env, default_timeout, overwrite, glob_paths, workspace) -> None:
        """The options every kind of session takes (see the class)."""
        if default_timeout is None or default_timeout < 0:
            raise ValueError(f"default_timeout must be >= 0, got {default_timeout!r}")
        if glob_paths not in ("absolute", "relative"):
            raise ValueError(f"glob_paths must be 'absolute' or 'relative', got {glob_paths!r}")
        self._overwrite = bool(overwrite)
        self._glob_paths = glob_paths
        self._workspace = workspace
        self._workdir = None
        self._closed = False
        self._close_lock = threading.Lock()
        self._env = env
        self._default_timeout = default_timeout
        self._python: str | None = None   # file operations' interpreter (deepagents_python.py)

    @property
    def id(self) -> str:
        """The session's id: unique."""
        return self._id

    @property
    def workdir(self) -> str | None:
        """The temporary workdir (a host path, also the sandbox's), or None with a policy."""
        return self._workdir

    @property
    def workspace(self):
        """The :class:`pysandbox.Workspace` the agent's commands write to, or None."""
        return self._workspace

    def changes(self) -> list:
        """The agent's change set so far (``Workspace.changes``).

        Raises:
            ValueError: the sandbox has no workspace. WorkspaceError: as ``Workspace.changes``.
        """
        return self._need_workspace().changes()

    def commit(self, paths=None) -> list:
        """End the sandbox (``close``), then apply the reviewed changes to the host project
        (``Workspace.commit``: exactly what ``changes()`` returned, or nothing).

        Raises:
            ValueError: the sandbox has no workspace. WorkspaceConflict, WorkspaceError:
                as ``Workspace.commit``.
        """
        ws = self._need_workspace()
        self.close()
        return ws.commit(paths)

    def _need_workspace(self):
        if self._workspace is None:
            raise ValueError("this sandbox runs without a workspace (PysandboxSandbox(workspace=...))")
        return self._workspace

    @property
    def session(self) -> Sandbox:
        """The pysandbox session the commands run in."""
        return self._session

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run ``command`` with ``sh -c`` in the sandbox: stdout and stderr combined,
        decoded as UTF-8 (undecodable bytes replaced), stdin empty. A command killed by
        signal N reports 128+N. After ``timeout`` seconds (None: ``default_timeout``;
        0: none) the command and its descendants are ended, and the response says so,
        with exit code 124 and the output so far. With ``Policy(report_denials=True)``, a
        command that failed and was refused something ends its output with the summary line
        (``pysandbox: denied: write /etc/hosts (EROFS); ...``, pysandbox/denials.py).

        Raises:
            SessionError: the sandbox is closed or was lost.
        """
        limit = self._default_timeout if timeout is None else timeout
        if interpreter.in_file_operation():   # deepagents' own python3 -c: the fixed interpreter
            command = interpreter.rewrite(command, self.python)
        try:
            done = self._call(["sh", "-c", command], None, limit or None, merge=True)
        except subprocess.TimeoutExpired as exc:
            so_far = _decode(exc.stdout)
            note = (f"Error: Command timed out after {limit} seconds and was ended. "
                    "For long-running commands, re-run with a larger timeout.")
            return ExecuteResponse(output=f"{so_far}\n{note}" if so_far else note,
                                   exit_code=TIMEOUT_EXIT_CODE, truncated=False)
        output = _decode(done.stdout)
        line = summary(getattr(done, "denials", None) or ()) if done.returncode else ""
        if line:   # report_denials: the model sees what the sandbox refused, not only that it failed
            output = f"{output}\n{line}" if output and not output.endswith("\n") else output + line
        return ExecuteResponse(output=output, exit_code=exit_status(done.returncode),
                               truncated=bool(getattr(done, "stdout_truncated", False)))

    def _call(self, argv: list[str], data: bytes | None, limit: float | None, merge: bool = False):
        """Run ``argv`` in the session, ``data`` on stdin (None: none), stderr into stdout
        with ``merge``: its result (``returncode``, ``stdout``, ``stderr``; ``denials`` and
        ``stdout_truncated`` where the session has them).

        Raises:
            subprocess.TimeoutExpired: after ``limit`` seconds, with the output so far.
        """
        if merge:
            return self._session.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, timeout=limit, env=self._env)
        return self._session.run(argv, input=data if data is not None else b"", capture_output=True,
                                 timeout=limit, env=self._env)

    @property
    def python(self) -> str:
        """The interpreter of the file operations (``ls``, ``read``, ``edit``, ``grep``,
        ``glob``...): a fixed one the sandbox can see, chosen on first use
        (:mod:`pysandbox.integrations.deepagents_python`), not PATH's ``python3``."""
        if self._python is None:
            self._python = interpreter.choose(
                lambda argv: self._call(argv, None, 60))
        return self._python

    @property
    def start_directory(self) -> str:
        """Where ``glob`` without a path searches, as ``grep`` does: the policy's start
        directory (the workdir), ``/`` without one."""
        return self._session.sandbox_path(None)

    def _transfer(self, script: str, path: str, data: bytes | None):
        """Run a transfer script on ``path``: (returncode, stdout, stderr)."""
        return self._run(["sh", "-c", script, "sh", path], data, self._default_timeout or None)

    def _run(self, argv: list[str], data: bytes | None, limit: float | None):
        """Run ``argv`` in the sandbox, ``data`` on stdin: (returncode, stdout, stderr)."""
        try:
            done = self._call(argv, data, limit)
        except subprocess.TimeoutExpired:
            return 1, None, f"timed out after {limit} seconds".encode()
        return done.returncode, done.stdout, done.stderr

    def write(self, file_path: str, content: str) -> WriteResult:
        """Write ``content`` (UTF-8) to ``file_path``, creating missing parent
        directories. By default an existing file is replaced (Deep Agents' BaseSandbox);
        with ``overwrite=False`` a path where anything exists is refused, untouched, with
        an error saying it already exists.

        Raises:
            SessionError: the sandbox is closed or was lost.
        """
        if self._overwrite:
            return super().write(file_path, content)
        if _bad_path(file_path):
            return WriteResult(error=f"Failed to write file '{file_path}': {INVALID_PATH}")
        code, _, err = self._transfer(conventions.CREATE, file_path, content.encode("utf-8"))
        if code == conventions.EXISTS_EXIT:
            return WriteResult(error=conventions.already_exists(file_path))
        if code != 0:
            return WriteResult(error=f"Failed to write file '{file_path}': {_transfer_error(code, err)}")
        return WriteResult(path=file_path)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        """``write`` in a worker thread.

        Raises:
            SessionError: the sandbox is closed or was lost.
        """
        if self._overwrite:
            return await super().awrite(file_path, content)
        return await asyncio.to_thread(self.write, file_path, content)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Files matching ``pattern`` under ``path`` (default: :attr:`start_directory`, the
        workdir, where ``grep`` searches too; deepagents' own default ``/`` walked the host's
        whole read-only view), with Deep Agents' matching rules. By default absolute paths of regular files (BaseSandbox); with
        ``glob_paths="relative"`` paths relative to the search root, directories included
        (``is_dir``). Stops after 5 s or 10000 matches (``truncated``).

        Raises:
            SessionError: the sandbox is closed or was lost.
        """
        if not path:
            path = self.start_directory
        if self._glob_paths == "absolute":
            return super().glob(pattern, path)
        root = path if path.startswith("/") else "/" + path
        code, out, err = self._run(conventions.glob_command(pattern, root, self.python), None, _GLOB_TIMEOUT)
        return conventions.parse_glob(code, _decode(out) if code == 0 else _decode(err) or _decode(out), root)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        """``glob`` in a worker thread.

        Raises:
            SessionError: the sandbox is closed or was lost.
        """
        if self._glob_paths == "absolute":
            return await super().aglob(pattern, path or self.start_directory)
        return await asyncio.to_thread(self.glob, pattern, path)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each ``(path, content)`` in the sandbox, creating missing parent
        directories, in order; one response each. A relative path is ``invalid_path``
        (nothing runs), and so is a path below a file; a directory ``is_directory``; a
        place the sandbox cannot write (read-only, or through a symlink leading there)
        ``permission_denied``.

        Raises:
            SessionError: the sandbox is closed or was lost.
        """
        out = []
        for path, content in files:
            if _bad_path(path):
                out.append(FileUploadResponse(path=path, error=INVALID_PATH))
                continue
            code, _, err = self._transfer(_UPLOAD, path, bytes(content))
            out.append(FileUploadResponse(path=path, error=None if code == 0 else _transfer_error(code, err)))
        return out

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Read each path in the sandbox, in order; one response each. Errors:
        ``invalid_path`` (relative; nothing runs), ``file_not_found``, ``is_directory``,
        ``permission_denied``.

        Raises:
            SessionError: the sandbox is closed or was lost.
        """
        out = []
        for path in paths:
            if _bad_path(path):
                out.append(FileDownloadResponse(path=path, content=None, error=INVALID_PATH))
                continue
            code, data, err = self._transfer(_DOWNLOAD, path, None)
            if code == 0:
                out.append(FileDownloadResponse(path=path, content=data or b"", error=None))
            else:
                out.append(FileDownloadResponse(path=path, content=None, error=_transfer_error(code, err)))
        return out

    def close(self) -> None:
        """End every process of the sandbox and remove the temporary workdir. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._session.close()
        finally:
            if self._workdir is not None:
                _remove_tree(self._workdir)

    def delete(self, file_path: str | None = None):
        """``delete()``: ``close()``. ``delete(path)``: delete ``path`` (recursively) in
        the sandbox, as Deep Agents' BaseSandbox does."""
        if file_path is None:
            self.close()
            return None
        return super().delete(file_path)

    def __enter__(self) -> "PysandboxSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self._id} {state}>"
