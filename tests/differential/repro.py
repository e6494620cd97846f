"""Minimal direct repros of the differences in README.md (D1-D7), one command each,
run under both backends: ``python -m tests.differential.repro``.

Each line prints what the command printed (or the error) under native and under
bwrap; the README says which side is the reference and who owns the fix.
"""

from __future__ import annotations

import os

import pysandbox
from pysandbox import Bind, Dir, File, Policy, Symlink


def show(title: str, argv, policy: Policy, **kw) -> None:
    print(title)
    for backend in ("native", "bwrap"):
        try:
            done = pysandbox.run(argv, policy=policy, backend=backend, capture_output=True, text=True, **kw)
            print(f"  {backend:6}: {done.stdout.strip()!r} {done.stderr.strip()[-120:]!r}")
        except (pysandbox.SandboxError, OSError) as exc:
            print(f"  {backend:6}: {type(exc).__name__} {exc}")


def main() -> None:
    base = Policy.default()
    sh = ["/bin/sh", "-c"]
    show("D1 PWD in the environment", ["/usr/bin/env"], base, env={"A": "1"})
    show("D2 read-only /proc/sys bind", sh + ["grep -c ' /proc/sys ' /proc/self/mountinfo"], base)
    show("D3 pid, session id, process group", sh + ["cut -d' ' -f1,6,5 /proc/self/stat"], base)
    show("D4 uid_map and /dev/pts owner", sh + ["cat /proc/self/uid_map; stat -c '%u %g' /dev/pts"],
         Policy.default(uid=1234, gid=4321))
    fd = os.open("/usr/share", os.O_PATH | os.O_DIRECTORY)
    try:
        show("D5 bind by descriptor", sh + ["ls /tmp/byfd | head -1"],
             Policy(fs=base.fs + (Bind(None, "/tmp/byfd", src_fd=fd),)))
    finally:
        os.close(fd)
    show("D6 Dir with a mode on an existing directory in a read-only bind", ["/bin/true"],
         Policy(fs=base.fs + (Bind("/usr", "/tmp/u", readonly=True), Dir("/tmp/u/share", mode=0o700))))
    show("D7 default modes (file, bind-data file, parents of a bind and of a symlink)",
         sh + ["stat -c '%n %a' /tmp/f /tmp/bd /tmp/p /tmp/s"],
         Policy(fs=base.fs + (File("/tmp/f", data=b"x"), File("/tmp/bd", data=b"x", bind=True),
                              Bind("/usr", "/tmp/p/q", readonly=True), Symlink("a", "/tmp/s/l"))))


if __name__ == "__main__":
    main()
