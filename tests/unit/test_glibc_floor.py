"""The module's glibc floor (issue 26 item 3): on x86_64 glibc, the built pysandbox._native
needs no symbol version newer than GLIBC_2.17, so the one wheel is manylinux_2_17
(manylinux2014) wherever it is built; native/psb_glibc.h, forced into every C file of the
module, binds the functions whose default version is newer. CI's packaging stage checks
the same on the wheel with auditwheel (.ci/packaging); this finds a regression in the
editable build the tests run. Read with binutils' readelf (installed with the compiler
the build needs). The live control builds one call of pthread_create with and without
the header: without it, a glibc from 2.34 on binds GLIBC_2.34, which the parser sees."""

from __future__ import annotations

import os
import pathlib
import platform
import re
import shutil
import subprocess

import pytest

from tests.support import need, not_applicable

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLOOR = (2, 17)


@pytest.fixture(autouse=True)
def _x86_64_glibc():
    if platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc":
        not_applicable("the glibc floor is x86_64 glibc's (native/psb_glibc.h)")
    if shutil.which("readelf") is None:
        need("readelf", "binutils' readelf reads the module's version needs")


def version_needs(path: str) -> dict[str, set[tuple[int, ...]]]:
    """{needed library: the GLIBC_x.y versions the object needs from it}."""
    text = subprocess.run(["readelf", "-V", "--wide", path], capture_output=True, text=True,
                          check=True).stdout
    needs: dict[str, set[tuple[int, ...]]] = {}
    section = text.split("Version needs section", 1)
    assert len(section) == 2, f"no version needs in {path}:\n{text}"
    lib = None
    for line in section[1].splitlines():
        if m := re.search(r"File: (\S+)", line):
            lib = m.group(1)
            needs.setdefault(lib, set())
        elif (m := re.search(r"Name: GLIBC_([0-9.]+)\b", line)) and lib is not None:
            needs[lib].add(tuple(int(x) for x in m.group(1).split(".")))
    return needs


def newest(needs: dict[str, set[tuple[int, ...]]]) -> tuple[int, ...]:
    return max(v for versions in needs.values() for v in versions)


def test_the_module_needs_nothing_newer_than_glibc_2_17():
    from pysandbox import _native
    needs = version_needs(_native.__file__)
    assert newest(needs) <= FLOOR, f"{_native.__file__} needs {needs}: a libc call newer than 2.17 (native/psb_glibc.h)"
    # where glibc before 2.34 keeps the pthread functions bound to their first version
    dynamic = subprocess.run(["readelf", "-d", "--wide", _native.__file__], capture_output=True, text=True,
                             check=True).stdout
    assert "libpthread.so.0" in re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]", dynamic), dynamic


def test_control_the_header_is_what_lowers_a_new_symbol(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        need("cc", "the control compiles one call")
    src = tmp_path / "one.c"
    src.write_text("#include <pthread.h>\n"
                   "int one(pthread_t *t, void *(*f)(void *)) { return pthread_create(t, 0, f, 0); }\n")

    def build(*flags: str) -> dict[str, set[tuple[int, ...]]]:
        out = tmp_path / f"one{len(flags)}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-O2", *flags, "-o", str(out), str(src)], check=True)
        return version_needs(str(out))

    bare = build()
    if newest(bare) < (2, 34):
        not_applicable(f"this glibc's pthread_create is already old ({bare}): nothing to lower")
    assert newest(bare) == (2, 34), bare
    assert newest(build("-include", str(ROOT / "native" / "psb_glibc.h"))) <= FLOOR
