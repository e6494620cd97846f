"""Run one command keeping at most ``limit`` bytes of each output stream
(``pysandbox.integrations.ray``'s hosts): the rest is read and dropped as it comes, so a
command that prints without end costs the host a bounded buffer, never its memory.

Pure pysandbox (no Ray): ``make`` is a ``Popen``-like factory (``Pool.Popen``,
``Sandbox.Popen``, ``pysandbox.Popen`` with its policy bound).
"""

from __future__ import annotations

import subprocess
import threading

from ..lifecycle import KILL_GRACE, stop

__all__ = ["bounded_run"]

CHUNK = 1 << 16


def _drain(f, limit: int, out: list) -> None:
    buf = bytearray()
    dropped = False
    try:
        while True:
            chunk = f.read1(CHUNK) if hasattr(f, "read1") else f.read(CHUNK)
            if not chunk:
                break
            room = limit - len(buf)
            if room > 0:
                buf += chunk[:room]
            dropped = dropped or len(chunk) > room
    finally:
        out.append((bytes(buf), dropped))


def _feed(f, data: bytes) -> None:
    try:
        f.write(data)
    except (BrokenPipeError, OSError):   # the command stopped reading: as communicate()
        pass
    finally:
        try:
            f.close()
        except OSError:
            pass


def bounded_run(make, args, *, capture_output: bool, input, timeout, text: bool, env, cwd, limit: int,
                merge_stderr: bool = False):
    """Run ``args`` from ``make`` and wait. Returns ``(returncode, stdout, stderr,
    stdout_cut, stderr_cut, limit_hit, timed_out)``; a timeout ends the command as
    :func:`pysandbox.run`'s does (SIGTERM, the grace, SIGKILL to the whole tree) and
    gives ``returncode`` None. ``merge_stderr``: with ``capture_output``, stderr goes
    into stdout (one stream, in order; ``stderr`` None). ``text``: the kept bytes decoded as UTF-8, errors replaced
    (a cut may split a character).

    Raises:
        What ``make`` raises (the launch's errors).
    """
    pipe = subprocess.PIPE if capture_output else None
    data = input.encode() if isinstance(input, str) else input
    with make(list(args), stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
              stdout=pipe, stderr=subprocess.STDOUT if pipe and merge_stderr else pipe, env=env, cwd=cwd) as proc:
        got: dict = {}
        threads = []
        for name in ("stdout", "stderr"):
            f = getattr(proc, name)
            if f is not None:
                got[name] = []
                threads.append(threading.Thread(target=_drain, args=(f, limit, got[name]), daemon=True))
        if data is not None:
            threads.append(threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True))
        for t in threads:
            t.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop(proc, KILL_GRACE)
            proc.kill()   # the command is gone; make sure nothing of the sandbox is left
        except BaseException:
            proc.kill()
            raise
        for t in threads:
            t.join()
        returncode = None if timed_out else proc.returncode
        hit = getattr(proc, "limit", None)
    (out, out_cut), (err, err_cut) = (got["stdout"][0] if "stdout" in got else (None, False),
                                      got["stderr"][0] if "stderr" in got else (None, False))
    if text:
        out = out.decode(errors="replace") if out is not None else None
        err = err.decode(errors="replace") if err is not None else None
    return returncode, out, err, out_cut, err_cut, hit, timed_out
