"""The pure parts of a session's proxy credentials (pysandbox/proxy/tenants.py,
pysandbox/proxy/httphead.py): the narrowing check, the Basic credential, revocation's
bookkeeping. The engine with tenants: tests/integration/test_proxy_tenants.py."""

from __future__ import annotations

import base64

import pytest

from pysandbox.errors import PolicyError, Reason
from pysandbox.proxy.httphead import basic_credential, reply
from pysandbox.proxy.rules import AllowList
from pysandbox.proxy.tenants import Tenants, narrowed

SESSION = AllowList.from_strings(["pypi.org", "*.example.org", "files.test:8080", "10.0.0.5:443", "[::1]:8443"])


@pytest.mark.parametrize("hosts", [
    [], ["pypi.org"], ["pypi.org:443"], ["a.example.org"], ["*.b.example.org:80"], ["*.example.org"],
    ["files.test:8080"], ["10.0.0.5:443"], ["[::1]:8443"], ["PyPI.org."],
])
def test_narrower_lists_are_accepted(hosts):
    assert len(narrowed(SESSION, hosts)) == len(hosts)


@pytest.mark.parametrize("hosts", [
    ["other.org"], ["pypi.org:8080"], ["example.org"], ["*.org"], ["files.test"], ["10.0.0.5"],
    ["10.0.0.6:443"], ["[::2]:8443"], ["pypi.org", "evil.test"], ["*.pypi.org"],
])
def test_wider_lists_are_refused(hosts):
    with pytest.raises(PolicyError) as err:
        narrowed(SESSION, hosts)
    assert err.value.reason == Reason.ALLOW_LIST_WIDENED and err.value.field == "allow_hosts"


def test_invalid_entries_stay_invalid_value():
    for bad in (["http://pypi.org"], "pypi.org"):
        with pytest.raises(PolicyError) as err:
            narrowed(SESSION, bad)
        assert err.value.reason == Reason.INVALID_VALUE


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def test_basic_credential():
    assert basic_credential([("Proxy-Authorization", _basic("c1:pw:x"))]) == ("c1", "pw:x")
    assert basic_credential([("proxy-authorization", "basic " + _basic("u:p")[6:])]) == ("u", "p")
    for headers in ([], [("Authorization", _basic("u:p"))], [("Proxy-Authorization", "Basic !!!")],
                    [("Proxy-Authorization", _basic("nocolon"))], [("Proxy-Authorization", "Bearer abc")]):
        assert basic_credential(headers) is None, headers


def test_407_names_the_scheme():
    head = reply(407, "no").split(b"\r\n\r\n")[0].decode()
    assert head.startswith("HTTP/1.1 407 Proxy Authentication Required")
    assert 'Proxy-Authenticate: Basic realm="pysandbox"' in head.split("\r\n")


class _Task:
    def __init__(self):
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class _Loop:
    def __init__(self):
        self.calls = []

    def call_soon_threadsafe(self, fn):
        self.calls.append(fn)


def test_credentials_are_live_until_revoked_and_never_another_commands():
    tenants = Tenants()
    tenants.loop = loop = _Loop()
    a, b = tenants.issue(SESSION), tenants.issue(SESSION)
    assert a.user != b.user and a.password != b.password and len(a.password) >= 32
    t1, other = _Task(), _Task()
    assert tenants.admit(a.user, a.password, t1) is a
    assert tenants.admit(b.user, b.password, other) is b         # control: each its own
    for user, password in ((a.user, b.password), (b.user, a.password), ("c99", a.password), (a.user, "")):
        assert tenants.admit(user, password, _Task()) is None
    a.revoke()
    assert tenants.admit(a.user, a.password, _Task()) is None    # revoked
    assert tenants.admit(b.user, b.password, _Task()) is b       # control: B's still live
    assert not a.drain(0)                                        # t1 still counted ...
    for call in loop.calls:
        call()
    assert t1.cancelled and not other.cancelled                  # ... cancelled on the loop ...
    tenants.release(a, t1)
    assert a.drain(0)                                            # ... and once it ended, drained
