"""Which upstream addresses the proxy connects to without their being listed.

An address is *special* when it is not a public unicast address of the Internet:
``ipaddress``'s ``is_global`` is false (loopback, RFC 1918 and fc00::/7 private,
link-local, CGNAT 100.64/10, unspecified, reserved, benchmarking, documentation,
Teredo, ...), or it is multicast, or in one of the extra ranges below; an address
embedding an IPv4 one (IPv4-mapped, IPv4-compatible, IPv4-translated, 6to4, NAT64) is
special exactly when the embedded address is. The proxy refuses a name that resolves to a
special address unless that very address is listed (``AllowList.lists_address``): a
name on the allow list cannot be pointed at the host's loopback, the LAN or a cloud
metadata service (SSRF, DNS rebinding).
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_special", "parse_address"]

# IANA's special-purpose ranges, spelt out: ``is_global``'s tables differ between Python
# patch releases (3.11.2 and 3.11.7 disagree on 6to4), and this must not.
_V4_SPECIAL = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/4",        # multicast: is_global is true for it in Python 3.11
    "240.0.0.0/4",        # reserved, and the limited broadcast
))
_V6_SPECIAL = tuple(ipaddress.IPv6Network(n) for n in (
    "::/96",              # unspecified, loopback, IPv4-compatible (deprecated)
    "100::/64",           # discard-only
    "2001::/23",          # IETF protocol assignments: Teredo, ORCHID, benchmarking, ...
    "2001:db8::/32", "3fff::/20",   # documentation
    "5f00::/16",          # SRv6 SIDs
    "64:ff9b:1::/48",     # local-use NAT64 (RFC 8215)
    "fc00::/7",           # unique local
    "fe80::/10",          # link-local
    "fec0::/10",          # site-local (deprecated)
    "ff00::/8",           # multicast
))
_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_V4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_address(text: str):
    """An ``ipaddress`` object for a resolver's answer, or None when it is not one
    (a scope id ``%eth0`` is dropped: the address alone decides)."""
    try:
        return ipaddress.ip_address(str(text).split("%", 1)[0])
    except ValueError:
        return None


def _embedded_v4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr in _V4_MAPPED or addr in _V4_TRANSLATED or addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr.sixtofour is not None:
        return addr.sixtofour
    return None


def is_special(addr) -> bool:
    """True when ``addr`` (an ``ipaddress`` address) must be listed to be connected to."""
    if isinstance(addr, ipaddress.IPv4Address):
        return any(addr in net for net in _V4_SPECIAL) or not addr.is_global
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded_v4(addr)
        if inner is not None:
            return is_special(inner)   # IPv4-mapped/-translated, 6to4, NAT64: as the IPv4 address
        return any(addr in net for net in _V6_SPECIAL) or not addr.is_global
    return True
