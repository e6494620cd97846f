# The cffi module is built here (API mode, out of line) into pysandbox._native.
from setuptools import setup

setup(cffi_modules=["native/build_native.py:ffibuilder"])
