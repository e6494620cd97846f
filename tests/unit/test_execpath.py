"""exec_candidates: the paths the native child tries, in order (pysandbox/execpath.py),
and the loader's refusal of a module built from another psb.h."""

from __future__ import annotations

import sys
import types

import pytest

import pysandbox
from pysandbox.backends import _native_lib
from pysandbox.errors import NativeModuleMissing, Reason
from pysandbox.execpath import DEFAULT_PATH, exec_candidates


def test_a_name_with_a_slash_is_not_searched():
    assert exec_candidates("/bin/sh", "/usr/bin", "/work") == ["/bin/sh"]
    assert exec_candidates("./run", "/usr/bin", "/work") == ["/work/./run"]
    assert exec_candidates("bin/run", None, "/") == ["/bin/run"]


def test_path_entries_in_order_and_empty_means_the_working_directory():
    assert exec_candidates("ls", "/a:/b", "/w") == ["/a/ls", "/b/ls"]
    assert exec_candidates("ls", "/a::/b:", "/w") == ["/a/ls", "/w/ls", "/b/ls", "/w/ls"]
    assert exec_candidates("ls", "", "/w") == ["/w/ls"]
    assert exec_candidates("ls", "rel:/b", "/w") == ["/w/rel/ls", "/b/ls"]


def test_no_path_means_the_default():
    assert exec_candidates("ls", None, "/") == [f"{d}/ls" for d in DEFAULT_PATH.split(":")]


def test_a_module_with_another_abi_stamp_is_refused(monkeypatch):
    fake_lib = types.SimpleNamespace(PSB_ABI_VERSION=_native_lib.ABI_VERSION - 1, psb_spawn=object())
    fake = types.SimpleNamespace(ffi=object(), lib=fake_lib)
    monkeypatch.setitem(sys.modules, "pysandbox._native", fake)
    monkeypatch.setattr(pysandbox, "_native", fake, raising=False)
    monkeypatch.setattr(_native_lib, "_module", None)
    with pytest.raises(NativeModuleMissing, match="rebuild the module") as info:
        _native_lib.load_module()
    assert info.value.reason is Reason.NATIVE_MODULE_MISSING


def test_a_module_whose_enum_differs_is_refused(monkeypatch):
    names = {f"PSB_OP_{n}": v for n, v in _native_lib.OP.items()}
    names["PSB_OP_EXTRA"] = 99
    fake_lib = types.SimpleNamespace(PSB_ABI_VERSION=_native_lib.ABI_VERSION, psb_spawn=object(), **names)
    fake = types.SimpleNamespace(ffi=object(), lib=fake_lib)
    monkeypatch.setitem(sys.modules, "pysandbox._native", fake)
    monkeypatch.setattr(pysandbox, "_native", fake, raising=False)
    monkeypatch.setattr(_native_lib, "_module", None)
    with pytest.raises(NativeModuleMissing, match="rebuild the module"):
        _native_lib.load_module()
