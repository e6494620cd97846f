"""Programs carried by the native module, made executable without a file: a sealed,
execute-only memfd per program, made once per process (the bwrap backend's init,
native/psb_bwrap_init.c; the session server, native/psb_session.c).

Execute-only: exec of a file its process cannot read leaves it undumpable from the
first instruction. The descriptor kept is O_PATH (exec of the writable one would be
ETXTBSY) and never a stdio slot.
"""

from __future__ import annotations

import fcntl
import os
import _thread

_lock = _thread.allocate_lock()   # threading's own Lock; threading itself is not imported by a launch (issue 28)
_fds: dict[str, int] = {}


class ProgramUnavailable(Exception):
    """The program cannot be had: ``str(exc)`` says why (for the caller's typed error)."""


def program_fd(name: str, accessor: str) -> int:
    """The O_PATH descriptor of the memfd holding the program that the native module's
    ``accessor`` (``size_t accessor(const unsigned char **)``) returns.

    Raises:
        ProgramUnavailable: the native module is missing, carries no such program (built
            without a C compiler), or memfds cannot be made.
    """
    with _lock:
        if name in _fds:
            return _fds[name]
        try:
            # here, not at the top: imported when a launch needs it (ImportError: a broken install)
            from . import _native
            ptr = _native.ffi.new("const unsigned char **")
            size = getattr(_native.lib, accessor)(ptr)
            blob = bytes(_native.ffi.buffer(ptr[0], size))
        except (ImportError, AttributeError) as exc:
            raise ProgramUnavailable(f"the native module, which carries {name}, is missing or stale ({exc}); "
                                     f"rebuild it (pip install -e .)") from None
        if not blob:
            raise ProgramUnavailable(f"the native module was built without {name} (no C compiler for it)")
        try:
            try:
                fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | 0x0010)  # MFD_EXEC
            except OSError:
                fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            try:
                view = memoryview(blob)
                while view:
                    view = view[os.write(fd, view):]
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
                            | fcntl.F_SEAL_SEAL)
                os.fchmod(fd, 0o111)
                pfd = os.open(f"/proc/self/fd/{fd}", os.O_PATH | os.O_CLOEXEC)
            finally:
                os.close(fd)
        except OSError as exc:
            raise ProgramUnavailable(f"cannot make the memfd of {name}: {exc}") from None
        while pfd < 3:   # never shadow a stdio slot
            pfd = os.dup(pfd)   # the low one stays open; harmless
        _fds[name] = pfd
        return pfd
