"""Upstream hosts for the proxy tests: test servers in a network namespace the test
makes, a certificate authority the test makes, and a resolver hook naming them.

``netlab(tmp_path)`` (a context manager; root, or root of a user namespace the test
made: see ``in_user_namespace``) starts ``python -m tests.support.upstream`` under
``unshare --net`` (a fresh network namespace holding only its ``lo``), joins it to the
current namespace by a veth pair with addresses of an unused 10.x.y.0/30 (``.1`` here,
``.2`` there), and yields a :class:`Lab`: HTTP on ports 80 and 8080, HTTPS on 443 and
8443 with a certificate for :data:`NAMES` signed by the test's own CA (``lab.ca``).
Ending it closes the server's stdin, kills it by its pid (its namespace and the veth
pair go with it) and deletes the host end if still there.

``lab.resolver(extra)`` is the proxy's resolver hook: every name of :data:`NAMES` ->
the server's address, ``loopback.test`` -> 127.0.0.1, ``v6.test`` -> the server's IPv6
address (``lab.server6``, a unique-local fdXX:: one; None where the host has no IPv6),
plus ``extra``; any other name
fails to resolve (never real DNS). The server's address is private, so a proxy test
lists it (``lab.listed``) to allow the names that resolve to it, exactly as a user
lists a private address.

``make_ca(dir, names)`` writes ``ca.pem`` and a server ``cert.pem``/``key.pem`` for
``names`` with ``cryptography`` (the test extras).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support import need

NAMES = ("pypi.test", "files.test", "other.test", "www.example.test", "sub.wild.test")
V6_NAME = "v6.test"       # resolves to the server's IPv6 address only (where the host has IPv6)
LOOPBACK_NAME = "loopback.test"
USERNS_ENV = "PYSANDBOX_PROXYLAB_USERNS"
REPO = Path(__file__).resolve().parents[2]


def make_ca(directory: Path, names=NAMES) -> dict:
    """A CA and a server certificate for ``names`` (and the lab's addresses are not in
    it); returns the paths ``ca``, ``cert``, ``key``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pysandbox proxy test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"ca": directory / "ca.pem", "cert": directory / "cert.pem", "key": directory / "key.pem"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    for path in paths.values():
        path.chmod(0o644)
    return paths


class Lab:
    """A running lab: ``server`` (its address text), ``host_side`` (ours), ``ca``
    (the CA's PEM path), ``root`` (the directory the servers serve files from: put a
    package index or a git tree there), ``pid`` (the server process, holding the
    namespace), ``veth`` (our end), ``names``, ``http_ports``, ``https_ports``."""

    def __init__(self, server, host_side, ca, root, pid, veth, names=NAMES, server6=None):
        self.server, self.host_side, self.ca, self.root, self.pid, self.veth = server, host_side, ca, root, pid, veth
        self.names, self.server6 = names, server6
        self.http_ports, self.https_ports = (80, 8080), (443, 8443)

    @property
    def listed(self) -> tuple:
        """The allow-list entries that allow the server's address on the lab's ports."""
        return tuple(f"{self.server}:{p}" for p in (*self.http_ports, *self.https_ports))

    @property
    def listed6(self) -> tuple:
        """The same for the server's IPv6 address (empty without IPv6)."""
        if self.server6 is None:
            return ()
        return tuple(f"[{self.server6}]:{p}" for p in (*self.http_ports, *self.https_ports))

    def resolver(self, extra: dict | None = None):
        table = {name: [self.server] for name in self.names}
        table[LOOPBACK_NAME] = ["127.0.0.1"]
        if self.server6 is not None:
            table[V6_NAME] = [self.server6]
        table.update(extra or {})

        def resolve(host: str, port: int) -> list[str]:
            if host not in table:
                raise OSError(f"test resolver: no such name {host!r}")
            return list(table[host])
        return resolve


def _ip(*args: str, pid: int | None = None) -> None:
    cmd = ["ip", *args] if pid is None else ["nsenter", "-t", str(pid), "-n", "ip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/30 with no address or route of this namespace in it."""
    used = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    used += subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    nets = []
    for word in used.split():
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(word, strict=False))
    rng = random.Random()
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rng.randrange(64, 250)}.{rng.randrange(0, 256)}.{rng.randrange(0, 64) * 4}/30")
        if not any(net.overlaps(other) for other in nets if other.version == 4 and other.prefixlen > 0):
            return net
    raise RuntimeError("no free 10.x.y.0/30 here")


def can_make_lab() -> str | None:
    """None when this process can make a lab, else why not."""
    if os.geteuid() != 0:
        return "the proxy lab needs root (or root of a user namespace: see in_user_namespace)"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} missing (iproute2, util-linux)"
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return "cryptography missing (pip install -e '.[test]')"
    return None


@contextlib.contextmanager
def netlab(directory: Path, names=NAMES):
    """See the module's docstring; ``names``: the names the server's certificate holds
    and ``lab.resolver`` maps to the server."""
    why = can_make_lab()
    if why is not None:
        need("proxylab", why)
    if os.environ.get(USERNS_ENV) == "1":
        _ip("link", "set", "lo", "up")          # our own namespace's lo (unshare -n leaves it down)
    tls = make_ca(directory / "tls", (*names, V6_NAME))
    root = directory / "www"
    root.mkdir(parents=True, exist_ok=True)
    net = _free_subnet()
    host_side, server = (str(a) for a in list(net.hosts())[:2])
    tag = f"{random.getrandbits(32):08x}"
    veth, peer = f"psbp{tag}a", f"psbp{tag}b"
    cmd = ["unshare", "--net", "--", sys.executable, "-m", "tests.support.upstream",
           "--http", "80", "--http", "8080", "--https", "443", "--https", "8443",
           "--cert", str(tls["cert"]), "--key", str(tls["key"]), "--root", str(root)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        line = proc.stdout.readline()    # bounded: the server prints "ready" or exits
        if line.strip() != b"ready":
            proc.kill()
            raise RuntimeError(f"upstream server did not start: {proc.stderr.read().decode()[-2000:]}")
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer, "netns", str(proc.pid))
        _ip("addr", "add", f"{host_side}/30", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("link", "set", "lo", "up", pid=proc.pid)
        _ip("addr", "add", f"{server}/30", "dev", peer, pid=proc.pid)
        _ip("link", "set", peer, "up", pid=proc.pid)
        server6 = None
        if os.path.exists("/proc/net/if_inet6"):
            # a unique-local /64 from the same random bits; nodad: usable at once
            prefix = f"fd{tag[:2]}:{tag[2:6]}:{tag[6:8]}00::"
            _ip("-6", "addr", "add", f"{prefix}1/64", "dev", veth, "nodad")
            _ip("-6", "addr", "add", f"{prefix}2/64", "dev", peer, "nodad", pid=proc.pid)
            server6 = str(ipaddress.ip_address(f"{prefix}2"))     # the canonical spelling
        _wait_reachable(server)
        if server6 is not None:
            _wait_reachable(server6)
        yield Lab(server, host_side, str(tls["ca"]), root, proc.pid, veth, tuple(names), server6)
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        if subprocess.run(["ip", "link", "show", veth], capture_output=True).returncode == 0:
            subprocess.run(["ip", "link", "del", veth], capture_output=True)


def _wait_reachable(server: str) -> None:
    import socket
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection((server, 80), timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def in_user_namespace(test_file: str, *pytest_args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``test_file``'s tests again in a user and network namespace of our own
    (``unshare -Urn``: an unprivileged caller is root there, so the lab can be made),
    with :data:`USERNS_ENV` set; the completed pytest run."""
    tool = shutil.which("unshare")
    if tool is None:
        need("userns", "util-linux unshare(1) missing")
    probe = subprocess.run([tool, "-Urn", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        need("userns", f"unshare -Urn failed: {probe.stderr.strip()}")
    cmd = [tool, "-Urn", "--", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           test_file, *pytest_args]
    env = {**os.environ, USERNS_ENV: "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
