"""The egress allow list: which ``host:port`` a sandbox's proxy may connect to.

A rule is a host name (exact, or ``*.`` for its subdomains, never the apex), or an IP
literal (``10.0.0.5``, ``[::1]``), with one port or, when none is given, 80 and 443.
Names are compared in their IDNA (ASCII) form, lowercase, without a trailing dot. An
IP literal matches only itself: a request for an address is allowed only when that
address is listed, and a name resolving to a special address (loopback, private, ...)
only when that address is listed (pysandbox/proxy/addresses.py).
Pure: no resolution, no I/O.
"""

from __future__ import annotations

import ipaddress
import re

from ..errors import PolicyError, Reason
from ..records import TYPE_CHECKING, dataclass

if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["DEFAULT_PORTS", "AllowList", "HostRule", "normalise_host", "parse_allow_host", "split_host_port"]

DEFAULT_PORTS = (80, 443)
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_NUMERIC = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)\Z")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class HostRule:
    """One allowed destination. ``host`` is the normalised name (without ``*.``) or the
    address's text; ``wildcard``: subdomains of ``host`` only; ``address``: the IP of a
    literal rule, else None; ``ports``: the ports it allows."""

    host: str
    ports: tuple
    wildcard: bool = False
    address: object = None

    def matches(self, host: str, port: int) -> bool:
        """Does this rule allow ``host`` (already normalised by :func:`normalise_host`)
        on ``port``?"""
        if port not in self.ports:
            return False
        if self.address is not None:
            return host == self.host
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        name = f"[{self.host}]" if ":" in self.host else self.host
        name = f"*.{name}" if self.wildcard else name
        if self.ports == DEFAULT_PORTS:
            return name
        return f"{name}:{self.ports[0]}"


def _fail(text, why: str) -> NoReturn:
    raise PolicyError(f"allowed host {text!r}: {why}", Reason.INVALID_VALUE, value=text, field="allow_hosts")


def _address(text: str) -> IPAddress | None:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    return addr


def normalise_name(name: str) -> str | None:
    """A host name's canonical form (IDNA ASCII, lowercase, no trailing dot), or None
    when it is not a valid DNS host name (labels of 1-63 letters, digits, ``-``, ``_``;
    253 characters at most; a last label that is not all digits or hex, which resolvers
    would read as an address)."""
    if not name or len(name) > 254:
        return None
    if name.endswith("."):
        name = name[:-1]
    if not name or name.startswith(".") or ".." in name:
        return None
    try:
        ascii_name = name.encode("idna").decode("ascii") if not name.isascii() else name
    except UnicodeError:
        return None
    ascii_name = ascii_name.lower()
    if len(ascii_name) > 253:
        return None
    labels = ascii_name.split(".")
    if not all(_LABEL.match(label) for label in labels):
        return None
    if _NUMERIC.match(labels[-1]):
        return None   # "127.1", "2130706433", "0x7f.1": an address in a resolver's eyes
    return ascii_name


def normalise_host(host: str) -> tuple[str, IPAddress | None] | None:
    """A requested host's canonical form and, for an IP literal (``[v6]`` brackets
    allowed), its address; None when it is neither a valid name nor an address."""
    if not isinstance(host, str) or not host:
        return None
    if host.startswith("[") and host.endswith("]"):
        addr = _address(host[1:-1])
        if not isinstance(addr, ipaddress.IPv6Address) or "%" in host:
            return None
        return str(addr), addr
    addr = _address(host) if "%" not in host else None
    if addr is not None:
        return str(addr), addr
    name = normalise_name(host)
    return None if name is None else (name, None)


def split_host_port(text: str) -> tuple[str, str | None]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address ->
    (host, port text or None). The brackets of an IPv6 host are kept."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return text, None
        rest = text[end + 1:]
        if rest.startswith(":"):
            return text[:end + 1], rest[1:]
        return text[:end + 1] + rest, None
    if text.count(":") > 1:
        return text, None   # a bare IPv6 address: no port without brackets
    host, sep, port = text.rpartition(":")
    return (host, port) if sep else (text, None)


def parse_port(text: str) -> int | None:
    """A port number 1-65535 written in plain decimal digits, else None."""
    if not text or not text.isascii() or not text.isdigit() or len(text) > 5:
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


def parse_allow_host(text: str) -> HostRule:
    """Parse one ``--allow-host`` value: ``pypi.org``, ``*.npmjs.org:443``,
    ``files.pythonhosted.org:8080``, ``10.0.0.5:443``, ``[::1]:8443``.

    Raises:
        PolicyError: (``invalid_value``) not a host name, wildcard or IP literal with an
            optional port 1-65535; URLs, paths, user names and other wildcards are refused.
    """
    if not isinstance(text, str):
        _fail(text, "not a string")
    if not text or text != text.strip() or any(c.isspace() or ord(c) < 32 for c in text):
        _fail(text, "empty or containing white space")
    if "://" in text or "/" in text or "@" in text or "?" in text or "#" in text:
        _fail(text, "give a host name or address with an optional :PORT, not a URL")
    host, port_text = split_host_port(text)
    ports: tuple[int, ...]
    if port_text is None:
        ports = DEFAULT_PORTS
    else:
        port = parse_port(port_text)
        if port is None:
            _fail(text, f"port {port_text!r} is not a number from 1 to 65535")
        ports = (port,)
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if "*" in host:
        _fail(text, "a wildcard is allowed only as the whole first label ('*.example.org')")
    norm = normalise_host(host)
    if norm is None:
        if host.startswith("[") or host.count(":") > 1:
            _fail(text, "not a valid IPv6 address (zone ids are not allowed)")
        _fail(text, "not a valid host name or IP address")
    name, addr = norm
    if addr is not None:
        if wildcard:
            _fail(text, "a wildcard cannot apply to an IP address")
        return HostRule(host=name, ports=ports, address=addr)
    return HostRule(host=name, ports=ports, wildcard=wildcard)


class AllowList:
    """The rules of one proxy, in order. ``match`` answers the first rule that allows a
    ``host:port``; a host that is not a valid name or address matches nothing."""

    __slots__ = ("rules",)

    def __init__(self, rules=()):
        rules = tuple(rules)
        for rule in rules:
            if not isinstance(rule, HostRule):
                raise PolicyError(f"not a HostRule: {rule!r}", Reason.INVALID_VALUE, value=rule,
                                  field="allow_hosts")
        self.rules = rules

    @classmethod
    def from_strings(cls, texts) -> "AllowList":
        """Raises:
            PolicyError: (``invalid_value``) for the first text that is not a valid rule,
                or when ``texts`` is a single string instead of a sequence of them."""
        if isinstance(texts, (str, bytes)):
            raise PolicyError("allowed hosts must be a sequence of strings, not one string",
                              Reason.INVALID_VALUE, value=texts, field="allow_hosts")
        return cls(parse_allow_host(text) for text in texts)

    def match(self, host: str, port: int) -> HostRule | None:
        norm = normalise_host(host)
        if norm is None or not isinstance(port, int):
            return None
        return next((rule for rule in self.rules if rule.matches(norm[0], port)), None)

    def lists_address(self, address, port: int) -> bool:
        """Is ``address`` (an ``ipaddress`` object) listed as an IP literal for ``port``?"""
        text = str(address)
        return any(r.address is not None and r.matches(text, port) for r in self.rules)

    def __iter__(self):
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __repr__(self) -> str:
        return f"AllowList({[str(r) for r in self.rules]!r})"
