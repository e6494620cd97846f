"""The compiled module carries every freestanding program it was built with.

native/build_native.py compiles the native init, the bwrap backend's init and the
session server on their own and embeds their bytes; one that fails to compile leaves
an empty program and a module that still imports, and the backends then fall back or
fail at launch (a source error in one program was once hidden that way). Where the
module is built for this architecture (x86_64), each program must be there, and an ELF.
"""

from __future__ import annotations

import platform

import pytest

from tests.support import need

PROGRAMS = ("psb_bwrap_init_blob", "psb_session_blob")


def _native():
    try:
        from pysandbox import _native
    except ImportError as exc:
        need("native", f"the compiled module is missing ({exc})")
    if platform.machine() != "x86_64":
        pytest.skip(f"not applicable here: the freestanding programs are x86_64 only ({platform.machine()})")
    return _native


@pytest.mark.parametrize("accessor", PROGRAMS)
def test_the_module_carries_the_program(accessor):
    native = _native()
    ptr = native.ffi.new("const unsigned char **")
    size = getattr(native.lib, accessor)(ptr)
    assert size > 0, f"{accessor}: empty: the program did not compile when the module was built"
    assert bytes(native.ffi.buffer(ptr[0], 4)) == b"\x7fELF"


def test_the_native_init_was_built():
    assert _native().lib.PSB_HAS_EXEC_INIT == 1, "native/psb_init.c did not compile when the module was built"
