"""The pybwrap-vs-bwrap corpus: bwrap command lines, each run by pybwrap and by each
reference bwrap (tests/compat/harness.py: the system's 0.8 and the bundled 0.11).

``since``: the bwrap version whose behaviour pybwrap follows in this case (0.9:
idempotent ``--symlink`` and its messages; 0.11: the options 0.8 lacks; 0.12: setup
paths resolved inside the new root; 0.13: empty path arguments refused). A reference
older than that must behave differently (checked: the case really tells the versions
apart), and pybwrap is held to ``want``; a reference at least that new is compared
exactly.

``{t}`` is the run's private tree (harness.TREE). ``expect``: ``ok`` (the probe runs;
its view is compared), ``usage`` (usage text, exit 1), ``msg`` (the same ``bwrap: ``
message), ``setup`` (exit 1 with some ``bwrap: `` message: a setup failure whose
wording is the backend's). ``doc`` cases run pybwrap only and check ``want``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

R = ["--ro-bind", "/", "/"]
DATA = ("data", b"data from a descriptor\n")
ARGS_DATA = ("data", b"--ro-bind\0/\0/\0--setenv\0FROM_ARGS\0yes\0")
BPF = ("data", bytes.fromhex("0600000000007fff"))


@dataclass
class Case:
    name: str
    args: list
    expect: str = "ok"
    fds: dict = field(default_factory=dict)
    command: list | None = None      # None: the probe
    paths: list = field(default_factory=list)
    proc: str = "/proc"
    dashdash: bool = False
    only: str | None = None          # "root" / "nonroot"
    doc: bool = False                # also checked against ``want`` (documented behaviour), pybwrap alone
    want: dict = field(default_factory=dict)   # doc cases: rc, error (exact class or prefix), probe fields
    since: tuple | None = None       # the bwrap version whose behaviour pybwrap follows here (see above)

    @property
    def options(self) -> set:
        return {a for a in self.args if a.startswith("--")}

    @property
    def since_version(self) -> tuple | None:
        """``since``, else (0, 11) for a case using an option bwrap 0.8 lacks."""
        if self.since is not None:
            return self.since
        return (0, 11) if self.options & BWRAP_011_ONLY else None


CASES = [
    # ---- namespaces
    Case("ro-root", R),
    Case("unshare-all", ["--unshare-all"] + R + ["--proc", "/proc", "--dev", "/dev"]),
    Case("unshare-all-share-net", ["--unshare-all", "--share-net"] + R + ["--proc", "/proc"]),
    Case("unshare-user", ["--unshare-user"] + R),
    Case("unshare-user-try", ["--unshare-user-try"] + R),
    Case("unshare-ipc", ["--unshare-ipc"] + R),
    Case("unshare-pid-proc", ["--unshare-pid"] + R + ["--proc", "/proc"]),
    Case("unshare-net", ["--unshare-net"] + R),
    Case("unshare-uts-hostname", ["--unshare-uts", "--hostname", "sandbox-host"] + R),
    Case("unshare-cgroup", ["--unshare-cgroup"] + R),
    Case("unshare-cgroup-try", ["--unshare-cgroup-try"] + R),
    Case("uid-gid", ["--unshare-user", "--uid", "1234", "--gid", "4321"] + R),
    Case("uid-0-nonroot", ["--unshare-user", "--uid", "0", "--gid", "0"] + R, only="nonroot"),
    Case("disable-userns", ["--unshare-user", "--disable-userns"] + R),
    Case("assert-userns-disabled", ["--unshare-user", "--disable-userns", "--assert-userns-disabled"] + R),
    # ---- process
    Case("chdir", R + ["--chdir", "/usr"]),
    Case("chdir-twice-warns", R + ["--chdir", "/usr", "--chdir", "/"]),
    Case("new-session", R + ["--new-session"]),
    Case("die-with-parent", R + ["--die-with-parent"]),
    Case("as-pid-1", ["--unshare-pid", "--as-pid-1"] + R + ["--proc", "/proc"]),
    Case("env-edits", R + ["--setenv", "A", "1", "--unsetenv", "PSB_A", "--setenv", "B", "2", "--setenv", "A", "3"]),
    Case("clearenv", R + ["--setenv", "GONE", "x", "--clearenv", "--setenv", "KEPT", "y"]),
    Case("cap-add", R + ["--cap-add", "CAP_NET_RAW"]),
    Case("cap-drop", R + ["--cap-drop", "cap_net_raw"]),
    Case("cap-drop-all-add-one", R + ["--cap-drop", "ALL", "--cap-add", "CAP_CHOWN"]),
    Case("cap-add-userns", ["--unshare-user", "--uid", "5", "--cap-add", "CAP_SYS_ADMIN"] + R),
    # ---- filesystem
    Case("bind-rw", R + ["--bind", "{t}/rw", "/mnt"], paths=["/mnt"]),
    Case("bind-try-missing", R + ["--bind-try", "{t}/missing", "/mnt"], paths=["/mnt"]),
    Case("ro-bind-try-present", R + ["--ro-bind-try", "{t}/src", "/mnt"], paths=["/mnt"]),
    Case("dev-bind", R + ["--dev-bind", "/dev", "/dev"]),
    Case("dev-bind-try-missing", R + ["--dev-bind-try", "/nonexistent-dev", "/mnt"]),
    Case("bind-fd", R + ["--bind-fd", "60", "/mnt"], fds={60: ("dir", "src")}, paths=["/mnt"]),
    Case("ro-bind-fd", R + ["--ro-bind-fd", "60", "/mnt"], fds={60: ("dir", "src")}, paths=["/mnt"]),
    Case("remount-ro", R + ["--bind", "{t}/rw", "/mnt", "--remount-ro", "/mnt"], paths=["/mnt"]),
    Case("proc", ["--unshare-pid"] + R + ["--proc", "/proc"]),
    Case("dev", R + ["--dev", "/dev"]),
    Case("tmpfs", R + ["--tmpfs", "/tmp"]),
    Case("tmpfs-perms-size", R + ["--perms", "0700", "--size", "1048576", "--tmpfs", "/tmp"]),
    Case("tmpfs-size-hex", R + ["--size", "0x200000", "--tmpfs", "/tmp"]),
    Case("mqueue", ["--unshare-ipc"] + R + ["--dev", "/dev", "--mqueue", "/dev/mqueue"]),
    Case("dir-perms", R + ["--tmpfs", "/tmp", "--dir", "/tmp/a", "--perms", "0750", "--dir", "/tmp/b/c"],
         paths=["/tmp/b"]),
    Case("file", R + ["--tmpfs", "/tmp", "--file", "60", "/tmp/f", "--perms", "0640", "--file", "61", "/tmp/g"],
         fds={60: DATA, 61: DATA}),
    Case("bind-data", R + ["--tmpfs", "/tmp", "--bind-data", "60", "/tmp/bd"], fds={60: DATA}),
    Case("ro-bind-data", R + ["--tmpfs", "/tmp", "--perms", "0444", "--ro-bind-data", "60", "/tmp/rbd"],
         fds={60: DATA}),
    Case("symlink", R + ["--tmpfs", "/tmp", "--symlink", "/usr", "/tmp/l", "--symlink", "rel/x", "/tmp/m"]),
    Case("chmod", R + ["--tmpfs", "/tmp", "--dir", "/tmp/c", "--chmod", "0700", "/tmp/c"]),
    Case("order-shadow", R + ["--tmpfs", "/mnt", "--dir", "/mnt/x", "--bind", "{t}/src", "/mnt"], paths=["/mnt"]),
    Case("mountpoint-in-writable-bind", R + ["--bind", "{t}/rw", "/mnt", "--tmpfs", "/mnt/newdir"],
         paths=["/mnt"]),
    # ---- descriptors
    Case("seccomp", R + ["--seccomp", "60"], fds={60: BPF}),
    Case("add-seccomp-fd", R + ["--add-seccomp-fd", "60", "--add-seccomp-fd", "61"], fds={60: BPF, 61: BPF}),
    Case("info-fd", ["--unshare-pid", "--unshare-net"] + R + ["--info-fd", "61"], fds={61: ("out",)}),
    Case("json-status-fd", ["--unshare-ipc"] + R + ["--json-status-fd", "61"], fds={61: ("out",)}),
    Case("sync-fd", R + ["--sync-fd", "60"], fds={60: DATA}),
    Case("block-fd", R + ["--block-fd", "60"], fds={60: DATA}),
    Case("block-fd-after-info", R + ["--block-fd", "60", "--info-fd", "61", "--json-status-fd", "62"],
         fds={60: DATA, 61: ("out",), 62: ("out",)}),
    # Released at once with nobody writing the id maps: setup fails unmapped (EOVERFLOW)
    # in both; tests/compat/test_launch.py writes the maps as bwrap's demo does.
    Case("userns-block-fd-unmapped", ["--unshare-user", "--info-fd", "61", "--userns-block-fd", "60"] + R,
         fds={60: DATA, 61: ("out",)}, command=["true"], expect="setup"),
    Case("lock-file", R + ["--lock-file", "{t}/lock"]),
    Case("args-fd", ["--args", "60"], fds={60: ARGS_DATA}),
    Case("inherited-fd", R, fds={62: ("file", "file")}),
    # ---- parsing
    Case("dashdash", R, dashdash=True),
    Case("first-non-option", R + ["--setenv", "X", "y"], command=["sh", "-c", "echo $X --not-an-option"]),
    Case("help", ["--help"], command=["ignored"], expect="msg"),
    Case("version-after-options", R + ["--version"], command=["ignored"], expect="msg", doc=True, since=(0, 11),
         want={"rc": 0, "stdout_first_line": "bubblewrap 0.11.0"}),
    # ---- usage errors (same message, exit 1)
    Case("no-args", [], command=[], expect="usage"),
    Case("options-only", ["--unshare-user"], command=[], expect="usage"),
    Case("bind-one-arg", ["--bind", "/a"], command=[], expect="msg"),
    Case("unknown-option", ["--foo"], command=["true"], expect="msg"),
    Case("unknown-single-dash", ["-x"], command=["true"], expect="msg"),
    Case("invalid-uid", ["--uid", "x"], command=["true"], expect="msg"),
    Case("invalid-gid", ["--gid", "-1"], command=["true"], expect="msg"),
    Case("perms-bad", ["--perms", "999", "--dir", "/x"], command=["true"], expect="msg"),
    Case("perms-unconsumed", ["--perms", "0700", "--bind", "/", "/"], command=["true"], expect="msg"),
    Case("perms-twice", ["--perms", "0700", "--perms", "0600"], command=["true"], expect="msg"),
    Case("size-zero", ["--size", "0"], command=["true"], expect="msg"),
    Case("size-not-tmpfs", ["--size", "10", "--dir", "/x"], command=["true"], expect="msg"),
    Case("chmod-bad", ["--chmod", "9", "/x"], command=["true"], expect="msg"),
    Case("exec-label", ["--exec-label", "foo"], command=["true"], expect="msg"),
    Case("file-label", ["--file-label", "foo"], command=["true"], expect="msg"),
    Case("args-missing", ["--args"], command=[], expect="msg"),
    Case("args-invalid", ["--args", "x"], command=["true"], expect="msg"),
    Case("args-bad-fd", ["--args", "59"], command=["true"], expect="msg"),
    Case("args-nested", ["--args", "60"], fds={60: ("data", b"--args\x0061\x00")}, command=["true"], expect="msg"),
    Case("uid-without-userns", ["--uid", "5"] + R, command=["true"], expect="msg", only="root"),
    Case("hostname-without-uts", ["--hostname", "x"] + R, command=["true"], expect="msg"),
    Case("as-pid-1-without-pid", ["--as-pid-1"] + R, command=["true"], expect="msg"),
    Case("as-pid-1-lock-file", ["--unshare-pid", "--as-pid-1", "--lock-file", "/etc/passwd"] + R,
         command=["true"], expect="msg"),
    Case("userns-block-fd-without-userns", ["--userns-block-fd", "5"] + R, command=["true"], expect="msg"),
    Case("userns-block-fd-without-info", ["--unshare-user", "--userns-block-fd", "5"] + R, command=["true"],
         expect="msg"),
    Case("disable-userns-without-userns", ["--disable-userns"] + R, command=["true"], expect="msg"),
    Case("userns-with-unshare-user", ["--userns", "60", "--unshare-user"] + R, command=["true"], expect="msg"),
    Case("seccomp-and-add", ["--seccomp", "60", "--add-seccomp-fd", "61"], fds={60: BPF, 61: BPF},
         command=["true"], expect="msg"),
    Case("add-and-seccomp", ["--add-seccomp-fd", "60", "--seccomp", "61"], fds={60: BPF, 61: BPF},
         command=["true"], expect="msg"),
    Case("seccomp-bad-length", R + ["--add-seccomp-fd", "60"], fds={60: ("data", b"1234567")},
         command=["true"], expect="msg"),
    Case("cap-unknown", ["--cap-add", "FOO"] + R, command=["true"], expect="msg"),
    Case("cap-bare-name", ["--cap-add", "sys_admin"] + R, command=["true"], expect="msg"),
    # ---- setup failures (exit 1, some bwrap: message)
    Case("bind-source-missing", ["--bind", "/nonexistent-src", "/mnt"] + R, command=["true"], expect="msg"),
    Case("chdir-missing", R + ["--chdir", "/nonexistent-dir"], command=["true"], expect="msg"),
    Case("command-missing", R, command=["/nonexistent-cmd"], expect="msg"),
    Case("bind-fd-bad", R + ["--bind-fd", "59", "/mnt"], command=["true"], expect="msg"),
    Case("file-fd-bad", R + ["--tmpfs", "/tmp", "--file", "59", "/tmp/x"], command=["true"], expect="msg"),
    Case("seccomp-fd-bad", R + ["--seccomp", "59"], command=["true"], expect="msg"),
    Case("lock-file-missing", R + ["--lock-file", "/nonexistent-lock"], command=["true"], expect="setup"),
    Case("symlink-conflict", R + ["--symlink", "/x", "/usr"], command=["true"], expect="setup"),
    Case("remount-ro-missing", R + ["--remount-ro", "/nonexistent-mnt"], command=["true"], expect="setup"),
    Case("userns-not-a-ns", ["--userns", "60"] + R, fds={60: DATA}, command=["true"], expect="setup"),
    Case("pidns-not-a-ns", ["--pidns", "60"] + R, fds={60: DATA}, command=["true"], expect="setup"),
    Case("exit-status", R, command=["sh", "-c", "exit 7"]),
    Case("exit-signal", R, command=["sh", "-c", "kill -TERM $$"]),
    # ---- bubblewrap 0.11 only (bwrap 0.8 lacks them): its documented behaviour
    # bwrap 0.8 has --userns2, but on a descriptor that is not a user namespace its
    # monitor dies ("Setting userns2 failed") and leaves its child waiting for good,
    # holding the caller's stdout: checked against the message instead of the binary.
    Case("userns2-not-a-ns", ["--unshare-user", "--userns2", "60"] + R, fds={60: DATA}, command=["true"],
         doc=True, want={"rc": 1, "error": "bwrap: Setting userns2 failed: Invalid argument"}),
    Case("argv0", R + ["--argv0", "renamed"], doc=True, want={"rc": 0, "probe": {"argv0": "renamed"}}),
    Case("argv0-twice", ["--argv0", "a", "--argv0", "b"], command=["true"], doc=True,
         want={"rc": 1, "error": "bwrap: --argv0 used multiple times"}),
    Case("level-prefix", ["--level-prefix", "--foo"], command=["true"], doc=True,
         want={"rc": 1, "error": "<3>bwrap: Unknown option --foo"}),
    Case("level-prefix-warning", ["--level-prefix"] + R + ["--chdir", "/", "--chdir", "/"], command=["true"],
         doc=True, want={"rc": 0, "stderr": "<4>bwrap: Only the last --chdir option will take effect\n"}),
    Case("overlay-src-orphan", ["--overlay-src", "/usr", "--dir", "/x"], command=["true"], doc=True,
         want={"rc": 1, "error": "bwrap: --overlay-src must be followed by another --overlay-src or one of "
                                 "--overlay, --tmp-overlay, or --ro-overlay"}),
    Case("overlay-src-last", ["--overlay-src"], command=[], doc=True,
         want={"rc": 1, "error": "bwrap: --overlay-src must be followed by another --overlay-src or one of "
                                 "--overlay, --tmp-overlay, or --ro-overlay"}),
    Case("tmp-overlay-without-src", ["--tmp-overlay", "/x"], command=["true"], doc=True,
         want={"rc": 1, "error": "bwrap: --tmp-overlay requires at least one --overlay-src"}),
    Case("ro-overlay-one-src", ["--overlay-src", "/usr", "--ro-overlay", "/x"], command=["true"], doc=True,
         want={"rc": 1, "error": "bwrap: --ro-overlay requires at least two --overlay-src"}),
    Case("overlay-too-few", ["--overlay-src", "/usr", "--overlay", "/a", "/b"], command=[], doc=True,
         want={"rc": 1, "error": "bwrap: --overlay takes three arguments"}),
    Case("overlay-without-src", ["--overlay", "/a", "/b", "/c"], command=["true"], doc=True,
         want={"rc": 1, "error": "bwrap: --overlay requires at least one --overlay-src"}),
    # The overlay family, run natively (bwrap 0.11's setup_newroot: lowers given bottom
    # first, writes to the upper dir, to an invisible tmpfs, or refused).
    Case("tmp-overlay", R + ["--overlay-src", "{t}/src", "--tmp-overlay", "/mnt"],
         command=["sh", "-c", "cat /mnt/f1 && echo x > /mnt/new && cat /mnt/new && ls /mnt && ls {t}/src"],
         doc=True, want={"rc": 0, "stdout": "one\nx\nf1\nnew\nsub\nf1\nsub\n"}),
    Case("ro-overlay", R + ["--overlay-src", "{t}/src", "--overlay-src", "{t}/rw", "--ro-overlay", "/mnt"],
         command=["sh", "-c", "ls /mnt && ! (: > /mnt/x) 2>/dev/null"], doc=True,
         want={"rc": 0, "stdout": "existing\nf1\nsub\n"}),
    Case("overlay", R + ["--overlay-src", "{t}/src", "--overlay", "{t}/rw", "{t}/empty", "/mnt"],
         command=["sh", "-c", "cat /mnt/f1 && echo x > /mnt/new && ls {t}/rw && ls {t}/src"], doc=True,
         want={"rc": 0, "stdout": "one\nexisting\nnew\nf1\nsub\n"}),
    Case("overlay-overlap", R + ["--overlay-src", "{t}/src", "--overlay", "{t}/src", "{t}/empty", "/mnt"],
         command=["true"], doc=True,
         want={"rc": 1, "error_prefix": "bwrap: Can't make overlay mount on /newroot/mnt with options upperdir=",
               "error_suffix": ": Overlay directories may not overlap"}),
    # ---- bubblewrap 0.9+: --symlink is idempotent, and a conflict names what is there
    Case("symlink-same-twice", R + ["--tmpfs", "/tmp", "--symlink", "/usr", "/tmp/l", "--symlink", "/usr", "/tmp/l"],
         since=(0, 9), doc=True, want={"rc": 0}),
    Case("symlink-different", R + ["--tmpfs", "/tmp", "--symlink", "/x", "/tmp/l", "--symlink", "/y", "/tmp/l"],
         command=["true"], expect="msg", since=(0, 9), doc=True,
         want={"rc": 1, "error": "bwrap: Can't make symlink at /tmp/l: existing destination is /x"}),
    Case("symlink-onto-dir", R + ["--tmpfs", "/tmp", "--dir", "/tmp/d", "--symlink", "/x", "/tmp/d"],
         command=["true"], expect="msg", since=(0, 9), doc=True,
         want={"rc": 1, "error": "bwrap: Can't make symlink at /tmp/d: destination exists and is not a symlink"}),
    Case("symlink-onto-dev-link", R + ["--dev", "/dev", "--symlink", "/x", "/dev/stdin"],
         command=["true"], expect="msg", since=(0, 9), doc=True,
         want={"rc": 1, "error": "bwrap: Can't make symlink at /dev/stdin: existing destination is /proc/self/fd/0"}),
    # ---- bubblewrap 0.12 (GHSA-pxhw-h44j-8pfx): a symlink in a setup path resolves in the new root
    Case("setup-path-symlink-in-root",
         R + ["--tmpfs", "/mnt", "--dir", "/mnt/real", "--symlink", "/mnt/real", "/mnt/l", "--dir", "/mnt/l/made"],
         command=["ls", "/mnt/real"], since=(0, 12), doc=True, want={"rc": 0, "stdout": "made\n"}),
    # bwrap <= 0.11 follows the link to the old root and creates {t}/rw/escaped on the host
    Case("setup-path-symlink-no-escape",
         R + ["--tmpfs", "/mnt", "--symlink", "/oldroot{t}/rw", "/mnt/l", "--dir", "/mnt/l/escaped"],
         command=["true"], expect="setup", since=(0, 12), doc=True,
         want={"rc": 1, "error_prefix": "bwrap: Can't mkdir /mnt/l/escaped", "absent": ["{t}/rw/escaped"]}),
    # ---- empty path arguments refused (bwrap <= 0.11 resolves "" against its cwd: issue #715)
    Case("empty-bind-try", ["--bind-try", "", ""] + R, command=["true"], expect="msg", since=(0, 13), doc=True,
         want={"rc": 1, "error": "bwrap: Empty path argument to --bind-try is not allowed"}),
    Case("empty-bind-source", R + ["--bind", "", "/mnt"], command=["true"], expect="msg", since=(0, 13), doc=True,
         want={"rc": 1, "error": "bwrap: Empty path argument to --bind is not allowed"}),
    Case("empty-tmpfs", R + ["--tmpfs", ""], command=["true"], expect="msg", since=(0, 13), doc=True,
         want={"rc": 1, "error": "bwrap: Empty path argument to --tmpfs is not allowed"}),
]

BWRAP_011_ONLY = {"--argv0", "--level-prefix", "--overlay-src", "--overlay", "--tmp-overlay", "--ro-overlay"}
