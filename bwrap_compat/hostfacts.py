"""Host facts read from files, for pybwrap's decisions (what bwrap would decide from
them): no namespace is created and nothing is written. Here, not in pysandbox's probe
package, so that a pybwrap launch does not import that package (issue 28: start-up).
"""

from __future__ import annotations

import os


def effective_caps() -> frozenset:
    """Capability numbers in this process's effective set (/proc/self/status CapEff)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    mask = int(line.split()[1], 16)
                    return frozenset(c for c in range(64) if mask >> c & 1)
    except OSError:
        pass
    return frozenset()


def nested_userns_possible() -> bool:
    """Whether this host allows user namespaces at all (user.max_user_namespaces)."""
    try:
        with open("/proc/sys/user/max_user_namespaces") as f:
            return f.read().strip() != "0"
    except OSError:
        return True


def userns_try_available() -> bool:
    """bwrap's --unshare-user-try probe (files only, nothing is created)."""
    if not os.path.exists("/proc/self/ns/user"):
        return False
    for path, off in (("/sys/module/user_namespace/parameters/enable", "N"),
                      ("/proc/sys/user/max_user_namespaces", "0\n")):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        if (off == "N" and text.startswith("N")) or text == off:
            return False
    return True


def selinux_enabled() -> bool:
    return os.path.exists("/sys/fs/selinux/enforce")
