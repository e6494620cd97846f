"""Per-step timings of a native launch (issue 27 item 5: the ``--verbose`` gap).

The C executor writes ``(tag, CLOCK_MONOTONIC ns)`` pairs into a shared page when a
launch carries one (``psb_launch.stamps``, native/psb.h): the launcher before and after
the clone and at the error pipe's EOF, the setup process at its entry and after each
op, the command's process when it starts and right before ``execve``. Without a page
the C side does nothing (one NULL test per step). A page is passed only when someone
listens: the ``pysandbox`` logger at DEBUG (``pysandbox --verbose``) or a callback in
:data:`listeners` (``benchmarks/profile_launch.py --steps``).
"""

from __future__ import annotations

import struct

MAX = 240   # native/psb.h PSB_STAMP_MAX (checked against the module by page())
POINTS = {-1: "launcher: clone", -2: "launcher: clone returned", -3: "setup process: entry",
          -4: "command's process: start", -5: "command's process: execve",
          -6: "setup process: exec of the init", -7: "launcher: error pipe EOF"}

# Callbacks ``f(steps)`` given each native launch's steps (see :func:`steps`); a
# benchmark appends one and removes it when done.
listeners: list = []


def page(ffi, lib):
    """A fresh shared page for one launch, and the pointer to give the C side."""
    import mmap   # only when someone listens (issue 15's start-up budget)
    if lib.PSB_STAMP_MAX != MAX:
        raise RuntimeError("native/psb.h PSB_STAMP_MAX differs from native_stamps.MAX")
    mm = mmap.mmap(-1, 8 * (1 + 2 * MAX))   # MAP_SHARED: a fork-mode child writes it too
    return mm, ffi.cast("long long *", ffi.from_buffer(mm))


def read(mm) -> list:
    """The page's ``(tag, ns)`` pairs in time order."""
    count = min(struct.unpack_from("q", mm, 0)[0], MAX)
    pairs = struct.unpack_from(f"{2 * count}q", mm, 8)
    return sorted(zip(pairs[0::2], pairs[1::2]), key=lambda p: p[1])


def steps(stamps: list, ops: list) -> list:
    """``(label, ms since the previous stamp)`` per stamp, the first against itself.
    An op's label is its index, kind and destination (``ops``: the launch's COps)."""
    out = []
    prev = stamps[0][1] if stamps else 0
    for tag, ns in stamps:
        if tag >= 0:
            op = ops[tag] if tag < len(ops) else None
            what = f"op {tag} {op.kind}" if op is not None else f"op {tag}"
            dest = getattr(op, "b", None)
            label = f"{what} {dest}" if isinstance(dest, str) else what
        else:
            label = POINTS.get(tag, f"point {tag}")
        out.append((label, (ns - prev) / 1e6))
        prev = ns
    return out


def report(mm, ops, log) -> None:
    """Hand one launch's steps to the listeners and the debug log (if any)."""
    got = steps(read(mm), ops)
    for listener in list(listeners):
        listener(got)
    if log is not None:
        log.debug("native steps (ms since the previous): %s",
                  "; ".join(f"{label} {dt:.3f}" for label, dt in got))
