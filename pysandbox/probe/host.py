"""Host facts read from /proc/self for error messages (:func:`nested_hint`): is this
process already inside a sandbox? Nothing is created or written. (pybwrap's own host
facts are bwrap_compat/hostfacts.py.)"""

from __future__ import annotations


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
