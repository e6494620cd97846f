"""The asyncio building blocks behind pysandbox/aio.py: :class:`Process` (the
:mod:`asyncio.subprocess` surface), :func:`attach` (pipes to streams), :func:`watch_exit`
(a pidfd), :func:`stop` and :func:`run_flow` (:func:`pysandbox.run`'s flow).

A one-shot sandbox is set up by the sync launcher (:class:`pysandbox.process.SandboxProcess`)
on the loop's default executor, so the loop never blocks on it. Its pipes become
asyncio streams; its end is learnt from a pidfd registered with the loop (no polling,
no thread per process). Killing ends the whole sandbox, as in the sync API.

:class:`Process` keeps the streams apart from how the exit is learnt: it takes the
launched thing and a future of its returncode (see its docstring), so a command whose
exit arrives some other way (a message on a channel) is a :class:`Process` too.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading

from .lifecycle import KILL_GRACE
from .process import PIPE, CalledProcessError, CompletedProcess


_TEXT_ARGS = ("text", "universal_newlines", "encoding", "errors")


def binary_only(kwargs: dict) -> None:
    """Refuse text mode and buffering, as asyncio does (the streams are binary).

    Raises:
        ValueError: text mode or a ``bufsize`` was asked for.
    """
    for name in _TEXT_ARGS:
        if kwargs.get(name):
            raise ValueError(f"{name} is not supported: the streams are binary, as in asyncio")
        kwargs.pop(name, None)
    if kwargs.pop("bufsize", 0) != 0:
        raise ValueError("bufsize must be 0, as in asyncio")


class Process:
    """A sandboxed command with the surface of :class:`asyncio.subprocess.Process`.

    Built from two things (use :func:`attach`, which also makes the streams):

    - ``popen``, the launched command: ``pid``; ``args``; ``send_signal(sig)``,
      ``terminate()``, ``kill()`` (``kill`` ends the whole sandbox). Process never
      reaps, polls or waits on it.
    - ``exit``, an :class:`asyncio.Future` of the loop that resolves to the command's
      returncode (negative for a signal) once it has ended, set by whoever learns the
      end: :func:`watch_exit` for a launched sandbox (pidfd), a channel's reader for a
      session command. An exception set on it is raised by :meth:`wait`.

    ``stdin`` is a :class:`asyncio.StreamWriter`, ``stdout``/``stderr`` are
    :class:`asyncio.StreamReader` (None when not a pipe); ``transports`` are closed by
    :meth:`close`.
    """

    def __init__(self, popen, exit, *, stdin=None, stdout=None, stderr=None, transports=()):
        self._popen = popen
        self._exit = exit
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._transports = list(transports)
        self._settled = False

    def __repr__(self):
        return f"<pysandbox.aio.Process {self.pid}>"

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def args(self):
        return self._popen.args

    @property
    def limit(self) -> str | None:
        """The resource limit that ended the command (pysandbox/limits.py), or None."""
        return getattr(self._popen, "limit", None)

    @property
    def denials(self):
        """What the sandbox refused (``Policy(report_denials=True)``), as
        :attr:`SandboxProcess.denials`; None when the policy does not report."""
        return getattr(self._popen, "denials", None)

    @property
    def proxy(self):
        """Network proxy mode: the launch's :class:`pysandbox.egress.Egress` (counts,
        events), as :attr:`SandboxProcess.proxy`; None otherwise."""
        return getattr(self._popen, "proxy", None)

    @property
    def returncode(self) -> int | None:
        """The returncode once the end was learnt, else None."""
        fut = self._exit
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            return fut.result()
        return None

    async def wait(self) -> int:
        """Wait for the command to end; its returncode. Cancelling the wait does not stop
        the learning of the end (the future is shielded).

        Raises:
            Whatever was set on the exit future.
        """
        code = await asyncio.shield(self._exit)
        settle = getattr(self._popen, "settle", None)
        if settle is not None and not self._settled:
            # A session command's denials and proxy records may take a moment to be
            # complete (their observers catch up, up to seconds): waited for off the loop,
            # so reading them afterwards never blocks it.
            await asyncio.get_running_loop().run_in_executor(None, settle)
            self._settled = True
        return code

    def send_signal(self, sig) -> None:
        """Deliver ``sig`` to the command (SIGKILL: the whole sandbox). Nothing once it ended."""
        if self.returncode is None:
            self._popen.send_signal(sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """End the whole sandbox (SIGKILL), as :meth:`SandboxProcess.kill`."""
        if self.returncode is None:
            self._popen.kill()

    async def communicate(self, input=None):
        """Write ``input`` to stdin and close it, read stdout and stderr to their end,
        wait for the command: ``(stdout, stderr)`` (None for what is not a pipe).

        Raises:
            Whatever :meth:`wait` raises. A closed stdin (the command stopped reading) is
            not an error, as in asyncio.
        """
        stdin = self._feed(input) if self.stdin is not None else _nothing()
        out = self.stdout.read() if self.stdout is not None else _nothing()
        err = self.stderr.read() if self.stderr is not None else _nothing()
        _, out, err = await asyncio.gather(stdin, out, err)
        await self.wait()
        return out, err

    async def _feed(self, data):
        try:
            if data:
                self.stdin.write(data)
                await self.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.stdin.close()

    def close(self) -> None:
        """Close the stream transports (an ended command's unread output is dropped)."""
        for transport in self._transports:
            transport.close()


async def _nothing():
    return None


async def attach(popen, exit, *, limit: int = 2 ** 16) -> Process:
    """A :class:`Process` for ``popen`` and its ``exit`` future (see :class:`Process`):
    ``popen.stdin``/``stdout``/``stderr``, binary file objects of pipes or sockets (or
    None), become streams of the running loop, which takes them over (closing a
    transport closes its file). ``limit``: the StreamReaders' buffer limit.

    Raises:
        OSError, ValueError: a file cannot be connected to the loop (not a pipe or
        socket). The transports made so far are closed.
    """
    loop = asyncio.get_running_loop()
    streams, transports = {}, []
    try:
        for name in ("stdout", "stderr"):
            pipe = getattr(popen, name, None)
            if pipe is not None:
                reader = asyncio.StreamReader(limit=limit, loop=loop)
                protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
                transport, _ = await loop.connect_read_pipe(lambda: protocol, pipe)
                transports.append(transport)
                streams[name] = reader
        pipe = getattr(popen, "stdin", None)
        if pipe is not None:
            # A StreamReaderProtocol without a reader is the public protocol with the
            # flow control StreamWriter.drain needs.
            protocol = asyncio.StreamReaderProtocol(None, loop=loop)
            transport, _ = await loop.connect_write_pipe(lambda: protocol, pipe)
            transports.append(transport)
            streams["stdin"] = asyncio.StreamWriter(transport, protocol, None, loop)
    except BaseException:
        for transport in transports:
            transport.close()
        raise
    return Process(popen, exit, transports=transports, **streams)


def watch_exit(popen) -> asyncio.Future:
    """A future of the running loop resolved with ``popen``'s returncode once its pid (a
    direct child: a :class:`SandboxProcess`'s outermost process) has exited: a pidfd
    registered with the loop; when it is readable the pid is reaped without blocking
    (``popen.reap_exited``, the backend's returncode mapping). Without pidfds (Linux <
    5.3) a worker thread waits instead.

    Raises:
        Nothing of its own.
    """
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    if popen.returncode is not None:
        fut.set_result(popen.returncode)
        return fut
    try:
        fd = os.pidfd_open(popen.pid)
    except OSError:
        return loop.run_in_executor(None, popen.wait)

    def ready():
        code = popen.reap_exited()
        if code is None:
            return   # spurious wake-up: not exited yet
        loop.remove_reader(fd)
        os.close(fd)
        if not fut.done():
            fut.set_result(code)

    loop.add_reader(fd, ready)
    return fut


class Handoff:
    """The hand-over of a SandboxProcess made on a worker thread to a task that may be
    cancelled meanwhile: an abandoned process is killed and reaped, never leaked."""

    def __init__(self, make):
        self._make = make
        self._lock = threading.Lock()
        self._abandoned = False
        self._proc = None

    def start(self):
        proc = self._make()
        with self._lock:
            if not self._abandoned:
                self._proc = proc
                return proc
        discard_process(proc)
        return None

    def abandon(self, loop) -> None:
        with self._lock:
            self._abandoned = True
            proc, self._proc = self._proc, None
        if proc is not None:
            loop.run_in_executor(None, discard_process, proc)


def discard_process(proc) -> None:
    """Kill the whole sandbox of ``proc``, close its pipes, reap it (blocking: a thread's)."""
    proc.kill()
    with proc:
        pass


async def stop(proc: Process, grace: float = KILL_GRACE) -> int:
    """End ``proc`` as :func:`pysandbox.lifecycle.stop`: SIGTERM to the command, SIGKILL
    to the whole sandbox if it is still running ``grace`` seconds later. Its returncode.

    Raises:
        Whatever :meth:`Process.wait` raises.
    """
    proc.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.wait(), max(grace, 0))
    except asyncio.TimeoutError:
        proc.kill()
        return await proc.wait()


async def _end(proc: Process, talk) -> None:
    """After cancellation or an error: the whole sandbox killed, its end awaited (a
    second cancellation stops the awaiting, not the reaping), its streams closed."""
    talk.cancel()
    proc.kill()
    try:
        await proc.wait()
    finally:
        proc.close()


async def run_flow(create, *, input, capture_output: bool, timeout, check: bool, kill_grace: float,
                   kwargs: dict) -> CompletedProcess:
    """:func:`pysandbox.run`'s flow over ``await create(**kwargs)`` (a :class:`Process`):
    input, capture, timeout (:func:`stop`), cancellation (:func:`_end`), check."""
    if input is not None:
        if kwargs.get("stdin") is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        kwargs["stdin"] = PIPE
    if capture_output:
        if kwargs.get("stdout") is not None or kwargs.get("stderr") is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        kwargs["stdout"] = PIPE
        kwargs["stderr"] = PIPE
    proc = await create(**kwargs)
    talk = asyncio.ensure_future(proc.communicate(input))
    try:
        done, _ = await asyncio.wait({talk}, timeout=timeout)
        if not done:
            await stop(proc, kill_grace)
            stdout, stderr = await talk
            raise subprocess.TimeoutExpired(proc.args, timeout, output=stdout, stderr=stderr)
        stdout, stderr = talk.result()
    except subprocess.TimeoutExpired:
        proc.kill()   # the command is gone; make sure nothing of the sandbox is left
        raise
    except BaseException:
        await _end(proc, talk)
        raise
    retcode = proc.returncode
    limit = proc.limit
    if check and retcode:
        exc = CalledProcessError(retcode, proc.args, output=stdout, stderr=stderr)
        exc.limit = limit
        raise exc
    done = CompletedProcess(proc.args, retcode, stdout, stderr)
    done.limit = limit
    done.denials = proc.denials
    if getattr(proc, "proxy", None) is not None:
        done.proxy = proc.proxy   # network proxy mode: its counts and events
    return done
