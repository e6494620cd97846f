"""The one loader of the compiled module pysandbox._native (native/psb_*.c, built by
native/build_native.py) and its ABI: the op names and flags Python emits, the stamp
checked at load, the sealed init's descriptor and the mount_setattr probe.

The op numbering comes from the module (``lib.PSB_OP_*``, generated from psb.h);
``OP_KINDS`` is the list of names Python knows, checked against the module at load
(see docs/ARCHITECTURE.md). A module built from another psb.h (``PSB_ABI_VERSION``
differs) is refused with ``NativeModuleMissing`` instead of being called with a
layout it does not have.
"""

from __future__ import annotations

import os
import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)
import _thread

from ..errors import NativeModuleMissing, Reason

ABI_VERSION = 8   # native/psb.h PSB_ABI_VERSION
NO_EXEC_INIT_ENV = "PYSANDBOX_NATIVE_NO_EXEC_INIT"

# The op kinds, flags and stages Python emits (native_ops.py), checked against the module.
from .native_ops import (F_BIND, F_CURRENT_IDS, F_DEV, F_IF_WRITABLE, F_LIFELINE, F_MODE,  # noqa: E402
                         F_NO_AMBIENT, F_NO_RAISE, F_NOFOLLOW, F_OPTIONAL, F_RO, F_USERNS_FDS, OP, OP_KINDS,
                         STAGE_CLONE, STAGE_EXEC, STAGE_FDS, STAGE_MONITOR, STAGE_OP, STAGE_PARENT_DIED,
                         STAGE_PIPE, STAGE_PTY)

from . import tail  # noqa: E402 - enum psb_tail_step, checked against the module

# The signals the sandbox's pid-1 init forwards to the command (both init modes).
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                     signal.SIGUSR2)
FORWARDED_SIGNAL_MASK = sum(1 << (int(s) - 1) for s in FORWARDED_SIGNALS)

_module = None
_module_error: Exception | None = None
_module_lock = _thread.allocate_lock()   # threading's own Lock; threading itself is not imported by a launch (issue 28)


def module_drift(lib) -> list[str]:
    """What differs between the compiled module's enums/flags and this module's names."""
    drift = []
    module_ops = sorted(n[len("PSB_OP_"):] for n in dir(lib) if n.startswith("PSB_OP_"))
    if module_ops != sorted(OP_KINDS):
        drift.append(f"op names: module {module_ops} vs Python {sorted(OP_KINDS)}")
    for name, value in OP.items():
        if getattr(lib, f"PSB_OP_{name}", None) != value:
            drift.append(f"PSB_OP_{name}")
    flags = {"RO": F_RO, "DEV": F_DEV, "OPTIONAL": F_OPTIONAL, "BIND": F_BIND, "MODE": F_MODE,
             "USERNS_FDS": F_USERNS_FDS, "IF_WRITABLE": F_IF_WRITABLE, "CURRENT_IDS": F_CURRENT_IDS,
             "LIFELINE": F_LIFELINE, "NO_AMBIENT": F_NO_AMBIENT, "NOFOLLOW": F_NOFOLLOW,
             "NO_RAISE": F_NO_RAISE}
    drift += [f"PSB_F_{n}" for n, v in flags.items() if getattr(lib, f"PSB_F_{n}", None) != v]
    stages = (STAGE_OP, STAGE_CLONE, STAGE_PARENT_DIED, STAGE_FDS, STAGE_EXEC, STAGE_PIPE, STAGE_PTY,
              STAGE_MONITOR)
    names = ("OP", "CLONE", "PARENT_DIED", "FDS", "EXEC", "PIPE", "PTY", "MONITOR")
    drift += [f"PSB_STAGE_{n}" for n, v in zip(names, stages) if getattr(lib, f"PSB_STAGE_{n}", None) != v]
    module_steps = sorted(n[len("PSB_TAIL_"):] for n in dir(lib) if n.startswith("PSB_TAIL_"))
    if module_steps != sorted(tail.STEPS):
        drift.append(f"tail steps: module {module_steps} vs Python {sorted(tail.STEPS)}")
    drift += [f"PSB_TAIL_{n}" for n, v in tail.STEP.items() if getattr(lib, f"PSB_TAIL_{n}", None) != v]
    return drift


def load_module():
    """(ffi, lib) of pysandbox._native.

    Raises:
        NativeModuleMissing: the module cannot be imported, lacks the executor, or was
            built from another psb.h (its ABI stamp or enums differ: rebuild the module).
    """
    global _module, _module_error
    if _module is not None:
        return _module
    with _module_lock:
        if _module is not None:
            return _module
        try:
            from .. import _native
            lib = _native.lib
            stamp = getattr(lib, "PSB_ABI_VERSION", None)
            if stamp != ABI_VERSION:
                raise ImportError(f"its ABI stamp is {stamp}, this pysandbox expects {ABI_VERSION}: "
                                  "rebuild the module")
            drift = module_drift(lib)
            if drift:
                raise ImportError(f"psb.h and pysandbox differ ({', '.join(drift)}): rebuild the module")
            lib.psb_spawn  # noqa: B018 - the executor must be there
        except (ImportError, AttributeError) as exc:
            _module_error = exc
            raise NativeModuleMissing(
                f"the compiled module pysandbox._native cannot be used ({exc}); both backends need it: "
                "reinstall pysandbox from a wheel, or from source with a C compiler (rebuild the module)",
                Reason.NATIVE_MODULE_MISSING) from exc
        _module = (_native.ffi, lib)
    return _module


_init_fd: int | None = None


def init_fd() -> int:
    """The sealed memfd of the freestanding pid-1 init (native/psb_init.c), created and
    probed once per process; -1 when it cannot be exec'd here (then the init stays a
    copy of the caller: correct, but each launch copies the caller's page tables).
    ``PYSANDBOX_NATIVE_NO_EXEC_INIT=1`` forces that fork mode."""
    global _init_fd
    if os.environ.get(NO_EXEC_INIT_ENV) == "1":
        return -1
    if _init_fd is None:
        ffi, lib = load_module()
        with _module_lock:
            if _init_fd is None:
                fd = lib.psb_init_memfd() if lib.PSB_HAS_EXEC_INIT else -1
                if fd >= 0 and lib.psb_probe_exec_init(fd) != 0:
                    os.close(fd)
                    fd = -1
                _init_fd = fd if fd >= 0 else -1
    return _init_fd


def has_mount_setattr() -> bool:
    ffi, lib = load_module()
    return bool(lib.PSB_HAS_MOUNT_SETATTR) and bool(lib.psb_mount_setattr_works())
