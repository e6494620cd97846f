"""Network proxy mode in sessions, pools and asyncio sessions end to end, on both
backends: curl inside the sandbox, with the credential its proxy variables carry, reaches
the test servers in a network namespace the test makes (tests/support/proxylab.py),
listed by address, over HTTP, a TLS tunnel and SOCKS5; beside each allowed request a
refused one (the lab's other address, not listed) is the live control of the allow
list, direct traffic fails, and a command's narrower list refuses what the session's
allows. Each result holds exactly its command's events.

As an unprivileged user the lab cannot be made in the host's namespace: the whole file
runs again in a user and network namespace of its own
(``test_unprivileged_in_a_user_namespace``)."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

import pysandbox
from pysandbox import aio
from tests.support import need, not_applicable
from tests.support.proxylab import USERNS_ENV, netlab

pytestmark = pytest.mark.requires("userns")
UNPRIVILEGED = os.geteuid() != 0 and os.environ.get(USERNS_ENV) != "1"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if UNPRIVILEGED:
        not_applicable("unprivileged: test_unprivileged_in_a_user_namespace runs these in a namespace of their own")
    if shutil.which("curl") is None:
        need("curl", "curl missing")
    with netlab(tmp_path_factory.mktemp("proxylab")) as made:
        yield made


def _script(lab) -> str:
    # -k on the TLS tunnel: an IP literal is listed, and the lab's certificate names only
    # its names (a listed literal may be reached with any server name)
    code = "-o /dev/null -w '%{http_code}\\n'"
    return "; ".join([
        f"curl -sS -m 30 http://{lab.server}/echo/a",
        f"curl -sS -m 30 -k https://{lab.server}:443/echo/b",
        f"curl -sS -m 30 -x \"$ALL_PROXY\" http://{lab.server}:8080/echo/c",
        f"curl -sS -m 30 {code} http://{lab.host_side}:80/echo/d",
        f"curl -sS -m 30 --noproxy '*' http://{lab.server}/echo/e 2>/dev/null || echo direct-failed",
        f"curl -sS -m 30 -k -o /dev/null -w '%{{http_connect}} %{{http_code}}\\n' https://{lab.server}:8443/echo/f "
        "2>/dev/null; true",
    ])


EXPECTED = [f"upstream {scheme} host={{server}}{port} path=/echo/{p}" for scheme, port, p in
            (("http", "", "a"), ("https", "", "b"), ("http", ":8080", "c"))]


def _policy(tmp_path, lab):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return pysandbox.Policy.default(workdir=work, network="proxy", allow_hosts=lab.listed,
                                    env=pysandbox.Env(set={"HOME": str(work)}))


def _check(done, lab, narrowed: bool):
    out = done.stdout.decode() if isinstance(done.stdout, bytes) else done.stdout
    lines = out.splitlines()
    expected = [e.format(server=lab.server) for e in EXPECTED]
    assert lines[:3] == expected, out
    assert lines[3:] == ["403", "direct-failed", "403 000" if narrowed else "200 200"], out
    events = sorted((e.port, e.verdict, e.reason) for e in done.proxy.events)
    assert events == sorted([(80, "allowed", "ok"), (443, "allowed", "ok"), (8080, "allowed", "ok"),
                             (80, "refused", "ip_literal_not_listed"),
                             (8443, "refused", "ip_literal_not_listed") if narrowed else (8443, "allowed", "ok")])


def _env() -> dict:
    return {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}


def test_a_session_through_its_proxy(backend, tmp_path, lab):
    narrow = [f"{lab.server}:{p}" for p in (80, 443, 8080)]
    with pysandbox.Sandbox(_policy(tmp_path, lab), backend=backend) as sb:
        wide = sb.run(["sh", "-c", _script(lab)], capture_output=True, text=True, timeout=300, env=_env())
        narrowed = sb.run(["sh", "-c", _script(lab)], capture_output=True, text=True, timeout=300, env=_env(),
                          allow_hosts=narrow)
        unattributed = sb.proxy.counts
    _check(wide, lab, narrowed=False)
    _check(narrowed, lab, narrowed=True)
    assert unattributed == {"allowed": 0, "refused": 0}


def test_a_pool_through_its_proxies(backend, tmp_path, lab):
    with pysandbox.Pool(_policy(tmp_path, lab), size=1, backend=backend) as pool:
        runs = [pool.run(["sh", "-c", _script(lab)], capture_output=True, text=True, timeout=300, env=_env())
                for _ in range(2)]
    for done in runs:
        _check(done, lab, narrowed=False)


def test_an_asyncio_session_through_its_proxy(backend, tmp_path, lab):
    async def main():
        async with aio.Sandbox(_policy(tmp_path, lab), backend=backend) as sb:
            return await sb.run(["sh", "-c", _script(lab)], capture_output=True, timeout=300, env=_env(),
                                allow_hosts=[f"{lab.server}:{p}" for p in (80, 443, 8080)])
    _check(asyncio.run(main()), lab, narrowed=True)


def test_unprivileged_in_a_user_namespace():
    if not UNPRIVILEGED:
        not_applicable("privileged: the tests above ran in the host's namespace")
    from tests.support.proxylab import in_user_namespace
    done = in_user_namespace(__file__, "-k", "not test_unprivileged_in_a_user_namespace", timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-4000:]
