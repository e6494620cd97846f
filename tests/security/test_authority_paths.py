"""authority.candidates / present / delegated: which paths and variables are covered
(no sandbox, no privileges)."""

from __future__ import annotations

import os
import socket

import pysandbox
from pysandbox import authority


def _paths(env, home="/home/u"):
    return {(s.path, s.kind, s.source) for s in authority.candidates(env, home=home)}


def test_system_paths_under_run_and_var_run():
    got = {p for p, _, _ in _paths({})}
    for root in ("/run", "/var/run"):
        for rel in ("docker.sock", "podman/podman.sock", "containerd/containerd.sock", "crio/crio.sock",
                    "cri-dockerd.sock"):
            assert f"{root}/{rel}" in got


def test_variables_name_their_sockets():
    env = {
        "SSH_AUTH_SOCK": "/s/agent",
        "DOCKER_HOST": "unix:///s/docker.sock",
        "CONTAINER_HOST": "unix:///s/podman.sock",
        "CONTAINERD_ADDRESS": "/s/containerd.sock",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/s/with%20space,guid=1;unix:abstract=/x;tcp:host=h,port=1",
        "XDG_RUNTIME_DIR": "/xdg",
        "GNUPGHOME": "/g",
        "GPG_AGENT_INFO": "/s/gpg:123:1",
    }
    got = _paths(env)
    for item in [("/s/agent", "ssh-agent", "SSH_AUTH_SOCK"), ("/s/docker.sock", "docker", "DOCKER_HOST"),
                 ("/s/podman.sock", "podman", "CONTAINER_HOST"),
                 ("/s/containerd.sock", "containerd", "CONTAINERD_ADDRESS"),
                 ("/s/with space", "dbus-session", "DBUS_SESSION_BUS_ADDRESS"),
                 ("/xdg/bus", "dbus-session", "XDG_RUNTIME_DIR"), ("/xdg/docker.sock", "docker", "XDG_RUNTIME_DIR"),
                 ("/xdg/gnupg/S.gpg-agent", "gpg-agent", "XDG_RUNTIME_DIR"),
                 ("/g/S.gpg-agent.ssh", "gpg-agent", "GNUPGHOME"), ("/s/gpg", "gpg-agent", "GPG_AGENT_INFO")]:
        assert item in got, item
    # abstract D-Bus addresses need no mask (per network namespace); tcp is not a path
    assert not any(p in ("/x", "h") for p, _, _ in got)


def test_tcp_docker_host_and_relative_paths_are_not_paths():
    got = {p for p, _, _ in _paths({"DOCKER_HOST": "tcp://127.0.0.1:2375", "SSH_AUTH_SOCK": "relative"})}
    assert not any("2375" in p or p == "relative" for p in got)


def test_home_gnupg_is_the_default():
    assert ("/home/u/.gnupg/S.gpg-agent", "gpg-agent", "well-known path") in _paths({})


def test_present_resolves_symlinks_and_dedupes(tmp_path):
    real = tmp_path / "real.sock"
    link = tmp_path / "link.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(real))
        link.symlink_to(real)
        found = authority.present({"SSH_AUTH_SOCK": str(link), "DOCKER_HOST": f"unix://{real}"}, home="/nonexistent")
    mine = [f for f in found if f.path.startswith(str(tmp_path))]
    assert [f.path for f in mine] == [str(real)]


def test_delegated_finds_sockets_bounded(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as s1, socket.socket(socket.AF_UNIX) as s2:
        s1.bind(str(tmp_path / "a" / "b" / "deep.sock"))
        s2.bind(str(tmp_path / "top.sock"))
        found, complete = authority.delegated([str(tmp_path)])
        assert complete and sorted(found) == sorted([str(tmp_path / "a" / "b" / "deep.sock"), str(tmp_path / "top.sock")])
        _, complete = authority.delegated([str(tmp_path)], limit=1)
        assert complete is False


def test_default_policy_unsets_variables_only_in_deny_mode(monkeypatch):
    monkeypatch.setenv("SSH_AUTH_SOCK", "/nonexistent/agent")
    deny = pysandbox.Policy.default()
    allow = pysandbox.Policy.default(network="allow")
    kept = pysandbox.Policy.default(keep_authority_sockets=True)
    assert set(authority.ENV_VARIABLES) <= set(deny.env.unset)
    assert not set(authority.ENV_VARIABLES) & set(allow.env.unset)
    assert not set(authority.ENV_VARIABLES) & set(kept.env.unset)
    assert deny.env.apply(os.environ).get("SSH_AUTH_SOCK") is None
    # an explicit caller setting still wins over the unset
    explicit = pysandbox.Policy.default(env=pysandbox.Env(set={"SSH_AUTH_SOCK": "/mine"}))
    assert explicit.env.apply(os.environ)["SSH_AUTH_SOCK"] == "/mine"


def test_root_services_that_trust_the_peer_uid_are_candidates():
    # A root caller's sandbox connects as uid 0: these services would run anything for it.
    got = {(p, k) for p, k, _ in _paths({})}
    for root in ("/run", "/var/run"):
        for rel, kind in (("dbus/system_bus_socket", "dbus-system"), ("systemd/private", "systemd"),
                          ("udev/control", "udev"), ("snapd.socket", "snapd"),
                          ("libvirt/libvirt-sock", "libvirt")):
            assert (f"{root}/{rel}", kind) in got
    assert ("/var/snap/lxd/common/lxd/unix.socket", "lxd") in got
    assert ("/var/lib/incus/unix.socket", "incus") in got


def _present_without_skip(environ, home):
    """authority.present's list computed the plain way (before issue 28's /var/run
    shortcut): each candidate that is a socket, by its real path, first entry per path."""
    import stat

    def is_socket(path):
        try:
            return stat.S_ISSOCK(os.stat(path).st_mode)
        except (OSError, ValueError):
            return False
    first: dict = {}
    for sock in authority.candidates(environ, home):
        real = os.path.realpath(sock.path) if is_socket(sock.path) else None
        if real is not None and real not in first:
            first[real] = authority.AuthoritySocket(real, sock.kind, sock.source)
    return list(first.values())


def test_var_run_shortcut_finds_what_stating_each_finds(tmp_path):
    """Each /var/run/NAME skipped as /run/NAME's twin: the same sockets, kinds and sources
    as stating every candidate (this host's own sockets, and the test's through variables,
    one of them named under /var/run when /var/run is /run's symlink)."""
    sock_path = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    try:
        env = {"SSH_AUTH_SOCK": str(sock_path), "DOCKER_HOST": "unix:///var/run/docker.sock"}
        got = authority.present(env, home="/nonexistent")
        assert got == _present_without_skip(env, "/nonexistent")
        assert str(sock_path) in {s.path for s in got}   # control: the harness sees a socket
    finally:
        server.close()
