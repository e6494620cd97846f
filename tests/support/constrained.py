"""Simulated constrained hosts: run a Python snippet or ``pysandbox`` CLI under one.

Each host is simulated from the outside, without touching the real machine:

``plain``             nothing changed (the live control).
``userns_disabled``   an outer user namespace whose ``max_user_namespaces`` is 0.
``proc_unmountable``  an outer user+mount+pid namespace with a tmpfs over /proc/sys
                      (a fresh procfs mount is then refused: mnt_too_revealing).
                      The tmpfs holds kernel/overflow{u,g}id so bwrap gets past its
                      own reading of them and fails at the proc mount itself.
``netns_refused``     a seccomp filter in the outer process: unshare/clone with
                      CLONE_NEWNET fail with EPERM, clone3 with ENOSYS (its flags
                      cannot be inspected; glibc and Docker's profile do the same).
``native_missing``    ``import pysandbox._native`` fails (an import hook, also in
                      every Python child via sitecustomize).
``bwrap_missing``     PYSANDBOX_BWRAP names a path that does not exist.
``bwrap_not_on_path`` PATH holds no bwrap, PYSANDBOX_BWRAP is unset and the bundled
                     bwrap (pysandbox[bwrap]) is hidden (commands
                      must use absolute paths and shell builtins).
``bwrap_setuid``      PYSANDBOX_BWRAP is a setuid copy of the real bwrap.
``bwrap_old``         PYSANDBOX_BWRAP is a wrapper claiming 0.7.0 whose --help lacks
                      ``--disable-userns`` (a wrapper that refuses the option too).
``bwrap_old_on_path``, ``bwrap_setuid_on_path``
                      the same fakes, found as ``bwrap`` on PATH (PYSANDBOX_BWRAP unset).
``in_bwrap``          inside a bwrap sandbox (--unshare-all --unshare-user, / read-only,
                      fresh /proc, scratch bound read-write; nested user namespaces allowed).
``in_pysandbox``      inside a pysandbox sandbox (default policy on ``auto``, scratch as
                      workdir, ``allow_nested_userns=True``).

Hosts combine: ``host="native_missing+bwrap_missing"``.

Use from tests::

    done = constrained.run_python("userns_disabled", CODE, scratch=tmp_path)
    done = constrained.run_cli("netns_refused", ["run", "--", "true"], scratch=tmp_path)

    report = constrained.launch_report("proc_unmountable", "native", scratch=tmp_path)

Run by hand: ``python tests/support/constrained.py HOST[+HOST] -- -c CODE`` (or ``-m MOD ...``
or ``cli ARGS...``) applies the in-process parts of the host and runs the payload.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import stat
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HIDE_NATIVE_DIR = os.path.join(ROOT, "tests", "reliability", "hide_native")
NO_BUNDLED_BWRAP_DIR = os.path.join(ROOT, "tests", "support", "no_bundled_bwrap")
REAL_BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
HOSTS = ("plain", "userns_disabled", "proc_unmountable", "netns_refused", "native_missing",
         "bwrap_missing", "bwrap_not_on_path", "bwrap_setuid", "bwrap_old", "bwrap_old_on_path", "bwrap_setuid_on_path", "in_bwrap", "in_pysandbox")
# The option the fake old bwrap lacks; the default policy needs it (nested userns off).
OLD_BWRAP_MISSING_OPTION = "--disable-userns"

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000


# ---------------------------------------------------------------- outer process parts

def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def install_netns_filter() -> None:
    """Seccomp in this process: CLONE_NEWNET refused (EPERM), clone3 ENOSYS (x86_64)."""
    if os.uname().machine != "x86_64":
        raise OSError("the netns_refused simulation is built for x86_64 only")
    ld_w, ld_abs = 0x00, 0x20
    jmp_jeq, jmp_jset, k = 0x10, 0x40, 0x00
    ret = 0x06
    BPF_LD, BPF_JMP, BPF_RET = 0x00, 0x05, 0x06

    def stmt(code, kk):
        return (code, 0, 0, kk)

    def jump(code, kk, jt, jf):
        return (code, jt, jf, kk)

    ALLOW, ERRNO = 0x7FFF0000, 0x00050000
    EPERM, ENOSYS = 1, 38
    AUDIT_ARCH_X86_64 = 0xC000003E
    NR_CLONE, NR_UNSHARE, NR_CLONE3 = 56, 272, 435
    prog = [
        stmt(BPF_LD | ld_w | ld_abs, 4),                              # 0 arch
        jump(BPF_JMP | jmp_jeq | k, AUDIT_ARCH_X86_64, 1, 0),         # 1
        stmt(BPF_RET | k, ALLOW),                                     # 2
        stmt(BPF_LD | ld_w | ld_abs, 0),                              # 3 nr
        jump(BPF_JMP | jmp_jeq | k, NR_CLONE3, 0, 1),                 # 4
        stmt(BPF_RET | k, ERRNO | ENOSYS),                            # 5
        jump(BPF_JMP | jmp_jeq | k, NR_CLONE, 1, 0),                  # 6
        jump(BPF_JMP | jmp_jeq | k, NR_UNSHARE, 0, 3),                # 7
        stmt(BPF_LD | ld_w | ld_abs, 16),                             # 8 args[0] low word
        jump(BPF_JMP | jmp_jset | k, CLONE_NEWNET, 0, 1),             # 9
        stmt(BPF_RET | k, ERRNO | EPERM),                             # 10
        stmt(BPF_RET | k, ALLOW),                                     # 11
    ]
    del ret
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_NO_NEW_PRIVS): " + os.strerror(err))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_SECCOMP): " + os.strerror(err))


def disable_user_namespaces() -> None:
    """In an outer user namespace where we are root: no more nested user namespaces."""
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0\n")
    with open("/proc/sys/user/max_user_namespaces") as f:
        if f.read().strip() != "0":
            raise OSError("max_user_namespaces did not become 0")


def mask_proc_sys() -> None:
    """In an outer user+mount+pid namespace with its own /proc: cover /proc/sys."""
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    if libc.mount(b"none", b"/proc/sys", b"tmpfs", 0, b"mode=0755") != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount tmpfs on /proc/sys: " + os.strerror(err))
    os.mkdir("/proc/sys/kernel")
    for name in ("overflowuid", "overflowgid"):
        with open(f"/proc/sys/kernel/{name}", "w") as f:
            f.write("65534\n")


def hide_native_module() -> None:
    """``import pysandbox._native`` raises ImportError in this process from now on."""
    sys.path.insert(0, HIDE_NATIVE_DIR)
    import sitecustomize_hide  # noqa: F401  (installs the finder)


def _apply(hosts) -> None:
    if "userns_disabled" in hosts:
        disable_user_namespaces()
    if "proc_unmountable" in hosts:
        mask_proc_sys()
    if "native_missing" in hosts:
        hide_native_module()
    if "netns_refused" in hosts:
        install_netns_filter()


# ---------------------------------------------------------------- building the command

def parse_hosts(host: str) -> tuple[str, ...]:
    hosts = tuple(h for h in host.split("+") if h)
    unknown = [h for h in hosts if h not in HOSTS]
    if unknown or not hosts:
        raise ValueError(f"unknown simulated host {host!r}; known: {', '.join(HOSTS)}")
    return hosts


def fake_bwrap(scratch, kind: str) -> str:
    """A fake bwrap in ``scratch``: ``setuid`` (a setuid copy) or ``old``."""
    os.makedirs(scratch, exist_ok=True)
    if kind == "setuid":
        path = os.path.join(scratch, "bwrap-setuid")
        if not os.path.exists(path):
            shutil.copy(REAL_BWRAP, path)
            os.chmod(path, 0o4755)
        if not os.stat(path).st_mode & stat.S_ISUID:
            raise OSError(f"could not make {path} setuid")
        return path
    if kind == "old":
        path = os.path.join(scratch, "bwrap-old")
        opt = OLD_BWRAP_MISSING_OPTION
        with open(path, "w") as f:
            f.write(f"""#!/bin/sh
# A bubblewrap that predates {opt}: it says so in --help and --version, and refuses it.
for a in "$@"; do
  case "$a" in
    --version) echo "bubblewrap 0.7.0"; exit 0 ;;
    --help) {REAL_BWRAP} --help | grep -v -e '{opt}' -e '--assert-userns-disabled'; exit 0 ;;
    {opt}) echo "bwrap: Unknown option {opt}" >&2; exit 1 ;;
  esac
done
exec {REAL_BWRAP} "$@"
""")
        os.chmod(path, 0o755)
        return path
    raise ValueError(kind)


def environment(hosts, scratch, env=None) -> dict:
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    if "native_missing" in hosts:
        env["PYTHONPATH"] = HIDE_NATIVE_DIR + os.pathsep + env["PYTHONPATH"]
        env["PYSANDBOX_TEST_HIDE_NATIVE"] = "1"
    if "bwrap_missing" in hosts:
        env["PYSANDBOX_BWRAP"] = os.path.join(str(scratch), "no-such-dir", "bwrap")
    if "bwrap_not_on_path" in hosts:
        env.pop("PYSANDBOX_BWRAP", None)
        # no bundled bwrap either (pysandbox[bwrap] not installed)
        env["PYTHONPATH"] = NO_BUNDLED_BWRAP_DIR + os.pathsep + env["PYTHONPATH"]
        empty = os.path.join(str(scratch), "empty-path")
        os.makedirs(empty, exist_ok=True)
        env["PATH"] = empty
    if "bwrap_setuid" in hosts:
        env["PYSANDBOX_BWRAP"] = fake_bwrap(scratch, "setuid")
    if "bwrap_old" in hosts:
        env["PYSANDBOX_BWRAP"] = fake_bwrap(scratch, "old")
    for kind in ("old", "setuid"):
        if f"bwrap_{kind}_on_path" in hosts:
            bindir = os.path.join(str(scratch), f"bin-{kind}")
            os.makedirs(bindir, exist_ok=True)
            link = os.path.join(bindir, "bwrap")
            if not os.path.lexists(link):
                os.symlink(fake_bwrap(scratch, kind), link)
            env.pop("PYSANDBOX_BWRAP", None)
            env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


_IN_PYSANDBOX = """
import sys, pysandbox
scratch, argv = sys.argv[1], sys.argv[2:]
policy = pysandbox.Policy.default(workdir=scratch, allow_nested_userns=True)
sys.exit(pysandbox.run(argv, policy=policy).returncode)
"""


def command(host: str, payload: list[str], scratch=None) -> list[str]:
    """argv running ``payload`` (``-c CODE ...``, ``-m MOD ...`` or ``cli ARGS...``) under ``host``.

    ``scratch`` (a directory) is needed by ``in_bwrap`` and ``in_pysandbox``: the only
    host directory writable inside.
    """
    hosts = parse_hosts(host)
    inner = [sys.executable, os.path.abspath(__file__), "+".join(h for h in hosts if not h.startswith("in_"))
             or "plain", "--", *payload]
    if "in_bwrap" in hosts or "in_pysandbox" in hosts:
        if scratch is None:
            raise ValueError("in_bwrap and in_pysandbox need a scratch directory")
        scratch = str(scratch)
    if "in_bwrap" in hosts:
        inner = [REAL_BWRAP, "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/",
                 "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", scratch, scratch,
                 "--chdir", scratch, "--", *inner]
    if "in_pysandbox" in hosts:
        inner = [sys.executable, "-c", _IN_PYSANDBOX, scratch, *inner]
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    if "proc_unmountable" in hosts:
        return [unshare, "-U", "-r", "-m", "-p", "-f", "--mount-proc", "--", *inner]
    if "userns_disabled" in hosts:
        return [unshare, "-U", "-r", "--", *inner]
    return inner


def run(host: str, payload: list[str], *, scratch, env=None, timeout: float = 120,
        **kwargs) -> subprocess.CompletedProcess:
    """Run ``payload`` under the simulated ``host``; output captured as text."""
    hosts = parse_hosts(host)
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(command(host, payload, scratch), env=environment(hosts, scratch, env),
                          timeout=timeout, cwd=str(scratch), **kwargs)


def run_python(host: str, code: str, *args: str, scratch, **kwargs) -> subprocess.CompletedProcess:
    """Run the Python snippet ``code`` (sys.argv[1:] = args) under ``host``."""
    return run(host, ["-c", code, *args], scratch=scratch, **kwargs)


def run_cli(host: str, cli_args: list[str], *, scratch, **kwargs) -> subprocess.CompletedProcess:
    """Run ``pysandbox CLI_ARGS...`` under ``host``."""
    return run(host, ["cli", *cli_args], scratch=scratch, **kwargs)


def launch_report(host: str, backend: str = "auto", network: str = "deny", *, scratch,
                  allow_nested: bool = False) -> dict:
    """Under ``host``: ``status`` of the default policy (workdir ``scratch/work``) and a
    launch of a command that would create a marker file there. Returns the JSON report
    of tests/reliability/probe_snippet.py (``status``, ``launch`` with ``ran``,
    ``error``, ``reason``; ``warnings`` logged; ``backend_used``)."""
    import json
    work = os.path.join(str(scratch), "work")
    os.makedirs(work, exist_ok=True)
    marker = os.path.join(work, f"marker-{os.getpid()}-{abs(hash((host, backend, network)))}")
    args = ["-m", "tests.reliability.probe_snippet", backend, network, work, marker]
    if allow_nested:
        args.append("allow-nested")
    done = run(host, args, scratch=scratch)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"probe under {host} failed: rc {done.returncode}: {done.stderr.strip()[-500:]}")
    report = json.loads(lines[-1])
    if os.path.exists(marker):
        os.unlink(marker)
    return report


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: constrained.py HOST[+HOST] -- (-c CODE | -m MODULE | cli) ARGS...", file=sys.stderr)
        return 2
    hosts = parse_hosts(argv[0])
    payload = argv[2:]
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    _apply(hosts)
    import runpy
    if payload[0] == "-c":
        sys.argv = ["-c", *payload[2:]]
        exec(compile(payload[1], "<constrained>", "exec"), {"__name__": "__main__"})
        return 0
    if payload[0] == "-m":
        sys.argv = [payload[1], *payload[2:]]
        runpy.run_module(payload[1], run_name="__main__", alter_sys=True)
        return 0
    if payload[0] == "cli":
        sys.argv = ["pysandbox", *payload[1:]]
        from pysandbox.cli import main as cli_main
        return cli_main(payload[1:])
    print(f"unknown payload {payload[0]!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
