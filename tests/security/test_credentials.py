"""Credential stores (pysandbox/credentials.py): the default policy hides the well-known
ones of the caller, and for a root caller the host's password hashes, against a real
read from inside; each refusal has its control beside it (the opt-out reads the same
file, a file outside the list in the same home stays readable).

The stores live in a fake home the test makes under /var/tmp (the default policy shows
/var/tmp read-only; the sandbox's /tmp is its own) and sets as ``$HOME`` for the launcher.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import pysandbox
from pysandbox import credentials
from tests.security import oracles
from tests.support import not_applicable

pytestmark = pytest.mark.requires("userns")

# A secret per store the fake home holds (relative path -> content).
SECRETS = {
    ".ssh/id_ed25519": "SECRET-ssh-key",
    ".aws/credentials": "SECRET-aws",
    ".netrc": "SECRET-netrc",
    ".docker/config.json": "SECRET-docker",
}
PUBLIC = "notes.txt"   # in the same home, not a credential store

READ_SCRIPT = oracles.PRELUDE + r'''
import hashlib
for path in sys.argv[1:]:
    step("open")
    def read(path=path):
        with open(path, "rb") as f:
            data = f.read()
        # a secret of the host's is compared by its digest: never printed
        return data.decode() if path.startswith(os.environ.get("FAKE_HOME", "\0")) else \
            hashlib.sha256(data).hexdigest()
    attempt(path, read)
    step("listdir")
    attempt(path + ":parent", lambda path=path: sorted(os.listdir(os.path.dirname(path))))
step("write")
work = os.getcwd()
attempt("write", lambda: open(os.path.join(work, "made-inside"), "w").write("x"))
done()
'''


@pytest.fixture
def fake_home(monkeypatch):
    """A home directory with four credential stores and one ordinary file, as $HOME; the
    variables that move stores elsewhere are unset so only this home's count."""
    home = tempfile.mkdtemp(prefix="psb-cred-home-", dir="/var/tmp")
    os.chmod(home, 0o755)
    for rel, secret in SECRETS.items():
        os.makedirs(os.path.dirname(os.path.join(home, rel)), exist_ok=True)
        with open(os.path.join(home, rel), "w") as f:
            f.write(secret)
    with open(os.path.join(home, ".ssh", "known_hosts"), "w") as f:
        f.write("known-host-line")
    with open(os.path.join(home, PUBLIC), "w") as f:
        f.write("PUBLIC-notes")
    os.mkdir(os.path.join(home, "proj"))
    monkeypatch.setenv("HOME", home)
    monkeypatch.setenv("FAKE_HOME", home)
    for var, _kind, _name in credentials.ENV_STORES:
        monkeypatch.delenv(var, raising=False)
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "SUDO_USER"):
        monkeypatch.delenv(var, raising=False)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _read(policy, backend, paths):
    return oracles.run_probe(READ_SCRIPT, policy, backend, paths)


@pytest.mark.parametrize("hide", [True, False])
def test_fake_home_stores_hidden_by_default_read_with_the_opt_out(backend, fake_home, hide):
    work = os.path.join(fake_home, "proj")
    policy = pysandbox.Policy.default(workdir=work, hide_credentials=hide)
    paths = [os.path.join(fake_home, rel) for rel in SECRETS] + [os.path.join(fake_home, PUBLIC)]
    res = _read(policy, backend, paths)
    for rel, secret in SECRETS.items():
        got = res[os.path.join(fake_home, rel)]
        if hide:
            assert got["ok"] is False and got["syscall"] == "open", (rel, got)
        else:   # control: the same read, the opt-out
            assert got == {"ok": True, "errno": 0, "value": secret}, rel
    if hide:   # a directory store is an empty, unlistable node; its secret is nowhere in the output
        for rel in (".ssh/id_ed25519", ".aws/credentials", ".docker/config.json"):
            assert res[os.path.join(fake_home, rel) + ":parent"]["ok"] is False, rel
        assert not any(s in res["_stderr"] or s in str(res) for s in SECRETS.values())
    # control: a file outside the list, in the same home, stays readable
    assert res[os.path.join(fake_home, PUBLIC)]["value"] == "PUBLIC-notes"
    # the workdir inside the fake home stays visible and writable
    assert res["write"]["ok"], res["write"]
    assert os.path.exists(os.path.join(work, "made-inside"))
    cov = credentials.coverage(policy)
    stores = {os.path.join(fake_home, rel) for rel in (".ssh", ".aws", ".netrc", ".docker")}
    if hide:
        assert stores <= set(cov["hidden"]) and not stores & set(cov["readable"])
    else:
        assert stores <= set(cov["readable"]) and not stores & set(cov["hidden"])
    assert pysandbox.status(policy, backend=backend).credentials == cov


@pytest.mark.parametrize("opt_out", [False, True])
def test_cli_run_cat_of_the_ssh_key(backend, fake_home, opt_out):
    """``pysandbox run -- cat ~/.ssh/id_ed25519`` with the caller's $HOME (issue 25 item 5)."""
    key = os.path.join(fake_home, ".ssh", "id_ed25519")
    flags = ["--no-hide-credentials"] if opt_out else []
    done = subprocess.run([sys.executable, "-m", "pysandbox", "run", "--backend", backend, *flags, "--",
                           "cat", key], cwd=os.path.join(fake_home, "proj"), capture_output=True, text=True,
                          timeout=120)
    if opt_out:   # control
        assert done.returncode == 0 and done.stdout == SECRETS[".ssh/id_ed25519"], done.stderr
    else:
        assert done.returncode == 1 and "Permission denied" in done.stderr, (done.returncode, done.stderr)
        assert SECRETS[".ssh/id_ed25519"] not in done.stdout + done.stderr


def test_named_paths_inside_stores_stay_visible_and_the_rest_hidden(backend, fake_home):
    """A bind inside a store shows just that path (its siblings are hidden); a workdir
    inside a store stays writable; a store inside a named rw path stays hidden."""
    known = os.path.join(fake_home, ".ssh", "known_hosts")
    work = os.path.join(fake_home, ".aws", "work")
    os.mkdir(work)
    config = os.path.join(fake_home, ".config")
    os.makedirs(os.path.join(config, "gh"))
    with open(os.path.join(config, "gh", "hosts.yml"), "w") as f:
        f.write("SECRET-gh")
    with open(os.path.join(config, "app.toml"), "w") as f:
        f.write("app-config")
    policy = pysandbox.Policy.default(workdir=work, ro=[known], rw=[config])
    paths = [known, os.path.join(fake_home, ".ssh", "id_ed25519"), os.path.join(fake_home, ".aws", "credentials"),
             os.path.join(config, "gh", "hosts.yml"), os.path.join(config, "app.toml")]
    res = _read(policy, backend, paths)
    assert res[known]["value"] == "known-host-line"
    assert res[os.path.join(config, "app.toml")]["value"] == "app-config"     # control: the rw bind
    for hidden in paths[1:4]:
        assert res[hidden]["ok"] is False, (hidden, res[hidden])
    assert res["write"]["ok"] and os.path.exists(os.path.join(work, "made-inside"))
    # control: the same reads with the opt-out
    res = _read(pysandbox.Policy.default(workdir=work, ro=[known], rw=[config], hide_credentials=False),
                backend, paths)
    assert res[paths[1]]["value"] == SECRETS[".ssh/id_ed25519"] and res[paths[3]]["value"] == "SECRET-gh"


def test_a_named_store_is_shown(backend, fake_home):
    netrc = os.path.join(fake_home, ".netrc")
    res = _read(pysandbox.Policy.default(workdir=os.path.join(fake_home, "proj"), ro=[netrc]), backend,
                [netrc, os.path.join(fake_home, ".aws", "credentials")])
    assert res[netrc]["value"] == SECRETS[".netrc"]
    assert res[os.path.join(fake_home, ".aws", "credentials")]["ok"] is False


def test_a_symlinked_store_is_hidden_where_it_points(backend, fake_home):
    real = os.path.join(fake_home, "dotfiles", "kube")
    os.makedirs(real)
    with open(os.path.join(real, "config"), "w") as f:
        f.write("SECRET-kube")
    os.symlink(real, os.path.join(fake_home, ".kube"))
    paths = [os.path.join(fake_home, ".kube", "config"), os.path.join(real, "config")]
    res = _read(pysandbox.Policy.default(workdir=os.path.join(fake_home, "proj")), backend, paths)
    assert all(res[p]["ok"] is False for p in paths), res
    res = _read(pysandbox.Policy.default(workdir=os.path.join(fake_home, "proj"), hide_credentials=False),
                backend, paths)
    assert all(res[p]["value"] == "SECRET-kube" for p in paths), res   # control


def test_a_store_that_changes_kind_after_the_policy_is_built_is_still_hidden(backend, fake_home):
    """A directory store replaced by a file, a file store by a directory, after the
    policy was built and launched once (its plan compiled and cached for the old kinds):
    the next launch hides them or fails closed; the new content is never read."""
    policy = pysandbox.Policy.default(workdir=os.path.join(fake_home, "proj"))
    aws, netrc = os.path.join(fake_home, ".aws"), os.path.join(fake_home, ".netrc")
    assert _read(policy, backend, [netrc])[netrc]["ok"] is False
    shutil.rmtree(aws)
    with open(aws, "w") as f:
        f.write("SECRET-swapped-file")
    os.remove(netrc)
    os.mkdir(netrc)
    with open(os.path.join(netrc, "inner"), "w") as f:
        f.write("SECRET-swapped-dir")
    try:
        res = _read(policy, backend, [aws, os.path.join(netrc, "inner")])
    except pysandbox.SandboxError as exc:
        print(f"failed closed: {exc.reason}")
        res = None
    if res is not None:
        assert res[aws]["ok"] is False and res[os.path.join(netrc, "inner")]["ok"] is False, res
        assert "SECRET-swapped" not in str(res)
    # control: the opt-out reads both
    res = _read(pysandbox.Policy.default(workdir=os.path.join(fake_home, "proj"), hide_credentials=False),
                backend, [aws, os.path.join(netrc, "inner")])
    assert res[aws]["value"] == "SECRET-swapped-file" and res[os.path.join(netrc, "inner")]["value"] == \
        "SECRET-swapped-dir"


def test_a_store_made_after_the_policy_is_readable(backend, fake_home):
    """A documented boundary, not a pass: only stores that exist when the policy is
    built are hidden (as authority sockets)."""
    policy = pysandbox.Policy.default(workdir=os.path.join(fake_home, "proj"))
    late = os.path.join(fake_home, ".pypirc")
    with open(late, "w") as f:
        f.write("SECRET-late")
    assert _read(policy, backend, [late])[late]["value"] == "SECRET-late"
    assert late in {s.path for s in credentials.present()}
    assert _read(pysandbox.Policy.default(workdir=os.path.join(fake_home, "proj")), backend,
                 [late])[late]["ok"] is False   # built again: hidden


@pytest.mark.parametrize("hide", [True, False])
def test_root_caller_cannot_read_etc_shadow(backend, tmp_path, hide):
    if os.geteuid() != 0:
        # unprivileged: the host's hashes are not the caller's to read, inside or out
        assert "/etc/shadow" not in {s.path for s in credentials.candidates()}
        with pytest.raises(PermissionError):
            open("/etc/shadow", "rb")
        not_applicable("/etc/shadow is hidden for a root caller only")
    work = tmp_path / "w"
    work.mkdir()
    with open("/etc/shadow", "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    res = _read(pysandbox.Policy.default(workdir=work, hide_credentials=hide), backend,
                ["/etc/shadow", "/etc/gshadow"])
    if hide:
        assert res["/etc/shadow"]["ok"] is False and res["/etc/shadow"]["errno"] in (13, 1), res["/etc/shadow"]
        if os.path.exists("/etc/gshadow"):
            assert res["/etc/gshadow"]["ok"] is False
    else:   # control: uid 0 in the sandbox is the host's root, and reads them
        assert res["/etc/shadow"]["value"] == digest


def test_status_reports_the_hidden_stores_and_the_opt_out(fake_home):
    """``pysandbox status`` (text and --json) with the caller's $HOME: what is hidden, what
    stays readable, and how to opt out; --no-hide-credentials shows the stores readable."""
    stores = {os.path.join(fake_home, rel) for rel in (".ssh", ".aws", ".netrc", ".docker")}

    def status(*flags):
        done = subprocess.run([sys.executable, "-m", "pysandbox", "status", *flags], capture_output=True,
                              text=True, timeout=120, cwd=fake_home)
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
        return done.stdout

    import json
    cov = json.loads(status("--json"))["credentials"]
    assert stores <= set(cov["hidden"]) and not stores & set(cov["readable"])
    assert "--no-hide-credentials" in cov["opt_out"]
    off = json.loads(status("--json", "--no-hide-credentials"))["credentials"]
    assert stores <= set(off["readable"]) and not stores & set(off["hidden"])
    text = status()
    line = next(ln for ln in text.splitlines() if ln.startswith("credentials: hidden "))
    assert all(s in line for s in stores), line
    assert "  opt out: --no-hide-credentials" in text


# ---------------------------------------------------------------- secrets in the environment

ENV_SECRETS = {"PSB_TEST_API_KEY": "SECRET-api-key", "PSB_TEST_TOKEN": "SECRET-token",
               "PSB_TEST_DB_URL": "postgres://app:SECRET-db@db.test/x"}
ENV_PLAIN = {"PSB_TEST_PLAIN": "PUBLIC-plain"}


def _env_inside(backend, policy, **kwargs) -> str:
    done = pysandbox.run(["env"], policy=policy, backend=backend, capture_output=True, timeout=120, **kwargs)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


@pytest.mark.parametrize("hide", [True, False])
def test_secret_variables_do_not_reach_the_command_by_default(backend, tmp_path, monkeypatch, hide):
    """A key in the caller's environment (the agent's own OPENAI_API_KEY, GITHUB_TOKEN,
    a DATABASE_URL with its password) is not in the command's: inherited, or passed
    whole as ``env=``. Controls: the opt-out passes them; a plain variable passes."""
    for name, value in {**ENV_SECRETS, **ENV_PLAIN}.items():
        monkeypatch.setenv(name, value)
    policy = pysandbox.Policy.default(workdir=str(tmp_path), hide_credentials=hide)
    for kwargs in ({}, {"env": dict(os.environ)}):
        seen = _env_inside(backend, policy, **kwargs)
        assert "PSB_TEST_PLAIN=PUBLIC-plain" in seen   # control: the environment did reach it
        for name, value in ENV_SECRETS.items():
            if hide:
                assert name not in seen and value not in seen, (kwargs, name)
            else:   # control: the opt-out
                assert f"{name}={value}" in seen, (kwargs, name)


def test_a_secret_variable_the_caller_names_reaches_the_command(backend, tmp_path, monkeypatch):
    for name, value in ENV_SECRETS.items():
        monkeypatch.setenv(name, value)
    policy = pysandbox.Policy.default(workdir=str(tmp_path),
                                      env=pysandbox.Env(set={"PSB_TEST_TOKEN": "mine"}))
    seen = _env_inside(backend, policy)
    assert "PSB_TEST_TOKEN=mine" in seen and "SECRET-api-key" not in seen


@pytest.mark.parametrize("opt_out", [False, True])
def test_cli_run_env_leaves_out_the_callers_keys(backend, tmp_path, opt_out):
    env = {**os.environ, **ENV_SECRETS, **ENV_PLAIN}
    flags = ["--no-hide-credentials"] if opt_out else []
    done = subprocess.run([sys.executable, "-m", "pysandbox", "run", "--backend", backend, *flags, "--", "env"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "PSB_TEST_PLAIN=PUBLIC-plain" in done.stdout, done.stderr
    assert all((f"{n}={v}" in done.stdout) == opt_out for n, v in ENV_SECRETS.items()), done.stdout
