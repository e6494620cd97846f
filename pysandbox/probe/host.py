"""Host facts read from files, for the parity layer (pybwrap decides what bwrap would
decide from them): no namespace is created and nothing is written."""

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


def nesting() -> str | None:
    """Evidence that this process already runs inside a sandbox or container (a user
    namespace other than the initial one, a nested pid namespace), as one phrase for an
    error message, else None. Read from /proc/self only, cheap, never raises.

    Only a hint for a message (a failed clone or procfs mount inside another sandbox is
    that sandbox's doing, not the host's sysctls): nothing is decided on it."""
    facts = []
    try:
        with open("/proc/self/uid_map") as f:
            uid_map = " ".join(f.read().split())
        if uid_map and uid_map != "0 0 4294967295":
            facts.append(f"a user namespace (uid_map '{uid_map}')")
    except OSError:
        pass
    try:
        with open("/proc/self/status") as f:
            nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
        if len(nspid) > 1:
            facts.append(f"a pid namespace {len(nspid) - 1} level{'s' if len(nspid) > 2 else ''} deep")
    except OSError:
        pass
    if not facts:
        return None
    return "this process already runs in " + " and ".join(facts) + ", as inside pysandbox, bwrap or a container"


_NESTED_NEEDS = {
    "userns": "the outer sandbox must allow user namespaces inside it (pysandbox: allow_nested_userns=True; "
              "bwrap: no --disable-userns), whatever the host's sysctls say",
    "userns-map": "a user namespace can be made here but uid 0 cannot be mapped in it: the kernel asks "
                  "CAP_SETFCAP for that, which the outer sandbox dropped (pysandbox: allow_nested_userns=True "
                  "and caps_keep=('setfcap',); bwrap: --cap-add CAP_SETFCAP), or run the inner one as "
                  "another uid",
    "proc": "the kernel mounts a new procfs only where the outer sandbox's /proc is fully visible "
            "(none of its entries covered by another mount)",
}


def nested_hint(kind: str) -> str | None:
    """``"nested sandbox: ..."`` explaining a failed ``kind`` (``"userns"``, ``"proc"``)
    when :func:`nesting` finds evidence, else None."""
    facts = nesting()
    if facts is None:
        return None
    return f"nested sandbox: {facts}; {_NESTED_NEEDS[kind]}"
