"""Well-known Unix-socket authority: sockets whose holder can act for the host user.

A network namespace does not isolate pathname Unix sockets: a socket visible in
the sandbox's file system can be connected, and some of them hand out the host's
authority (the docker or podman API is root on the host; an ssh or gpg agent
signs as the user; the D-Bus session bus can start programs outside the
sandbox; the D-Bus system bus, systemd's private socket, udev, snapd, libvirt
and LXD trust the peer's uid, which is 0 for a root caller's sandbox). In network deny mode ``Policy.default`` covers the ones listed here
with an inaccessible node and removes the variables that advertise them;
``keep_authority_sockets=True`` keeps them.

Coverage, exactly: the paths below that exist, as sockets, when the policy is
built, and the environment variables below. Not covered: any other socket (a
socket in a writable bind is delegated authority, see :func:`delegated`),
sockets created after the policy was built, hard links to these sockets under
other names, and sockets reached through a descriptor the caller passes.
Abstract sockets belong to the network namespace, so deny mode already makes
the host's unreachable.
"""

from __future__ import annotations

import os
import stat
from _collections_abc import Iterable, Mapping   # collections.abc: the same classes, after importing collections (issue 28)

from .fs import Hide
from .records import dataclass

# Variables that advertise an authority socket (removed in deny mode).
ENV_VARIABLES = (
    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS",
    "DOCKER_HOST", "CONTAINER_HOST", "CONTAINERD_ADDRESS",
)

# Fixed system paths, under /run and its historical alias /var/run.
_SYSTEM = (
    ("docker", "docker.sock"),
    ("podman", "podman/podman.sock"),
    ("containerd", "containerd/containerd.sock"),
    ("containerd", "containerd/containerd.sock.ttrpc"),
    ("containerd", "k3s/containerd/containerd.sock"),
    ("buildkit", "buildkit/buildkitd.sock"),
    ("cri", "crio/crio.sock"),
    ("cri", "cri-dockerd.sock"),
    ("cri", "dockershim.sock"),
    # Root services that trust the peer's uid (SO_PEERCRED): a root caller's sandbox
    # connects as uid 0 and can ask them to run anything on the host (systemd's
    # StartTransientUnit over the system bus or its private socket, udev rules,
    # snapd, libvirt and LXD/Incus guests).
    ("dbus-system", "dbus/system_bus_socket"),
    ("systemd", "systemd/private"),
    ("systemd", "systemd/io.systemd.ManagedOOM"),
    ("systemd", "systemd/userdb/io.systemd.DynamicUser"),
    ("udev", "udev/control"),
    ("snapd", "snapd.socket"),
    ("snapd", "snapd-snap.socket"),
    ("libvirt", "libvirt/libvirt-sock"),
    ("libvirt", "libvirt/virtqemud-sock"),
    ("lxd", "lxd/unix.socket"),
    ("incus", "incus/unix.socket"),
)
# Daemons that keep their API socket under /var/lib or /var/snap (LXD, Incus).
_STATE = (
    ("lxd", "/var/lib/lxd/unix.socket"),
    ("lxd", "/var/snap/lxd/common/lxd/unix.socket"),
    ("incus", "/var/lib/incus/unix.socket"),
)
# Relative to $XDG_RUNTIME_DIR (rootless daemons, the session bus, gpg-agent).
_RUNTIME = (
    ("docker", "docker.sock"),
    ("podman", "podman/podman.sock"),
    ("containerd", "containerd/containerd.sock"),
    ("dbus-session", "bus"),
)
_GPG_SOCKETS = ("S.gpg-agent", "S.gpg-agent.ssh", "S.gpg-agent.extra", "S.gpg-agent.browser")


@dataclass(frozen=True)
class AuthoritySocket:
    """One known authority socket: ``path`` as named, ``kind`` (docker, podman,
    containerd, buildkit, cri, ssh-agent, gpg-agent, dbus-session, dbus-system, systemd,
    udev, snapd, libvirt, lxd, incus) and ``source`` (``"well-known path"`` or the
    variable that named it)."""

    path: str
    kind: str
    source: str


def _unix_url(value: str) -> str | None:
    """The path of a ``unix://`` URL (DOCKER_HOST, CONTAINER_HOST)."""
    if value.startswith("unix://"):
        path = value[len("unix://"):]
        return path if path.startswith("/") else None
    return None


def _dbus_paths(address: str) -> list[str]:
    """``unix:path=`` entries of a D-Bus address list (abstract ones need no mask)."""
    paths = []
    for entry in address.split(";"):
        transport, _, params = entry.partition(":")
        if transport != "unix":
            continue
        for param in params.split(","):
            key, _, value = param.partition("=")
            if key == "path" and value.startswith("/"):
                paths.append(_dbus_unescape(value))
    return paths


def _dbus_unescape(value: str) -> str:
    out, i = bytearray(), 0
    raw = value.encode()
    while i < len(raw):
        if raw[i:i + 1] == b"%" and i + 3 <= len(raw):
            try:
                out.append(int(raw[i + 1:i + 3], 16))
                i += 3
                continue
            except ValueError:
                pass
        out.append(raw[i])
        i += 1
    return out.decode(errors="surrogateescape")


def candidates(environ: Mapping[str, str] | None = None, home: str | None = None) -> list[AuthoritySocket]:
    """Every path pysandbox knows for authority sockets, existing or not, in a stable order."""
    env = os.environ if environ is None else environ
    home = home if home is not None else env.get("HOME") or os.path.expanduser("~")
    found: list[AuthoritySocket] = []
    for root in ("/run", "/var/run"):
        for kind, rel in _SYSTEM:
            found.append(AuthoritySocket(f"{root}/{rel}", kind, "well-known path"))
    for kind, path in _STATE:
        found.append(AuthoritySocket(path, kind, "well-known path"))
    runtime = env.get("XDG_RUNTIME_DIR") or ""
    runtime_dirs = [runtime] if runtime.startswith("/") else []
    user_run = f"/run/user/{os.getuid()}"
    if user_run not in runtime_dirs:
        runtime_dirs.append(user_run)
    for rdir in runtime_dirs:
        source = "XDG_RUNTIME_DIR" if rdir == runtime else "well-known path"
        for kind, rel in _RUNTIME:
            found.append(AuthoritySocket(f"{rdir}/{rel}", kind, source))
        for name in _GPG_SOCKETS:
            found.append(AuthoritySocket(f"{rdir}/gnupg/{name}", "gpg-agent", source))
    gnupg = env.get("GNUPGHOME") or (f"{home}/.gnupg" if home and home.startswith("/") else "")
    if gnupg.startswith("/"):
        for name in _GPG_SOCKETS:
            found.append(AuthoritySocket(f"{gnupg}/{name}", "gpg-agent",
                                         "GNUPGHOME" if env.get("GNUPGHOME") else "well-known path"))
    info = env.get("GPG_AGENT_INFO", "")
    if info.startswith("/"):
        found.append(AuthoritySocket(info.split(":", 1)[0], "gpg-agent", "GPG_AGENT_INFO"))
    ssh = env.get("SSH_AUTH_SOCK", "")
    if ssh.startswith("/"):
        found.append(AuthoritySocket(ssh, "ssh-agent", "SSH_AUTH_SOCK"))
    for path in _dbus_paths(env.get("DBUS_SESSION_BUS_ADDRESS", "")):
        found.append(AuthoritySocket(path, "dbus-session", "DBUS_SESSION_BUS_ADDRESS"))
    for var, kind in (("DOCKER_HOST", "docker"), ("CONTAINER_HOST", "podman")):
        sock = _unix_url(env.get(var, ""))
        if sock:
            found.append(AuthoritySocket(sock, kind, var))
    addr = env.get("CONTAINERD_ADDRESS", "")
    if addr.startswith("/") or _unix_url(addr):
        found.append(AuthoritySocket(_unix_url(addr) or addr, "containerd", "CONTAINERD_ADDRESS"))
    return found


def present(environ: Mapping[str, str] | None = None, home: str | None = None) -> list[AuthoritySocket]:
    """The candidates that are Unix sockets right now, one entry per real path
    (``path`` is the resolved path, symlinks such as /var/run followed)."""
    seen: set = set()
    out = []
    checked: set = set()
    # /var/run is a symlink to /run almost everywhere: then each /var/run/NAME is the /run/NAME
    # checked before it (the same socket, and its entry came first), one realpath for ~20 stats.
    var_run = os.path.realpath("/var/run") == "/run"
    for sock in candidates(environ, home):
        if var_run and sock.path.startswith("/var/run/") and sock.path[4:] in checked:
            continue
        checked.add(sock.path)
        try:
            if not stat.S_ISSOCK(os.stat(sock.path).st_mode):   # most are missing: one system call
                continue
            real = os.path.realpath(sock.path)
            if real in seen or not stat.S_ISSOCK(os.stat(real).st_mode):
                continue
        except (OSError, ValueError):
            continue
        seen.add(real)
        out.append(AuthoritySocket(real, sock.kind, sock.source))
    return out


def delegated(writable_paths: Iterable[str], limit: int = 10000) -> tuple[list[str], bool]:
    """Unix sockets inside the writable binds: the command can connect to them, so
    whoever listens there delegates its authority to the command (not masked).

    Walks at most ``limit`` directory entries, without following symlinks or
    crossing into other file systems. Returns ``(socket paths, complete)``;
    ``complete`` is False when the walk stopped at the limit.
    """
    found: list[str] = []
    seen = 0
    for top in writable_paths:
        try:
            top_dev = os.lstat(top).st_dev
        except OSError:
            continue
        stack = [top]
        while stack:
            current = stack.pop()
            try:
                entries = os.scandir(current)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    seen += 1
                    if seen > limit:
                        return found, False
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISSOCK(st.st_mode):
                        found.append(entry.path)
                    elif stat.S_ISDIR(st.st_mode) and st.st_dev == top_dev:
                        stack.append(entry.path)
    return found, True


def coverage(policy) -> dict:
    """What the policy does about Unix-socket authority, for ``status`` and audits:
    ``masked`` (paths hidden), ``unset`` (variables removed), ``kept`` (the keep
    switch), ``scope`` (one honest sentence)."""
    known = set()
    for sock in candidates():
        known.add(sock.path)
        known.add(os.path.realpath(sock.path))
    masked = [op.path for op in policy.fs if isinstance(op, Hide) and op.path in known]
    unset = [name for name in ENV_VARIABLES if name in policy.env.unset]
    if masked or unset:
        scope = ("the well-known authority sockets (docker, podman, containerd, CRI, buildkit, ssh-agent, "
                 "gpg-agent, D-Bus session and system buses, systemd, udev, snapd, libvirt, LXD, Incus) that existed when the policy was built are masked and the "
                 "variables that advertise them removed; any other Unix socket visible in the sandbox's "
                 "file system, including every socket in a writable bind, stays reachable")
    else:
        scope = ("no Unix-socket authority is masked by this policy (Policy.default masks the well-known "
                 "sockets in network deny mode unless keep_authority_sockets=True); every Unix socket "
                 "visible in the sandbox's file system is reachable")
    return {
        "kept": bool(getattr(policy, "keep_authority_sockets", False)),
        "masked": masked,
        "unset": unset,
        "strict_unix": bool(getattr(policy, "strict_unix", False)),
        "scope": scope,
    }
