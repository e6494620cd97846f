"""``Sandbox.run`` without a Popen object: the session command's flow of
:func:`pysandbox.process.run_process` (capture, timeout then ``kill_grace``, check, the
result's ``limit``), written over the command's ``RemoteChild`` directly.

A session command run to its end needs none of what a :class:`subprocess.Popen` is
built for (file objects over its pipes, a selector, ``_waitpid_lock``, the
``__del__``/``__exit__`` bookkeeping): here the output pipes are read with one
``poll`` until both reach EOF, then the command's end is read off the channel, as
``communicate`` then ``wait`` do. Only the options listed in :data:`OPTIONS` take this
path (``Sandbox.run`` decides, pysandbox/session.py); ``input=``, other stdio,
``report_denials`` and proxy mode go through :class:`pysandbox.session.SessionProcess`
and ``run_process``. ``tests/integration/test_session_run.py`` holds both paths to the
same results.
"""

from __future__ import annotations

import codecs
import io
import locale
import os
import select
import signal
import subprocess
import time

from .lifecycle import DRAIN_AFTER_END

# The keyword arguments of Sandbox.run this path implements; any other one: the Popen path.
OPTIONS = frozenset(("cwd", "env", "pass_fds", "limits", "text", "universal_newlines", "encoding", "errors"))
_READ = 32768   # as subprocess's communicate
_SIGINT_WAIT = 0.25   # as Popen.__exit__ after a KeyboardInterrupt (subprocess's _sigint_wait_secs)


class Output:
    """The two pipes of a captured command (stdout, stderr): the parent's read ends,
    read to EOF across calls of :meth:`drain` (a timeout's, then the grace's)."""

    def __init__(self):
        self.out, self.out_w = os.pipe()
        self.err, self.err_w = os.pipe()
        self.chunks = {self.out: [], self.err: []}
        self.open = [self.out, self.err]
        self.poller = None

    def close_ends(self) -> None:
        """The command's ends: theirs once sent."""
        os.close(self.out_w)
        os.close(self.err_w)

    def drain(self, deadline: float | None) -> bool:
        """Read both pipes until EOF; False when ``deadline`` (time.monotonic) came first."""
        poller = self.poller
        if poller is None:
            poller = self.poller = select.poll()
            for fd in self.open:
                poller.register(fd, select.POLLIN | select.POLLPRI)
        chunks, open_ = self.chunks, self.open
        while open_:
            if deadline is None:
                ready = poller.poll()
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ready = poller.poll(left * 1000)
            for fd, _ in ready:
                data = os.read(fd, _READ)
                if data:
                    chunks[fd].append(data)
                else:
                    poller.unregister(fd)
                    open_.remove(fd)
        return True

    def result(self, codec) -> tuple:
        """(stdout, stderr) read so far: bytes, or str decoded as subprocess does."""
        out, err = b"".join(self.chunks[self.out]), b"".join(self.chunks[self.err])
        if codec is None:
            return out, err
        return _decoded(out, *codec), _decoded(err, *codec)

    def close(self) -> None:
        os.close(self.out)
        os.close(self.err)


def _decoded(data: bytes, encoding: str, errors: str) -> str:
    # Popen._translate_newlines
    return data.decode(encoding, errors).replace("\r\n", "\n").replace("\r", "\n")


def text_codec(text, universal_newlines, encoding, errors) -> tuple[str, str] | None:
    """The (encoding, errors) subprocess decodes a text-mode command's output with, or
    None for bytes: any of the four options asks for text; no encoding: the locale's
    (UTF-8 in Python's UTF-8 mode), as Popen's ``TextIOWrapper`` chooses it."""
    if not (encoding or errors or text or universal_newlines):
        return None
    if encoding is None:
        encoding = io.text_encoding(None)
    if encoding == "locale":
        encoding = locale.getencoding()
    return encoding, errors or "strict"


def _wait(child, output: Output | None, deadline: float | None):
    """The command's raw wait status once its output reached EOF and it ended; None
    when ``deadline`` came first."""
    if output is not None and not output.drain(deadline):
        return None
    return child.wait_status(None if deadline is None else deadline - time.monotonic())


def run(sb, args, capture_output: bool, timeout, check: bool, kill_grace: float, *, cwd=None, env=None,
        pass_fds=(), limits=None, text=None, universal_newlines=None, encoding=None,
        errors=None) -> subprocess.CompletedProcess:
    """``sb.run(args, ...)`` for the options of :data:`OPTIONS` (``sb``: a
    :class:`pysandbox.session.Sandbox`); raises as ``run_process`` over a SessionProcess
    does."""
    spec = sb.command_spec(args, cwd, env, pass_fds, limits)
    codec = text_codec(text, universal_newlines, encoding, errors)
    if codec is not None and capture_output:
        codecs.lookup(codec[0])   # an unknown encoding: LookupError before the start, as Popen's
    output = Output() if capture_output else None
    try:
        try:
            child = sb.start_command(spec, (0, output.out_w, output.err_w) if output else (0, 1, 2),
                                     wait=False, quiet=True)
        finally:
            if output is not None:
                output.close_ends()
        try:
            status = _wait(child, output, None if timeout is None else time.monotonic() + timeout)
            if status is None:   # lifecycle.stop: SIGTERM, then kill_grace, then SIGKILL
                child.signal(signal.SIGTERM)
                status = _wait(child, output, time.monotonic() + max(kill_grace, 0))
                if status is None:
                    # once it ended (its keeper ended its whole tree), what it wrote, read
                    # for at most DRAIN_AFTER_END: another command may hold its pipes
                    child.signal(signal.SIGKILL)
                    status = child.wait_status(None)
                    if output is not None:
                        output.drain(time.monotonic() + DRAIN_AFTER_END)
                child.close()
                exc = subprocess.TimeoutExpired(spec.argv, timeout)
                exc.stdout, exc.stderr = output.result(codec) if output else (None, None)
                raise exc
        except subprocess.TimeoutExpired:
            raise
        except BaseException as exc:
            child.signal(signal.SIGKILL)   # the command and all it started
            child.wait_status(_SIGINT_WAIT if isinstance(exc, KeyboardInterrupt) else None)
            raise
        child.close()
        stdout, stderr = output.result(codec) if output else (None, None)
    finally:
        if output is not None:
            output.close()
    returncode = os.waitstatus_to_exitcode(status)
    limit = child.limit
    if check and returncode:
        exc = subprocess.CalledProcessError(returncode, spec.argv, output=stdout, stderr=stderr)
        exc.limit = limit
        raise exc
    done = subprocess.CompletedProcess(spec.argv, returncode, stdout, stderr)
    done.limit = limit   # as run_process: the limit that ended it, or None
    done.denials = None   # report_denials takes the Popen path
    return done
