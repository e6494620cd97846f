"""bwrap's wording for pysandbox's setup errors: :func:`bwrap_message` turns a typed
error (its ``stage``, ``errno``, ``filename`` and, for an overlay, ``mount_options``)
into the message bubblewrap prints for the same failure, so pybwrap's stderr matches
bwrap's (tests/compat compares them). No pysandbox import: ``--version`` stays lean.
"""

from __future__ import annotations

import errno
import os

# bwrap's message for an overlay mount that fails with ELOOP (overlapping layers).
OVERLAP = "Overlay directories may not overlap"

# bwrap's wording for a failed setup step, by pysandbox's stage name.
BWRAP_WORDING = {
    "chdir": "Can't chdir to {}", "tmpfs": "Can't mount tmpfs on {}", "proc": "Can't mount proc on {}",
    "mqueue": "Can't mount mqueue on {}", "dir": "Can't mkdir {}", "symlink": "Can't make symlink at {}",
    "file": "Can't create file at {}", "remount_ro": "Can't remount readonly on {}", "chmod": "Can't chmod {}",
    "hostname": "Can't set hostname to {}", "bind": "Can't bind mount {}",
}
# Steps that name a descriptor, not a path: bwrap's words without one.
BWRAP_SETNS_WORDING = {"join_userns": "Joining specified user namespace failed", "join_pidns": "Setting pidns failed",
                       "userns2": "Setting userns2 failed"}


def bwrap_message(exc) -> str:
    """A pysandbox error as bwrap would word it (``Can't mount tmpfs on /x: Permission denied``)."""
    stage, err, name = getattr(exc, "stage", None), getattr(exc, "errno", None), getattr(exc, "filename", None)
    if stage == "join_userns" and err == errno.EINVAL:
        return ("Joining the specified user namespace failed, it might not be a descendant of the current "
                "user namespace.")
    if stage == "overlay" and err and name:
        detail = OVERLAP if err == errno.ELOOP else os.strerror(err)
        # bwrap names the mount point in its setup view (/newroot/DEST), as the executor does.
        where = "/newroot" + (name if name != "/" else "")
        return f"Can't make overlay mount on {where} with options {getattr(exc, 'mount_options', '?')}: {detail}"
    if stage == "symlink" and err == errno.EEXIST and name and hasattr(exc, "existing_link"):
        # bwrap 0.9+: the same link again is accepted; anything else is named
        if exc.existing_link is None:
            return f"Can't make symlink at {name}: destination exists and is not a symlink"
        return f"Can't make symlink at {name}: existing destination is {exc.existing_link}"
    if stage in BWRAP_SETNS_WORDING and err:
        return f"{BWRAP_SETNS_WORDING[stage]}: {os.strerror(err)}"
    if stage in BWRAP_WORDING and err and name:
        return f"{BWRAP_WORDING[stage].format(name)}: {os.strerror(err)}"
    message = exc.args[0] if exc.args else exc.reason.value
    # pysandbox's API hint, in pybwrap's own switch (bwrap_compat/cli.py reads PYBWRAP_BACKEND)
    return message.replace("use backend='bwrap'", "set PYBWRAP_BACKEND=bwrap (run bubblewrap itself)")
