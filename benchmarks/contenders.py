"""The launchers the benchmarks compare, each running ``/bin/true`` once per call.

- ``plain``: ``subprocess.run(["/bin/true"])``, no sandbox (the cost of a spawn).
- ``floor``: ``benchmarks/floor.c``, only the syscalls a default-policy sandbox needs.
- ``native``, ``bwrap-backend``: ``pysandbox.run`` on the default policy.
- ``bwrap``: raw bubblewrap with the default policy's options.

Every contender is built once (policy, argv) and then launched many times, so a
measurement holds only what is paid per launch. A failed launch raises.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
FLOOR_SRC = os.path.join(HERE, "floor.c")
TRUE = "/bin/true"
NETWORKS = ("deny", "allow")


class Unavailable(Exception):
    """A contender cannot run here (missing tool, backend not built, setup failed)."""


@dataclass
class Contender:
    name: str          # e.g. "native"
    network: str       # "deny" or "allow"
    launch: Callable[[], object]
    binds: int = 0
    argv: list = field(default_factory=list)   # the whole command line, for subprocess contenders
    every: int = 1     # in an alternated run, launch only every ``every``-th round (slow contenders)

    @property
    def label(self) -> str:
        return f"{self.name}/{self.network}" + (f"/{self.binds}b" if self.binds else "")


# ---------------------------------------------------------------- the floor program

_floor_path: str | None = None


def build_floor() -> str:
    """Compile floor.c with cc (once per process) and return the binary's path.

    It goes to ``benchmarks/floor`` (gitignored) when that directory is writable,
    else into a private temporary directory removed at exit.

    Raises:
        Unavailable: no C compiler, or the build failed.
    """
    global _floor_path
    if _floor_path is not None and os.path.exists(_floor_path):
        return _floor_path
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise Unavailable("floor: no C compiler (cc) on PATH")
    if os.access(HERE, os.W_OK):
        out = os.path.join(HERE, "floor")
    else:
        tmp = tempfile.mkdtemp(prefix="psb-floor-")
        _cleanup_at_exit(tmp)
        out = os.path.join(tmp, "floor")
    fresh = os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(FLOOR_SRC)
    if not fresh:
        tmp_out = f"{out}.{os.getpid()}"
        done = subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-o", tmp_out, FLOOR_SRC],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise Unavailable(f"floor: cc failed: {done.stderr.strip()[-500:]}")
        os.replace(tmp_out, out)
    _floor_path = out
    return out


def _cleanup_at_exit(path: str) -> None:
    import atexit
    atexit.register(shutil.rmtree, path, True)


# ---------------------------------------------------------------- bind directories

class BindDirs:
    """``count`` empty directories on the host root file system (not under /tmp,
    which is a tmpfs in every sandbox here), to be bound read-only onto themselves.
    Removed by ``close``."""

    def __init__(self, count: int):
        base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else os.path.expanduser("~")
        self.root = tempfile.mkdtemp(prefix="psb-bench-binds-", dir=base)
        self.paths = []
        for i in range(count):
            path = os.path.join(self.root, f"d{i:04d}")
            os.mkdir(path)
            self.paths.append(path)

    def first(self, n: int) -> list[str]:
        return self.paths[:n]

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------- contenders

def _run_argv(argv: list[str]) -> Callable[[], object]:
    def launch():
        return subprocess.run(argv, check=True)
    return launch


def plain(network: str = "allow") -> Contender:
    return Contender("plain", network, _run_argv([TRUE]), argv=[TRUE])


def floor(network: str = "deny", binds: list[str] = ()) -> Contender:
    argv = [build_floor()] + (["-n"] if network == "allow" else [])
    for path in binds:
        argv += ["-b", path]
    argv += ["--", TRUE]
    return Contender("floor", network, _run_argv(argv), len(binds), argv)


def bwrap_argv(network: str = "deny", binds: list[str] = ()) -> list[str]:
    """Raw bubblewrap with the default policy: everything unshared (net unless allow),
    / read-only, fresh /proc, minimal /dev, tmpfs /tmp, then the extra binds."""
    exe = shutil.which("bwrap")
    if exe is None:
        raise Unavailable("bwrap not found on PATH")
    argv = [exe, "--unshare-all"] + (["--share-net"] if network == "allow" else [])
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in binds:
        argv += ["--ro-bind", path, path]
    return argv + ["--die-with-parent", "--new-session", TRUE]


def bwrap(network: str = "deny", binds: list[str] = ()) -> Contender:
    argv = bwrap_argv(network, binds)
    return Contender("bwrap", network, _run_argv(argv), len(binds), argv)


def pysandbox_backend(backend: str, network: str = "deny", binds: list[str] = ()) -> Contender:
    """``pysandbox.run([TRUE])`` on ``Policy.default(network=..., ro=binds)``."""
    try:
        import pysandbox
    except ImportError as exc:
        raise Unavailable(f"import pysandbox: {exc}") from exc
    policy = pysandbox.Policy.default(network=network, ro=list(binds))
    run = pysandbox.run

    def launch():
        return run([TRUE], policy=policy, backend=backend, check=True)
    name = "bwrap-backend" if backend == "bwrap" else backend
    return Contender(name, network, launch, len(binds))


def native(network: str = "deny", binds: list[str] = ()) -> Contender:
    return pysandbox_backend("native", network, binds)


def bwrap_backend(network: str = "deny", binds: list[str] = ()) -> Contender:
    return pysandbox_backend("bwrap", network, binds)


FACTORIES = {
    "plain": lambda network="allow", binds=(): plain(network),
    "floor": floor,
    "native": native,
    "bwrap-backend": bwrap_backend,
    "bwrap": bwrap,
}


def make(name: str, network: str = "deny", binds: list[str] = ()) -> Contender:
    """Build contender ``name`` and launch it once to prove it works here.

    Raises:
        Unavailable: it cannot be built or its first launch failed (with why).
    """
    try:
        contender = FACTORIES[name](network=network, binds=binds)
        contender.launch()
    except Unavailable:
        raise
    except Exception as exc:  # any failure of the trial launch means "not working here"
        raise Unavailable(f"{name}/{network}: {type(exc).__name__}: {exc}") from exc
    return contender
