"""Resource limits of a sandbox: the :class:`Limits` record (pure, validated) and what
each limit becomes.

- ``cpu_time`` (seconds of CPU, per process), ``file_size`` (bytes, largest file a
  process may write) and ``open_files`` (descriptors per process) are rlimits, set in
  the command's process right before its exec (native: ``native/psb_child.c``; bwrap
  backend: our init's ``-R``), so the setup itself is never under them;
  ``RLIMIT_CORE`` is 0 whenever any limit is set;
- ``memory`` (bytes, the whole sandbox) and ``pids`` (processes and threads of the
  whole sandbox) need a cgroup (:mod:`pysandbox.cgroup`), made below the launcher's
  own cgroup for each launch; ``RLIMIT_AS`` is never used as a memory limit (it limits
  address space, not memory, and breaks ordinary programs);
- ``wall_time`` (seconds) is the launcher's deadline: the sandbox is killed when it
  passes (:mod:`pysandbox.enforcement`).

Which limit ended a command is reported as one of :data:`KINDS` (``result.limit``).
"""

from __future__ import annotations

import resource

from .checks import set_field, validated
from .errors import PolicyError, Reason
from .records import dataclass

# What ended a command, in the order a report is decided (enforcement.which_limit).
KINDS = ("wall_time", "memory", "cpu_time", "file_size", "pids")
CGROUP_KINDS = ("memory", "pids")
RLIMIT_KINDS = ("cpu_time", "file_size", "open_files")

_SIZE = r"(?i)^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$"   # compiled by `re` on first use (its cache)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# The smallest memory limit: the sandbox's init and the command's exec need a few MiB.
MIN_MEMORY = 4 << 20


def parse_size(text, what: str = "size") -> int:
    """``512M`` -> 536870912: a number of bytes with an optional K, M, G or T suffix
    (powers of 1024; ``KiB``, ``MB`` are read the same); an int is taken as bytes.

    Raises:
        PolicyError (invalid_size): not a positive size.
    """
    import re   # here: a launch without a size to read does not pay for it (issue 28)
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif isinstance(text, str) and (m := re.match(_SIZE, text)):
        value = int(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise PolicyError(f"{what} must be a size such as 512M (bytes, K, M, G, T): {text!r}",
                          Reason.INVALID_SIZE, text, field=what)
    if not 0 < value < 2**62:
        raise PolicyError(f"{what} must be a positive size: {text!r}", Reason.INVALID_SIZE, text, field=what)
    return value


def format_size(value: int) -> str:
    """The shortest exact form: 536870912 -> ``512M``."""
    for suffix in ("T", "G", "M", "K"):
        unit = _UNITS[suffix.lower()]
        if value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def _count(value, what: str, low: int = 1, number=int):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if number is float else int) \
            or not low <= value < 2**31:
        kind = "number" if number is float else "integer"
        raise PolicyError(f"{what} must be a positive {kind} (at least {low}): {value!r}",
                          Reason.INVALID_VALUE, value, field=what)
    return number(value)


@validated
@dataclass(frozen=True)
class Limits:
    """Resource limits; None: no limit. Sizes are bytes (a string such as ``"512M"`` is
    read by :func:`parse_size`); times are seconds.

    Raises:
        PolicyError: a value that is not a positive size or count (``invalid_size``,
            ``invalid_value``); a memory limit below 4M.
    """

    memory: int | None = None
    pids: int | None = None
    cpu_time: int | None = None
    wall_time: float | None = None
    file_size: int | None = None
    open_files: int | None = None

    def __post_init__(self):
        if self.memory is not None:
            memory = parse_size(self.memory, "memory")
            if memory < MIN_MEMORY:
                raise PolicyError(f"memory limit {format_size(memory)} is below {format_size(MIN_MEMORY)}: "
                                  "the sandbox's own processes need that much", Reason.INVALID_SIZE,
                                  self.memory, field="memory")
            set_field(self, "memory", memory)
        if self.file_size is not None:
            set_field(self, "file_size", parse_size(self.file_size, "file_size"))
        set_field(self, "pids", _count(self.pids, "pids"))
        set_field(self, "cpu_time", _count(self.cpu_time, "cpu_time"))
        set_field(self, "open_files", _count(self.open_files, "open_files", low=3))
        wall = _count(self.wall_time, "wall_time", low=0, number=float)
        if wall is not None and wall <= 0:
            raise PolicyError(f"wall_time must be positive: {wall!r}", Reason.INVALID_VALUE, wall,
                              field="wall_time")
        set_field(self, "wall_time", wall)

    @property
    def any(self) -> bool:
        return any(getattr(self, name) is not None for name in KINDS + ("open_files",))

    @property
    def cgroup(self) -> dict:
        """The limits that need a cgroup: ``{"memory": bytes, "pids": count}``."""
        return {k: getattr(self, k) for k in CGROUP_KINDS if getattr(self, k) is not None}

    def rlimits(self) -> tuple[tuple[int, int, int], ...]:
        """``(resource, soft, hard)`` for the command's process, when any limit is set.
        RLIMIT_CPU's hard limit is one second above the soft one: at the soft limit the
        kernel sends SIGXCPU (the report), at the hard one SIGKILL (a command that
        catches SIGXCPU gets one second more)."""
        if not self.any:
            return ()
        out = [(resource.RLIMIT_CORE, 0, 0)]
        if self.cpu_time is not None:
            out.append((resource.RLIMIT_CPU, self.cpu_time, self.cpu_time + 1))
        if self.file_size is not None:
            out.append((resource.RLIMIT_FSIZE, self.file_size, self.file_size))
        if self.open_files is not None:
            out.append((resource.RLIMIT_NOFILE, self.open_files, self.open_files))
        return tuple(out)

    def describe(self, kind: str) -> str:
        """``"memory 512M"``: a limit and its value, for messages."""
        value = getattr(self, kind)
        if kind in ("memory", "file_size"):
            shown = format_size(value)
        elif kind in ("cpu_time", "wall_time"):
            shown = f"{value:g}s"
        else:
            shown = str(value)
        return f"{kind} {shown}"
