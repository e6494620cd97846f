"""Build of the private cffi module pysandbox._native (API mode, out of line), tagged for the
stable ABI (abi3, Python 3.11 and later: one wheel for every supported Python).

The module is required: it is the native backend's executor and carries the bwrap
backend's init (issue 26 item 3). Without a working C compiler a source install fails
with one line (:data:`NO_COMPILER`) that says what to install and where the wheels are;
a module an earlier build left is removed first, so none is loaded as if this build had
made it.
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
NO_COMPILER = ("error: pysandbox: the native module pysandbox._native, which both backends require, "
               "could not be compiled ({}); install a C compiler and the Python headers (Debian: gcc "
               "libc6-dev python3-dev), or install the cp311-abi3 manylinux wheel instead (README.md, "
               "Installing: where the wheels are)")


class RequiredBuildExt(build_ext):
    """build_ext whose compile failure ends the build with the one line of
    :data:`NO_COMPILER`, after removing the module an earlier build left: in the build
    directory (``build/lib...``, where ``pip wheel`` or an earlier ``pip install .`` left
    one) and, for an in-place build (``pip install -e``), in the source tree."""

    def run(self):
        inplace = self.inplace   # setuptools' run() clears it while it builds (and on a failure)
        try:
            super().run()
        except BUILD_ERRORS as exc:
            for ext in self.extensions:
                self._remove_stale(ext, inplace)
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise SystemExit(NO_COMPILER.format(detail)) from None

    def _remove_stale(self, ext, inplace):
        stale = [self.get_ext_fullpath(ext.name)]
        if inplace:
            stale.append(self._get_inplace_equivalent(self.get_finalized_command("build_py"), ext)[0])
        for path in dict.fromkeys(stale):
            if os.path.exists(path):
                os.remove(path)
                print(f"pysandbox: removed {path}, left by an earlier build", file=sys.stderr)


setup(
    cffi_modules=["native/build_native.py:ffibuilder"],
    cmdclass={"build_ext": RequiredBuildExt},
    # The module uses only the limited API (cffi builds it with Py_LIMITED_API): tag the
    # wheel cp311-abi3 so Python 3.12, 3.13 ... install the same wheel.
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
