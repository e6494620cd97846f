"""The in-sandbox probe: prints ONE JSON document describing the sandbox it runs in.

It is run as ``python -c <this source> <json args>`` so that it needs nothing from
the sandbox's filesystem but the interpreter (and pyroute2 for the netlink dump).
It imports nothing from pysandbox and is standard library + pyroute2 only.

Arguments (one JSON object in argv[1]):
    proc      where a procfs is visible inside ("/proc" unless the policy moved it)
    caller_ns {name: inode} of the caller's namespaces, to report which differ
    paths     sandbox paths the policy touched: each is stat'ed, directories listed
    dev, tmp  the /dev and /tmp to list (default "/dev", "/tmp"; null: not listed)

Raw values are reported; probe_normalise.py decides what is compared and how.
"""

import ctypes
import errno
import json
import os
import resource
import stat
import sys

NS_NAMES = ("user", "mnt", "pid", "ipc", "uts", "net", "cgroup")
TYPES = {stat.S_IFDIR: "d", stat.S_IFREG: "f", stat.S_IFLNK: "l", stat.S_IFCHR: "c",
         stat.S_IFBLK: "b", stat.S_IFIFO: "p", stat.S_IFSOCK: "s"}
MAX_ENTRIES = 200   # a listing is truncated after this many names (sorted)


def _err(exc):
    return {"error": errno.errorcode.get(exc.errno, str(exc.errno))}


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError as exc:
        return _err(exc)


def describe(path):
    """Type, mode, owner of ``path`` (not followed), the target of a symlink, the size
    and first bytes of a small regular file, the device number of a device node."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return _err(exc)
    kind = TYPES.get(stat.S_IFMT(st.st_mode), "?")
    out = {"type": kind, "mode": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid, "gid": st.st_gid}
    if kind == "l":
        out["target"] = os.readlink(path)
    elif kind == "f":
        out["size"] = st.st_size
        if st.st_size <= 64:
            try:
                with open(path, "rb") as f:
                    out["data"] = f.read(64).hex()
            except OSError as exc:
                out["data"] = _err(exc)
    elif kind in ("c", "b"):
        out["rdev"] = [os.major(st.st_rdev), os.minor(st.st_rdev)]
    return out


def listing(path):
    """One level: {name: describe(entry)}; a directory's own description under '.'."""
    out = {".": describe(path)}
    if out["."].get("type") != "d":
        return out
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        out["entries"] = _err(exc)
        return out
    if len(names) > MAX_ENTRIES:
        out["truncated"] = len(names)
        names = names[:MAX_ENTRIES]
    out["entries"] = {name: describe(os.path.join(path, name)) for name in names}
    return out


def mountinfo(proc):
    text = read(f"{proc}/self/mountinfo")
    if isinstance(text, dict):
        return text
    mounts = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        f = left.split(" ")
        fstype, source, superopts = (right.split(" ") + ["", "", ""])[:3]
        mounts.append({"id": int(f[0]), "parent": int(f[1]), "dev": f[2], "root": f[3],
                       "mountpoint": f[4], "opts": f[5].split(","), "optional": f[6:],
                       "fstype": fstype, "source": source, "superopts": superopts.split(",")})
    return mounts


def status_fields(proc):
    text = read(f"{proc}/self/status")
    if isinstance(text, dict):
        return text
    keep = ("Umask", "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
            "NoNewPrivs", "Seccomp", "Seccomp_filters", "NSpid", "NSsid")
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in keep:
            out[key] = " ".join(value.split())
    return out


def rlimits():
    """Every resource limit as (soft, hard): the same on both backends, and the
    policy's ``limits`` where it sets them (pysandbox/limits.py)."""
    return {name: list(resource.getrlimit(getattr(resource, name)))
            for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_"))}


def namespaces(proc, caller):
    out = {}
    for name in NS_NAMES:
        try:
            ino = os.stat(f"{proc}/self/ns/{name}").st_ino
        except OSError as exc:
            out[name] = _err(exc)
            continue
        out[name] = "same" if caller.get(name) == ino else "new"
    return out


def descriptors(proc):
    """Open descriptors above stderr (taken before anything else opens one)."""
    try:
        fds = sorted(int(n) for n in os.listdir(f"{proc}/self/fd"))
    except OSError as exc:
        return _err(exc)
    out = {}
    for fd in fds:
        if fd <= 2:
            continue
        try:
            target = os.readlink(f"{proc}/self/fd/{fd}")
        except OSError:
            continue   # the listing's own descriptor, closed by now
        if target.startswith(("pipe:", "socket:", "anon_inode:")):
            target = target.split(":")[0]
        out[str(fd)] = target
    return out


def nested_userns():
    """Whether this process may create a user namespace (tried in a throwaway child)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.fork()
    if pid == 0:
        rc = libc.unshare(0x10000000)   # CLONE_NEWUSER
        os._exit(0 if rc == 0 else min(ctypes.get_errno(), 255))
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "ok" if code == 0 else errno.errorcode.get(code, str(code))


def unix_socket():
    """Whether socket(AF_UNIX) is allowed (Policy.strict_unix refuses it by seccomp)."""
    import socket
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"


def network():
    try:
        from pyroute2 import IPRoute
    except ImportError as exc:
        return {"error": f"pyroute2: {exc}"}
    out = {}
    with IPRoute() as ipr:
        names = {}
        links = []
        for msg in ipr.get_links():
            name = msg.get_attr("IFLA_IFNAME")
            names[msg["index"]] = name
            links.append({"name": name, "index": msg["index"], "flags": msg["flags"],
                          "mtu": msg.get_attr("IFLA_MTU"), "operstate": msg.get_attr("IFLA_OPERSTATE"),
                          "address": msg.get_attr("IFLA_ADDRESS"), "kind": _link_kind(msg)})
        out["links"] = sorted(links, key=lambda l: l["name"] or "")
        addrs = []
        for msg in ipr.get_addr():
            addrs.append({"link": names.get(msg["index"]), "family": msg["family"],
                          "prefixlen": msg["prefixlen"], "scope": msg["scope"],
                          "address": msg.get_attr("IFA_ADDRESS"), "local": msg.get_attr("IFA_LOCAL"),
                          "flags": msg.get_attr("IFA_FLAGS")})
        out["addresses"] = sorted(addrs, key=lambda a: json.dumps(a, sort_keys=True))
        routes = []
        for family in (2, 10):   # AF_INET, AF_INET6
            for msg in ipr.route("dump", family=family):
                routes.append({"family": family, "table": msg.get_attr("RTA_TABLE"),
                               "dst": msg.get_attr("RTA_DST"), "dst_len": msg["dst_len"],
                               "type": msg["type"], "scope": msg["scope"], "proto": msg["proto"],
                               "oif": names.get(msg.get_attr("RTA_OIF")),
                               "gateway": msg.get_attr("RTA_GATEWAY"),
                               "prefsrc": msg.get_attr("RTA_PREFSRC")})
        out["routes"] = sorted(routes, key=lambda r: json.dumps(r, sort_keys=True))
    return out


def _link_kind(msg):
    info = msg.get_attr("IFLA_LINKINFO")
    return info.get_attr("IFLA_INFO_KIND") if info is not None else None


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    proc = args.get("proc", "/proc")
    fds = descriptors(proc)   # first: before this script opens anything of its own
    try:
        cwd = os.getcwd()
    except OSError as exc:
        cwd = _err(exc)
    cmdline = read(f"{proc}/self/cmdline")
    pid = os.getpid()
    doc = {
        "fds": fds,
        "argv0": cmdline.split("\0")[0] if isinstance(cmdline, str) else cmdline,
        "pid": pid,
        "ppid": os.getppid(),
        "session_leader": os.getsid(0) == pid,
        "sid_visible": os.getsid(0) != 0,
        "pgrp_leader": os.getpgrp() == pid,
        "uid": [os.getuid(), os.geteuid()],
        "gid": [os.getgid(), os.getegid()],
        "groups": sorted(os.getgroups()),
        "hostname": os.uname().nodename,
        "cwd": cwd,
        "env": dict(os.environ),
        "uid_map": read(f"{proc}/self/uid_map"),
        "gid_map": read(f"{proc}/self/gid_map"),
        "setgroups": read(f"{proc}/self/setgroups"),
        "status": status_fields(proc),
        "rlimits": rlimits(),
        "namespaces": namespaces(proc, args.get("caller_ns", {})),
        "max_user_namespaces": read(f"{proc}/sys/user/max_user_namespaces"),
        "nested_userns": nested_userns(),
        "unix_socket": unix_socket(),
        "mounts": mountinfo(proc),
        "dev": listing(args.get("dev", "/dev")) if args.get("dev", "/dev") else None,
        "tmp": listing(args.get("tmp", "/tmp")) if args.get("tmp", "/tmp") else None,
        "paths": {p: listing(p) for p in args.get("paths", [])},
        "network": network(),
    }
    json.dump(doc, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
