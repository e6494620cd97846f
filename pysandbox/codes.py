"""String codes that behave as a ``(str, enum.Enum)`` class, without importing ``enum``.

``errors.Reason`` is the one such class a launch needs, and ``enum`` (with the
``functools`` and ``collections`` it imports) cost a fifth of a ``pysandbox run -- true``
over the bare interpreter (issue 28). A class ``class Reason(str, Codes)`` whose body
assigns UPPER_CASE names to strings gets, as with ``enum``:

- one member per name, an instance of the class (so of ``str``): equal to, and hashing
  as, its value; ``.name``, ``.value`` (the plain ``str``); ``repr`` ``<Reason.X: 'x'>``;
  ``str()`` and ``format()`` as the class defines ``__str__`` (the base: ``Reason.X``);
- ``Reason("x")`` and ``Reason(Reason.X)`` return the member, anything else raises
  ``ValueError("'y' is not a valid Reason")``; ``Reason["X"]``; iteration in definition
  order, ``len``, ``__members__``; ``x in Reason`` answers by value (Python 3.12's
  ``enum``; 3.11's raised TypeError for a non-member);
- pickling, ``copy`` and ``deepcopy`` give the same member back; a member cannot be
  reassigned or deleted (AttributeError); the class's repr is ``<enum 'Reason'>``.

A value given twice makes the second name an alias of the first member, as in ``enum``.
Not supported (``enum`` features no code here uses): ``auto()``, methods that make members
of their own, ``_missing_``, subclassing a class that has members. The type checker sees
``enum.Enum`` in place of :class:`Codes` (errors.py), so it types ``Reason.X`` as a
``Reason``.
"""

from __future__ import annotations


def _members(namespace: dict) -> dict[str, str]:
    """The members a class body names: UPPER_CASE names with a ``str`` value. Any other
    plain value (enum would make it a member too) is refused, not left as a class
    attribute that enum would have turned into a member."""
    members = {}
    for name, value in namespace.items():
        if name.startswith("_") or callable(value) or hasattr(value, "__get__"):
            continue   # dunders, sunders, methods, properties: not members, as in enum
        if type(value) is not str or not name.isupper():
            raise TypeError(f"{name} = {value!r}: codes.py makes members of UPPER_CASE names with a str value only")
        members[name] = value
    return members


_OWN = ("__repr__", "__str__", "__format__", "__reduce_ex__", "__copy__", "__deepcopy__", "__dir__")


class CodesType(type):
    """The metaclass: makes the members, answers lookups and iteration."""

    def __new__(mcls, name, bases, namespace):
        members = _members(namespace)
        cls = super().__new__(mcls, name, bases, {k: v for k, v in namespace.items() if k not in members})
        by_name: dict = {}
        by_value: dict = {}
        for member_name, value in members.items():
            member = by_value.get(value)
            if member is None:
                member = str.__new__(cls, value)
                member.__dict__.update(_name_=member_name, _value_=value)
                by_value[value] = member
            by_name[member_name] = member
            type.__setattr__(cls, member_name, member)
        for attr in _OWN:   # before str's own (the class's bases put str first, as enum's mixins)
            if attr not in namespace:
                owner = next((base for base in cls.__mro__[1:] if isinstance(base, CodesType) and attr in vars(base)), None)
                if owner is not None:
                    type.__setattr__(cls, attr, vars(owner)[attr])
        type.__setattr__(cls, "_member_map_", by_name)
        type.__setattr__(cls, "_value2member_map_", by_value)
        type.__setattr__(cls, "_member_names_", [n for n, m in by_name.items() if m._name_ == n])
        return cls

    def __call__(cls, value):
        try:
            return cls._value2member_map_[value]
        except (KeyError, TypeError):   # TypeError: an unhashable value
            raise ValueError(f"{value!r} is not a valid {cls.__qualname__}") from None

    def __getitem__(cls, name: str):
        return cls._member_map_[name]

    def __iter__(cls):
        return (cls._member_map_[name] for name in cls._member_names_)

    def __len__(cls) -> int:
        return len(cls._member_names_)

    def __contains__(cls, value) -> bool:
        if isinstance(value, cls):
            return True
        try:
            return value in cls._value2member_map_
        except TypeError:
            return False

    def __bool__(cls) -> bool:
        return True

    @property
    def __members__(cls):
        from types import MappingProxyType
        return MappingProxyType(cls._member_map_)

    def __repr__(cls) -> str:
        return f"<enum {cls.__name__!r}>"

    def __setattr__(cls, name: str, value) -> None:
        if name in cls.__dict__.get("_member_map_", ()):
            raise AttributeError(f"cannot reassign member {name!r}")
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        if name in cls.__dict__.get("_member_map_", ()):
            raise AttributeError(f"{cls.__name__!r} cannot delete member {name!r}.")
        super().__delattr__(name)


class Codes(metaclass=CodesType):
    """The base of a codes class: ``class Reason(str, Codes)``."""

    _name_: str
    _value_: str

    @property
    def name(self) -> str:
        return self._name_

    @property
    def value(self) -> str:
        return self._value_

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self._name_}: {self._value_!r}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self._name_}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __reduce_ex__(self, protocol):
        return type(self), (self._value_,)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __dir__(self):
        return sorted(set(object.__dir__(self)) - {"_name_", "_value_"} | {"name", "value"})
