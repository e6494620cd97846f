"""Which upstream addresses the proxy connects to without their being listed.

An address is *special* when it is not a public unicast address of the Internet:
``ipaddress``'s ``is_global`` is false (loopback, RFC 1918 and fc00::/7 private,
link-local, CGNAT 100.64/10, unspecified, reserved, benchmarking, documentation,
Teredo, ...), or it is multicast, or in one of the extra ranges below; an address
embedding an IPv4 one (IPv4-mapped, IPv4-compatible, IPv4-translated, 6to4, NAT64) is
special when the embedded address is. The proxy refuses a name that resolves to a
special address unless that very address is listed (``AllowList.lists_address``): a
name on the allow list cannot be pointed at the host's loopback, the LAN or a cloud
metadata service (SSRF, DNS rebinding).
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_special", "parse_address"]

_V4_EXTRA = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8",          # "this network"
    "192.0.0.0/24",       # IETF protocol assignments (only parts are in is_private)
    "192.88.99.0/24",     # 6to4 relay anycast (deprecated)
    "224.0.0.0/4",        # multicast: is_global is true for it in Python 3.11
    "240.0.0.0/4",        # reserved, and the limited broadcast
))
_V6_EXTRA = tuple(ipaddress.IPv6Network(n) for n in (
    "::/96",              # IPv4-compatible (deprecated) and the unspecified address
    "64:ff9b:1::/48",     # local-use NAT64 (RFC 8215)
    "fec0::/10",          # site-local (deprecated)
    "ff00::/8",           # multicast
    "100::/64",           # discard-only
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
        return (not addr.is_global) or addr.is_multicast or any(addr in net for net in _V4_EXTRA)
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded_v4(addr)
        if inner is not None and is_special(inner):
            return True
        if addr.is_multicast or addr.is_site_local or any(addr in net for net in _V6_EXTRA):
            return True
        if inner is not None and (addr in _V4_MAPPED or addr in _V4_TRANSLATED):
            return False    # a public IPv4 address in IPv6 clothing; is_private says otherwise
        return not addr.is_global
    return True
