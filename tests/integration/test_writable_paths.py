"""``pysandbox run`` end to end, on every backend: what one command leaves in a writable
path cannot widen the next command's policy (README "Writable paths",
pysandbox/writable.py), and no writable path is too broad. Each attack is run for real,
with its live control: the opt-in, a directory below, a plain file outside."""

from __future__ import annotations

import os

from tests.integration.test_cli import cli



def test_a_symlink_planted_by_one_command_does_not_widen_the_next(backend, tmp_path):
    """Command 1 plants ``cache -> ../secrets`` in its workdir; the caller then runs
    command 2 with ``--rw $WORKDIR/cache`` (added by name, as agents and CI do): that
    would bind ../secrets read-write. Refused (``symlink_in_path``) unless the caller opts
    in with ``--follow-writable-symlinks``, which binds the target (the control)."""
    wd, secrets = tmp_path / "wd", tmp_path / "secrets"
    wd.mkdir()
    secrets.mkdir()
    done = cli(backend, "--", "sh", "-c", "ln -s ../secrets cache", cwd=wd)
    assert done.returncode == 0 and os.readlink(wd / "cache") == "../secrets", done.stderr
    attack = ["--rw", str(wd / "cache"), "--", "sh", "-c", "echo pwned > cache/pwned"]
    done = cli(backend, *attack, cwd=wd)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "symlink_in_path" in done.stderr and "--rw" in done.stderr and "Traceback" not in done.stderr
    assert not (secrets / "pwned").exists()
    # control: the caller's opt-in follows the link; what it led to is bound read-write
    done = cli(backend, "--follow-writable-symlinks", *attack, cwd=wd)
    assert done.returncode == 0, done.stderr
    assert (secrets / "pwned").read_text() == "pwned\n"


def test_too_broad_writable_paths_are_refused(backend, tmp_path):
    """``--rw /`` wrote /etc on the host as root; ``--rw ~``, ``--rw /home``, ``--rw /usr``
    too. Refused (``writable_path_too_broad``, exit 2, nothing run) unless
    ``--allow-broad-writable``; a directory below stays allowed. The live controls use a
    home of the test's own ($HOME), never a host tree."""
    home = tmp_path / "users" / "me"
    (home / "proj").mkdir(parents=True)
    (tmp_path / "wd").mkdir()
    env = {**os.environ, "HOME": str(home)}
    marker = tmp_path / "ran"
    for path in ("/", "/etc", "/usr", "/var", str(home), str(home.parent)):
        done = cli(backend, "--rw", path, "--", "sh", "-c", f": > {marker}", cwd=tmp_path / "wd", env=env)
        assert done.returncode == 2, (path, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "writable_path_too_broad" in done.stderr, done.stderr
        assert not marker.exists()
    done = cli(backend, "--workdir", str(home), "--", "true", cwd=tmp_path / "wd", env=env)
    assert done.returncode == 2 and "writable_path_too_broad" in done.stderr and "--workdir" in done.stderr
    # controls: the opt-in writes the home; a project below it needs none
    done = cli(backend, "--allow-broad-writable", "--rw", str(home), "--", "sh", "-c", f"echo x > {home}/w",
               cwd=tmp_path / "wd", env=env)
    assert done.returncode == 0 and (home / "w").read_text() == "x\n", done.stderr
    done = cli(backend, "--rw", str(home / "proj"), "--", "sh", "-c", f"echo y > {home}/proj/w",
               cwd=tmp_path / "wd", env=env)
    assert done.returncode == 0 and (home / "proj" / "w").read_text() == "y\n", done.stderr


def test_a_profile_named_through_the_workdir_is_refused(backend, tmp_path):
    """``--profile ./sandbox.toml``, a symlink in the workdir to the caller's profile
    outside: a command re-points it (done for real below), and the next identical command
    line would load another profile. Refused whatever the link points to; the control
    names the plain file outside the writable paths."""
    outside, wd = tmp_path / "outside", tmp_path / "wd"
    outside.mkdir()
    wd.mkdir()
    (outside / "good.toml").write_text('network = "deny"\n')
    (outside / "evil.toml").write_text('network = "allow"\n')
    os.symlink(outside / "good.toml", wd / "sandbox.toml")
    refusal = ["--profile", "./sandbox.toml", "--", "true"]
    done = cli(backend, *refusal, cwd=wd)
    assert done.returncode == 2 and "conflicting_options" in done.stderr and "named through" in done.stderr, \
        done.stderr
    # control: the plain file outside runs; its command can re-point the link (the attack)
    done = cli(backend, "--profile", str(outside / "good.toml"), "--", "sh", "-c",
               f"ln -sfn {outside / 'evil.toml'} sandbox.toml", cwd=wd)
    assert done.returncode == 0, done.stderr
    assert os.readlink(wd / "sandbox.toml") == str(outside / "evil.toml")
    done = cli(backend, *refusal, cwd=wd)
    assert done.returncode == 2 and "named through" in done.stderr, done.stderr
