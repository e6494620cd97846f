"""pysandbox/codes.py: a ``(str, Codes)`` class behaves as its ``(str, enum.Enum)`` twin.

Each case builds the twin with ``enum`` from the same class body and compares what both
answer (the same observations run on both, so the twin is the live control: a check that
``enum`` itself would not pass fails on the twin first). ``errors.Reason`` is compared
member by member with its own twin."""

from __future__ import annotations

import copy
import enum
import json
import pickle
import sys

import pytest

from pysandbox import codes
from pysandbox import errors
from pysandbox.errors import Reason


def _classes(body: str, name: str = "Reason") -> tuple[type, type]:
    """The class of ``body`` made on codes.Codes and on enum.Enum (both ``str`` mixins);
    module-level in this module, so that pickle finds them by name."""
    made = []
    for base in ("codes.Codes", "enum.Enum"):
        ns = {"codes": codes, "enum": enum, "__name__": __name__}
        exec(f"class {name}(str, {base}):\n{body}", ns)
        made.append(ns[name])
    return made[0], made[1]


def _error(call) -> str:
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def observe(cls: type) -> dict:
    """What a program can see of a codes class and its members."""
    seen: dict = {"repr": repr(cls), "len": len(cls), "names": [m.name for m in cls], "bool": bool(cls),
                  "members": [(k, v.name) for k, v in cls.__members__.items()]}
    for name, member in cls.__members__.items():
        value = member.value
        seen[name] = {
            "repr": repr(member), "str": str(member), "f": f"{member}|{member:>30}|{member!s}", "%": "%s" % member,
            "value": (value, type(value)), "type": (type(member) is cls, isinstance(member, str)),
            "eq": (member == value, hash(member) == hash(value), member != value + "x"),
            "lookup": (cls(value) is member, cls(member) is member, cls[name] is member, getattr(cls, name) is member),
            "pickle": [pickle.loads(pickle.dumps(member, p)) is member for p in range(pickle.HIGHEST_PROTOCOL + 1)],
            "copy": (copy.copy(member) is member, copy.deepcopy(member) is member),
            "json": json.dumps({member: [member]}), "in": member in cls,
            "str ops": (member + "!", member.upper(), type(member + "!"), {value: 1}[member]),
            "dir": {"name", "value"} <= set(dir(member)),
        }
    for bad in ("no_such_code", 5, None, b"setup_failed"):
        seen[f"bad {bad!r}"] = _error(lambda: cls(bad))
    seen["unhashable"] = _error(lambda: cls([]))
    seen["missing name"] = _error(lambda: cls["NO_SUCH"])
    seen["shout"] = [m.shout for m in cls] if hasattr(cls, "shout") else None
    first = next(iter(cls)).name
    seen["reassign"] = _error(lambda: setattr(cls, first, "x"))
    seen["delete"] = _error(lambda: delattr(cls, first))
    seen["after"] = getattr(cls, first).name
    if sys.version_info >= (3, 12):   # 3.11's enum raises TypeError for a non-member; codes.py answers by value
        seen["value in"] = ("" in cls, next(iter(cls)).value in cls, "no_such_code" in cls)
    return seen


BODY = """\
    FIRST = "first"
    SECOND = "second"
    AGAIN = "first"      # an alias
    THIRD = "third"

    @property
    def shout(self):
        return self.value.upper()
"""
CUSTOM_STR = BODY + "    def __str__(self):\n        return self.value\n"


@pytest.mark.parametrize("body", [BODY, CUSTOM_STR], ids=["base __str__", "own __str__"])
def test_a_codes_class_behaves_as_its_enum_twin(body):
    ours, twin = _classes(body)
    globals()["Reason"] = twin   # pickle looks the class up by module and name: each side in turn
    try:
        expected = observe(twin)
        globals()["Reason"] = ours
        got = observe(ours)
    finally:
        globals()["Reason"] = errors.Reason
    assert got == expected
    assert len(ours) == 3 and ours.AGAIN is ours.FIRST and ours.THIRD.shout == "THIRD"


@pytest.mark.parametrize("line,name", [("lower_name = 'x'", "lower_name"), ("NUMBER = 3", "NUMBER")])
def test_what_enum_would_make_a_member_and_codes_does_not_is_refused(line, name):
    """enum makes a member of any plain value (the control); codes.py only of UPPER_CASE
    strings, and refuses the rest rather than differ."""
    body = f"    FIRST = 'first'\n    {line}\n"
    ns = {"enum": enum}
    exec(f"class C(str, enum.Enum):\n{body}", ns)
    assert name in ns["C"].__members__
    with pytest.raises(TypeError, match=name):
        exec(f"class C(str, codes.Codes):\n{body}", {"codes": codes})


def test_control_the_observations_tell_a_plain_str_class_from_the_twin():
    """The comparison can fail: a class whose members are plain strings differs."""
    _, twin = _classes(BODY)

    class Plain(str):
        FIRST = "first"
    assert _error(lambda: twin("no_such_code")) == "ValueError: 'no_such_code' is not a valid Reason"
    assert repr(twin.FIRST) != repr(Plain.FIRST) and not isinstance(Plain.FIRST, Plain)


def test_reason_behaves_as_its_enum_twin():
    body = "".join(f"    {m.name} = {m.value!r}\n" for m in Reason)
    body += "    def __str__(self):\n        return self.value\n"
    _, twin = _classes(body)
    globals()["Reason"] = twin
    try:
        expected = observe(twin)
    finally:
        globals()["Reason"] = errors.Reason
    got = observe(Reason)
    assert got == expected
    assert [m.value for m in Reason] == [m.value for m in twin]
    assert str(Reason.SETUP_FAILED) == f"{Reason.SETUP_FAILED}" == "setup_failed"
