"""Network proxy mode end to end, on both backends: real clients inside the sandbox
(curl, Python's urllib, ``pip download`` from a tiny PEP 503 index, ``git clone`` over
HTTPS) reach test servers in a network namespace the test makes
(tests/support/proxylab.py) through the sandbox's proxy; names go through the test's
resolver hook (``_proxy_resolver``), never real DNS; TLS is checked against the test's
own CA. A refused name beside each allowed one is the live control of the allow list,
and direct traffic to the same server fails.

As an unprivileged user the lab cannot be made in the host's namespace: the whole file
runs again in a user and network namespace of its own
(``test_unprivileged_in_a_user_namespace``)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import zipfile

import pytest

import pysandbox
from tests.support import need, not_applicable, python_in_sandbox
from tests.support.proxylab import USERNS_ENV, netlab

pytestmark = pytest.mark.requires("userns")
UNPRIVILEGED = os.geteuid() != 0 and os.environ.get(USERNS_ENV) != "1"


def _wheel(directory, name="tinypkg", version="1.0") -> str:
    """A pure-Python wheel of one module, ``tinypkg.py``; returns its file name."""
    fname = f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": b"VALUE = 42\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(directory / fname, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return fname


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if UNPRIVILEGED:
        not_applicable("unprivileged: test_unprivileged_in_a_user_namespace runs these in a namespace of their own")
    with netlab(tmp_path_factory.mktemp("proxylab")) as made:
        root = made.root
        # a PEP 503 simple index with one project
        (root / "packages").mkdir()
        whl = _wheel(root / "packages")
        digest = hashlib.sha256((root / "packages" / whl).read_bytes()).hexdigest()
        (root / "simple" / "tinypkg").mkdir(parents=True)
        (root / "simple" / "index.html").write_text('<html><body><a href="tinypkg/">tinypkg</a></body></html>\n')
        (root / "simple" / "tinypkg" / "index.html").write_text(
            f'<html><body><a href="../../packages/{whl}#sha256={digest}">{whl}</a></body></html>\n')
        # a git repository served over the dumb HTTP protocol
        if shutil.which("git") is not None:
            src = root.parent / "src"
            src.mkdir()
            env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                   "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root.parent)}
            (src / "hello.txt").write_text("hello through the proxy\n")
            for cmd in (["git", "init", "-q", "-b", "main", str(src)], ["git", "-C", str(src), "add", "hello.txt"],
                        ["git", "-C", str(src), "commit", "-q", "-m", "one"],
                        ["git", "clone", "-q", "--bare", str(src), str(root / "repo.git")],
                        ["git", "-C", str(root / "repo.git"), "update-server-info"]):
                subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=60)
        yield made


def _policy(tmp_path, lab, hosts=("pypi.test", "files.test")):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return pysandbox.Policy.default(workdir=work, network="proxy", allow_hosts=(*hosts, *lab.listed),
                                    env=pysandbox.Env(set={"HOME": str(work)}))


def _ca(tmp_path, lab) -> str:
    """The test CA where the sandbox sees it (the lab's is under the host's /tmp, which
    the sandbox's private /tmp hides)."""
    (tmp_path / "work").mkdir(exist_ok=True)
    path = tmp_path / "work" / "ca.pem"
    shutil.copyfile(lab.ca, path)
    return str(path)


def _run(backend, tmp_path, lab, argv, env=None):
    # A clean environment: the host's REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, PIP_* ... would
    # replace the test CA; the sandbox adds the proxy variables.
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", **(env or {})}
    return pysandbox.run(argv, policy=_policy(tmp_path, lab), backend=backend, capture_output=True, text=True,
                         timeout=300, _proxy_resolver=lab.resolver(), cwd=str(tmp_path / "work"), env=env)


def test_curl_through_the_sandbox_proxy(backend, tmp_path, lab):
    if shutil.which("curl") is None:
        need("curl", "curl missing")
    script = ("curl -sS -m 30 http://pypi.test/echo/a; curl -sS -m 30 --cacert \"$CA\" https://pypi.test/echo/b; "
              "curl -sS -m 30 -o /dev/null -w '%{http_code}\\n' http://other.test/echo/c; "
              "curl -sS -m 30 --noproxy '*' http://pypi.test/echo/direct || echo direct-failed")
    done = _run(backend, tmp_path, lab, ["sh", "-c", script], env={"CA": _ca(tmp_path, lab)})
    assert done.stdout.splitlines() == ["upstream http host=pypi.test path=/echo/a",
                                        "upstream https host=pypi.test path=/echo/b",
                                        "403", "direct-failed"], done.stdout + done.stderr
    # sorted: a tunnel's event is recorded when the tunnel ends, which under load may be
    # after the next connection's refusal (seen on a loaded machine)
    assert sorted((e.host, e.verdict) for e in done.proxy.events) == [
        ("other.test", "refused"), ("pypi.test", "allowed"), ("pypi.test", "allowed")]
    assert done.proxy.counts == {"allowed": 2, "refused": 1}


def test_urllib_through_the_sandbox_proxy(backend, tmp_path, lab):
    script = r'''
import ssl, sys, urllib.error, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[1])
for url in ("http://files.test/echo/u", "https://pypi.test/echo/v", "http://other.test/echo/w"):
    try:
        with urllib.request.urlopen(url, timeout=30, context=ctx if url.startswith("https") else None) as r:
            print(r.read().decode().strip())
    except urllib.error.HTTPError as exc:
        print(exc.code)
'''
    done = _run(backend, tmp_path, lab, [python_in_sandbox(), "-I", "-c", script, _ca(tmp_path, lab)])
    assert done.stdout.splitlines() == ["upstream http host=files.test path=/echo/u",
                                        "upstream https host=pypi.test path=/echo/v", "403"], done.stderr


def test_pip_download_from_a_test_index(backend, tmp_path, lab):
    dest = tmp_path / "work" / "dl"
    argv = [python_in_sandbox(), "-m", "pip", "download", "--isolated", "--no-cache-dir", "--no-deps",
            "--disable-pip-version-check", "--cert", _ca(tmp_path, lab), "--index-url", "https://pypi.test/simple/",
            "--dest", str(dest), "tinypkg==1.0"]
    done = _run(backend, tmp_path, lab, argv)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(os.listdir(dest)) == ["tinypkg-1.0-py3-none-any.whl"]
    assert {e.host for e in done.proxy.events} == {"pypi.test"} and done.proxy.counts["refused"] == 0
    # control: the same download from a name not on the list fails, refused by the proxy
    argv[argv.index("https://pypi.test/simple/")] = "https://other.test/simple/"
    argv[-1] = "tinypkg==1.0"
    shutil.rmtree(dest)
    refused = _run(backend, tmp_path, lab, argv + ["--retries", "0", "--timeout", "20"])
    assert refused.returncode != 0 and not dest.exists() or not os.listdir(dest)
    assert refused.proxy.counts["allowed"] == 0 and refused.proxy.counts["refused"] >= 1


def test_git_clone_over_https(backend, tmp_path, lab):
    if shutil.which("git") is None:
        need("git", "git missing")
    clone = tmp_path / "work" / "clone"
    env = {"GIT_SSL_CAINFO": _ca(tmp_path, lab), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
    done = _run(backend, tmp_path, lab, ["git", "clone", "-q", "https://files.test/repo.git", str(clone)], env=env)
    assert done.returncode == 0, done.stderr
    assert (clone / "hello.txt").read_text() == "hello through the proxy\n"
    assert {e.host for e in done.proxy.events} == {"files.test"}
    control = _run(backend, tmp_path, lab, ["git", "clone", "-q", "https://other.test/repo.git",
                                            str(tmp_path / "work" / "no")], env=env)
    assert control.returncode != 0 and not (tmp_path / "work" / "no" / "hello.txt").exists()
    assert control.proxy.counts == {"allowed": 0, "refused": 1}


def test_direct_traffic_to_the_lab_fails(backend, tmp_path, lab):
    script = r'''
import socket, sys
try:
    socket.create_connection((sys.argv[1], 80), timeout=5)
    print("tcp-connected")
except OSError as exc:
    print("tcp-failed")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", (sys.argv[1], 53))
    print("udp-sent")
except OSError:
    print("udp-failed")
'''
    done = _run(backend, tmp_path, lab, [python_in_sandbox(), "-I", "-c", script, lab.server])
    assert done.stdout.split() == ["tcp-failed", "udp-failed"], done.stdout + done.stderr
    # control: from the host (the test's namespace) the server answers
    import socket
    with socket.create_connection((lab.server, 80), timeout=10):
        pass


# ---------------------------------------------------------------- unprivileged

def test_unprivileged_in_a_user_namespace():
    if not UNPRIVILEGED:
        not_applicable("root (or already in the user namespace) runs the tests above directly")
    from tests.support.proxylab import in_user_namespace
    done = in_user_namespace(__file__, "-k", "not test_unprivileged_in_a_user_namespace", timeout=1200)
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " failed" not in done.stdout and " skipped" not in done.stdout, tail
