"""Every normalisation rule of the differential tests, in this one place.

A rule is a claim that a difference does not matter to a user of the sandbox.
Anything not listed here is compared exactly. ``flatten`` turns a probe document
into ``{field: value}`` so a mismatch is reported field by field.

Rules (the README repeats them with the differences found):

R1  Mount ids and parent ids are dropped; a mount is keyed by its mount point
    (and its position among mounts stacked on the same point), its parent by the
    parent's mount point. Ids are kernel-global counters. The order of the mount
    table is compared (``mounts.order``): both backends run one setup tail, so they
    list the same mounts in the same order.
R2  A device number ``major:minor`` is kept when the host has a mount of it (a
    bind of a host filesystem); a new anonymous superblock (tmpfs, proc, devpts,
    mqueue made for the sandbox) is renamed ``new#k``, k in the path order of the
    first mount point showing it (not mountinfo order: a mount namespace copied from
    another, as the bwrap backend's init makes, lists its mounts in tree order), so
    two mounts sharing one superblock still show it. The minor of a new superblock
    is whatever the kernel's anonymous-device allocator hands out.
R3  A bind-mounted file whose backing file was unlinked during setup (bwrap's
    --ro-bind-data temp file, a hidden file's empty node) reports its root as
    ``<deleted>``. The temp name is random and unreachable from inside.
R4  Namespaces are compared as "new" or "same" relative to the caller (the probe
    does this); inode numbers are per-boot counters.
R5  Descriptor targets ``pipe:[ino]``/``socket:[ino]``/``anon_inode:[...]`` keep only
    their kind (the probe does this); inode numbers are counters.
R6  Pids outside the sandbox's own pid namespace are host pids and differ between
    any two launches: without a new pid namespace the probe's pid, ppid and session
    id become "<host pid>"; NSpid/NSsid keep only the innermost value (a procfs of
    the host's lists the outer ones too).
R7  A mount that no path reaches, because a later mount sits on the same mount
    point or on a directory above it (the host's stacked /dev/shm under a
    sandbox /dev), keeps its place, type, source and root, but its options and
    propagation read "<covered>". Without CAP_SYS_ADMIN nothing can unmount what
    covers it, so nothing can read, write or exec through it.
R8  In a session in network proxy mode, the password in the userinfo of each proxy
    variable (``http://c1:SECRET@127.0.0.1:3128``) reads "<secret>": a fresh random
    credential per command (pysandbox/session_proxy.py); the user name stays.
"""

from __future__ import annotations

import re

_DELETED_ROOT = re.compile(r"^/.*//deleted$")
_PROXY_SECRET = re.compile(r"^([a-z0-9]+://[^:@/]+:)[^@/]+@")
_PROXY_VARIABLES = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}


def normalise_mounts(mounts, host_devs: frozenset) -> list[dict]:
    """The mount table with R1-R3 applied, in mountinfo order."""
    if isinstance(mounts, dict):   # the probe could not read it
        return mounts
    by_id = {m["id"]: m for m in mounts}
    # R2: numbered by the first mount point (in path order) that shows each new superblock
    first: dict[str, tuple] = {}
    for i, m in enumerate(mounts):
        if m["dev"] not in host_devs:
            first[m["dev"]] = min(first.get(m["dev"], (m["mountpoint"], i)), (m["mountpoint"], i))
    new_devs = {dev: f"new#{k}" for k, dev in enumerate(sorted(first, key=first.get))}
    out = []
    covered = _covered(mounts)
    for i, m in enumerate(mounts):
        dev = m["dev"]
        if dev not in host_devs:                                       # R2
            dev = new_devs[dev]
        parent = by_id.get(m["parent"])
        root = "<deleted>" if _DELETED_ROOT.match(m["root"]) else m["root"]   # R3
        out.append({
            "mountpoint": m["mountpoint"],
            "parent": parent["mountpoint"] if parent is not None else "",  # R1
            "dev": dev,
            "root": root,
            "fstype": m["fstype"],
            "source": m["source"],
            "opts": ",".join(m["opts"]),
            "superopts": ",".join(m["superopts"]),
            "propagation": ",".join(sorted(m["optional"])) or "private",
        })
        if i in covered:                                                               # R7
            out[-1]["opts"] = out[-1]["propagation"] = "<covered>"
    return out


def _covered(mounts) -> set[int]:
    """Indexes of mounts hidden by a later mount on the same point or above it
    (that later mount not being one of their ancestors)."""
    by_id = {m["id"]: m for m in mounts}
    out = set()
    for i, m in enumerate(mounts):
        ancestors = set()
        p = by_id.get(m["parent"])
        while p is not None and p["id"] not in ancestors:
            ancestors.add(p["id"])
            p = by_id.get(p["parent"]) if p["parent"] != p["id"] else None
        point = m["mountpoint"]
        for later in mounts[i + 1:]:
            lp = later["mountpoint"]
            if later["id"] in ancestors:
                continue
            if lp == point or lp == "/" or point.startswith(lp.rstrip("/") + "/"):
                out.add(i)
                break
    return out


def flatten(doc: dict, host_devs: frozenset) -> dict[str, object]:
    """``{field: value}`` for a probe document (or a launch failure record)."""
    flat: dict[str, object] = {}
    doc = dict(doc)
    if isinstance(doc.get("status"), dict):                                              # R6
        status = doc["status"] = dict(doc["status"])
        for key in ("NSpid", "NSsid"):
            if key in status:
                status[key] = status[key].split(" ")[-1]
    if isinstance(doc.get("namespaces"), dict) and doc["namespaces"].get("pid") == "same":   # R6
        doc["pid"] = doc["ppid"] = "<host pid>"
        if isinstance(doc.get("status"), dict):
            doc["status"].update(NSpid="<host pid>", NSsid="<host pid>")
    if isinstance(doc.get("env"), dict):                                                   # R8
        doc["env"] = {k: _PROXY_SECRET.sub(r"\1<secret>@", v) if k in _PROXY_VARIABLES and isinstance(v, str)
                      else v for k, v in doc["env"].items()}
    for key, value in doc.items():
        if key == "detail":
            continue   # a launch failure's message: shown in reports, not compared
        if key == "mounts":
            flat["mounts.count"] = len(value) if isinstance(value, list) else value
            seen: dict[str, int] = {}
            table = normalise_mounts(value, host_devs) if isinstance(value, list) else []
            flat["mounts.order"] = " ".join(m["mountpoint"] for m in table)   # R1: order compared
            for m in table:
                n = seen.get(m["mountpoint"], 0)
                seen[m["mountpoint"]] = n + 1
                for field, v in m.items():
                    if field != "mountpoint":
                        flat[f"mount {m['mountpoint']}#{n}.{field}"] = v        # R1
        else:
            _flatten_into(flat, key, value)
    return flat


def _flatten_into(flat, prefix, value):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten_into(flat, f"{prefix}.{k}", v)
    else:
        flat[prefix] = value


def diff(left: dict, right: dict) -> list[tuple[str, object, object]]:
    """Fields whose values differ: ``[(field, left value, right value)]``, sorted."""
    missing = object()
    out = []
    for key in sorted(set(left) | set(right)):
        a, b = left.get(key, missing), right.get(key, missing)
        if a != b:
            out.append((key, "<absent>" if a is missing else a, "<absent>" if b is missing else b))
    return out
