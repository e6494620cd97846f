"""Build of the private cffi module pysandbox._native (API mode, out of line), tagged for the
stable ABI (abi3, Python 3.11 and later: one wheel for every supported Python).

The module is optional at build: without a working C compiler the package installs without
it (a warning says so), the bwrap backend works, and the native backend reports
``native_module_missing``. PYSANDBOX_REQUIRE_NATIVE=1 makes a failed compile fail the build
(CI's wheel build).
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

try:   # setuptools' vendored distutils
    from distutils.errors import CCompilerError, DistutilsExecError, DistutilsPlatformError
except ImportError:  # pragma: no cover
    from setuptools._distutils.errors import CCompilerError, DistutilsExecError, DistutilsPlatformError

BUILD_ERRORS = (CCompilerError, DistutilsExecError, DistutilsPlatformError, OSError)
REQUIRE_ENV = "PYSANDBOX_REQUIRE_NATIVE"


def _warn(exc: BaseException) -> None:
    print("\n".join([
        "",
        "WARNING: pysandbox: the native module pysandbox._native was not built "
        f"({type(exc).__name__}: {exc}).",
        "WARNING: pysandbox is installed without it: the bwrap backend works (install bubblewrap);",
        "WARNING: the native backend reports native_module_missing. Install a C compiler and the",
        "WARNING: Python headers (Debian: gcc libc6-dev python3-dev) and reinstall to get it.",
        "",
    ]), file=sys.stderr, flush=True)


class OptionalBuildExt(build_ext):
    """build_ext whose compile failure is a warning, not an error (unless REQUIRE_ENV):
    the extension is then absent, also from the build directory (``build/lib...``, where
    ``pip wheel`` or an earlier ``pip install .`` left one that ``pip install .`` would
    otherwise ship) and from the source tree of an in-place build (``pip install -e``),
    where a module left by an earlier build would be loaded as if this build had made it."""

    def run(self):
        required = os.environ.get(REQUIRE_ENV) == "1"
        self._failed = []
        for ext in self.extensions:   # optional: an in-place build skips copying a missing one
            ext.optional = not required
        try:
            super().run()
        except BUILD_ERRORS as exc:
            if required:
                raise
            _warn(exc)
            self._failed = list(self.extensions)
        for ext in self._failed:
            # A module an earlier build left (build/lib... after `pip wheel`, or the source tree
            # of an in-place build) would be installed as if this build had made it: remove it.
            stale = [self.get_ext_fullpath(ext.name)]
            if self.inplace:
                stale.append(self._get_inplace_equivalent(self.get_finalized_command("build_py"), ext)[0])
            for path in dict.fromkeys(stale):
                if os.path.exists(path):
                    os.remove(path)
                    print(f"WARNING: pysandbox: removed {path}, left by an earlier build", file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except BUILD_ERRORS as exc:
            if os.environ.get(REQUIRE_ENV) == "1":
                raise
            self._failed.append(ext)
            _warn(exc)


setup(
    cffi_modules=["native/build_native.py:ffibuilder"],
    cmdclass={"build_ext": OptionalBuildExt},
    # The module uses only the limited API (cffi builds it with Py_LIMITED_API): tag the
    # wheel cp311-abi3 so Python 3.12, 3.13 ... install the same wheel.
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
