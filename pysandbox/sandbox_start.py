"""What every one-shot launch does before and around its backend's spawn, shared by
:class:`pysandbox.process.SandboxProcess` (a :class:`subprocess.Popen`) and
:class:`pysandbox.direct.DirectProcess` (the command lines' launch, which imports no
``subprocess``: issue 28): the plan, compiled once per policy (:func:`compiled`) and
started where asked (:func:`with_start_directory`, :func:`caller_directory`); the
backend's choice, the environment, the proxy and the denial observer
(:meth:`SandboxStart._set_up`); the spawn with its limits and the deferred native check
(:meth:`SandboxStart._start_child`); and what is known once the command was reaped
(``limit``, ``denials``, :meth:`SandboxStart._finish`, also when the constructor fails
after :meth:`SandboxStart._set_up`).
"""

from __future__ import annotations

import _thread
import os
import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)

from . import plan as _plan
from . import view as _view
from .checks import check_path
from .records import TYPE_CHECKING, replace
from .backends import after_failed_launch, select_backend
from .backends.base import Launch
from .enforcement import LimitedChild, prepare
from .environment import EnvCache
from .policy import Policy, check_fd
from .errors import PolicyError, Reason

if TYPE_CHECKING:   # typing is not imported by a launch
    from typing import Any

# A timeout or kill ends the sandbox with SIGKILL on its outermost process; the
# pid namespace takes every descendant with it.

_plan_cache: dict = {}
_plan_by_id: dict = {}
_plan_lock = _thread.allocate_lock()   # threading's own Lock; threading itself is not imported by a launch (issue 28)


def compiled(policy: Policy, *, allow_host_mountpoints: bool = False) -> _plan.Plan:
    """The plan of ``policy``, compiled once per process (policies are hashable);
    ``allow_host_mountpoints``: pybwrap's compile option (``plan.compile``).

    The same Policy object launched again is found by identity, without hashing
    it (a frozen dataclass rehashes every field on each call: 0.1-0.2 ms with a
    thousand binds); an equal but distinct Policy is found by value."""
    host = bool(allow_host_mountpoints)
    seen = _plan_by_id.get((id(policy), host))
    if seen is not None and seen[0] is policy:
        return seen[1]
    try:
        hash(policy)
    except TypeError:
        return _plan.compile(policy, allow_host_mountpoints=host)
    with _plan_lock:
        got = _plan_cache.get((policy, host))
    if got is None:
        got = _plan.compile(policy, allow_host_mountpoints=host)
    with _plan_lock:
        if len(_plan_cache) > 256:
            _plan_cache.clear()
            _plan_by_id.clear()
        _plan_cache[(policy, host)] = got
        # The entry holds the policy itself, so its id cannot be reused while it is here.
        _plan_by_id[(id(policy), host)] = (policy, got)
    return got


_cwd_plans: dict = {}
_launch_env = EnvCache()   # the one-shot launches' environment (os.environ with the policy's edits), reused while unchanged


def with_start_directory(plan: _plan.Plan, cwd) -> _plan.Plan:
    """``plan`` starting the command in ``cwd`` (:func:`view.sandbox_cwd`: relative to the
    plan's own start directory), made once per (plan, directory) so that the backends'
    per-plan caches (translation, bwrap's check) serve later launches.

    Raises:
        PolicyError: the sandbox's view has no directory at ``cwd`` (``invalid_path``; a
            hidden one: ``conflicting_options``), or ``cwd`` is not a valid path.
    """
    path = check_path(_view.sandbox_cwd(cwd, plan.chdir), "cwd")
    _view.check_start_directory(path, plan.mount_ops)   # each launch: the host may have changed
    if path == plan.chdir:
        return plan
    key = (id(plan), path)
    seen = _cwd_plans.get(key)
    if seen is not None and seen[0] is plan:
        return seen[1]
    derived = replace(plan, ops=tuple(_plan.Chdir(path) if isinstance(op, _plan.Chdir) else op
                                      for op in plan.ops))
    with _plan_lock:
        if len(_cwd_plans) > 256:
            _cwd_plans.clear()
        _cwd_plans[key] = (plan, derived)   # holds the plan: its id is not reused while here
    return derived


def caller_directory(plan: _plan.Plan) -> _plan.Plan:
    """``plan`` (the default policy's) starting in the caller's current directory, as
    ``subprocess`` starts, when the sandbox's view has it (the host's read-only ``/``);
    in ``/`` when it does not (under the private ``/tmp``, a hidden credential store, a
    directory removed since)."""
    try:
        return with_start_directory(plan, os.getcwd())
    except (PolicyError, OSError):
        return plan


class SandboxStart:
    """The launch shared by SandboxProcess and DirectProcess: :meth:`_set_up` (from the
    constructor, before anything starts), :meth:`_start_child` (the spawn: stdio are the
    child's descriptors), :meth:`_started` (right after it), :meth:`_finish` (after the
    reap); and how a signal reaches the sandbox (:meth:`send_signal`, ``kill``,
    ``terminate``). The subclass holds ``_child``, ``returncode``, ``pid`` and ``poll``."""

    _child: Any = None   # the backend's child (NativeChild, BwrapChild, LimitedChild) once started
    returncode: int | None = None

    if TYPE_CHECKING:   # each subclass's own: the outermost process's pid, and poll() reaping it
        pid: int

        def poll(self) -> int | None: ...

    def send_signal(self, sig) -> None:
        """Deliver ``sig`` to the sandboxed command (as subprocess does to its child).

        SIGKILL ends the sandbox: the backend's pid 1 first (one the command cannot
        outlive by clearing its own PR_SET_PDEATHSIG), then the outermost process, so
        every process in it dies (that kill as Popen's: after a poll, so a pid already
        reaped, perhaps another process's now, is never signalled); other signals reach
        the command itself, through the backend (bwrap's pid 1 does not forward them)."""
        if sig == signal.SIGKILL:
            if self._child is not None and self.returncode is None:
                self._child.kill_sandbox()
            self.poll()
            if self.returncode is None:
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    pass
            return
        self.poll()
        self.forward_signal(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def _set_up(self, args, kwargs: dict, *, policy: Policy | None = None, backend: str = "auto", env=None,
                pass_fds=(), on_start=None, cwd=None, close_in_setup=(), pty_socket=None, pty_stdio=0b111,
                pty_winsize=None, on_proxy_event=None, _proxy_resolver=None, _proxy_tenants=None,
                _session_server: bool = False, _host_mountpoints: bool = False) -> list[str]:
        """Check the arguments (SandboxProcess's; ``kwargs``: the Popen arguments left,
        the refused ones taken out) and prepare the launch; returns the command's argv."""
        for bad in ("preexec_fn", "user", "group", "extra_groups", "shell", "executable",
                    "umask", "process_group", "start_new_session"):
            if kwargs.get(bad) not in (None, False):
                raise PolicyError(f"{bad}= is decided by the policy in a sandbox", Reason.CONFLICTING_OPTIONS, bad)
            kwargs.pop(bad, None)
        if kwargs.pop("close_fds", True) is not True:
            raise PolicyError("close_fds=False: a sandbox never inherits the caller's descriptors; pass the ones "
                              "the command needs in pass_fds", Reason.CONFLICTING_OPTIONS, "close_fds")
        if isinstance(args, (str, bytes, os.PathLike)):
            args = [args]
        argv = [os.fsdecode(a) for a in args]
        if not argv or not argv[0]:
            raise PolicyError("empty command", Reason.INVALID_VALUE, args)
        if any("\x00" in a for a in argv):
            raise PolicyError("command arguments must not contain NUL", Reason.INVALID_VALUE, argv)
        self.policy = policy if policy is not None else Policy.default()
        # _host_mountpoints: pybwrap's only (bwrap creates a missing mount point inside a
        # writable host bind on the host); no Policy field can ask for it.
        self.plan = compiled(self.policy, allow_host_mountpoints=_host_mountpoints)
        if _session_server:   # session.py's server: no launch-time Landlock domain (Plan.launch_domain)
            self.plan = replace(self.plan, launch_domain=False)
        if cwd is not None:
            self.plan = with_start_directory(self.plan, cwd)
        elif policy is None:
            self.plan = caller_directory(self.plan)
        # Native's probe is left to the launch (backends/__init__.py) unless on_start or the denial observer would see a first, failed launch.
        self._backend_choice = backend
        self._deferred = on_start is None and not self.policy.report_denials
        self.backend = select_backend(backend, self.plan, deferred=self._deferred)
        self._sandbox_env = _launch_env.apply(self.policy.env, env)
        # As bubblewrap does after its chdir: PWD names the sandbox's working directory.
        # The one place PWD is set, for every backend and pybwrap.
        self._sandbox_env["PWD"] = self.plan.chdir
        self._sandbox_pass_fds = tuple(sorted(set(self.policy.pass_fds) | set(pass_fds)))
        if on_start is not None and not callable(on_start):
            raise PolicyError("on_start must be callable", Reason.INVALID_VALUE, on_start)
        self._on_start = on_start
        self._close_in_setup = tuple(check_fd(fd, "close_in_setup entry") for fd in close_in_setup)
        both = sorted(set(self._close_in_setup) & set(self._sandbox_pass_fds))
        if both:   # the setup would close its copy and the command still get the caller's
            raise PolicyError(f"close_in_setup descriptor {both[0]} is also in pass_fds: the command would still get "
                              "it; name it in one of them", Reason.CONFLICTING_OPTIONS, both[0])
        if pty_socket is not None:
            _plan.check_terminal(self.plan)
            pty_socket = check_fd(pty_socket, "pty_socket")
        self._pty = (pty_socket, pty_stdio, pty_winsize)
        self.proxy = None
        net = self.plan.proxy
        if net is not None:   # egress imported here: a launch without a proxy does not pay for it
            from .egress import Egress, apply_proxy_env
            # _proxy_resolver: tests only (test hosts in a network namespace the test made);
            # _proxy_tenants: a session's per-command credentials (pysandbox/session_proxy.py).
            self.proxy = Egress(net.allow_hosts, on_event=on_proxy_event, resolver=_proxy_resolver,
                                tenants=_proxy_tenants,
                                head_timeout=net.head_timeout, idle_timeout=net.idle_timeout,
                                max_connections=net.max_connections)
            apply_proxy_env(self._sandbox_env, self.proxy.port)
        elif on_proxy_event is not None:
            from .egress import check_callback
            check_callback(on_proxy_event)
        # _session_server: a session's server (session.py): records per command's session
        self._observer = None
        if self.policy.report_denials:   # imported here: a launch without it does not pay for it
            from .denials import Observer
            self._observer = Observer(self.policy, _session_server)
        return argv

    def _start_child(self, argv, stdin, stdout, stderr):
        limits = self.policy.limits
        # before anything starts: a limit not enforceable fails closed; extra: the pids
        # limit as RLIMIT_NPROC where no cgroup can hold it (pysandbox/nproc.py)
        cgroups, extra = prepare(limits)
        plan = replace(self.plan, rlimits=self.plan.rlimits + extra) if extra else self.plan
        launch = Launch(argv=argv, env=self._sandbox_env, stdin=stdin, stdout=stdout, stderr=stderr,
                        pass_fds=self._sandbox_pass_fds, on_start=self._on_start,
                        close_in_setup=self._close_in_setup, pty_socket=self._pty[0], pty_stdio=self._pty[1],
                        pty_winsize=self._pty[2], cgroup_procs=cgroups.procs_files if cgroups else (),
                        proxy_socket=None if self.proxy is None else self.proxy.their_fd,
                        notify_socket=None if self._observer is None else self._observer.their_fd)
        if self._observer is not None:
            self._observer.begin()
        try:
            child = self.backend.spawn(plan, launch)
        except BaseException as exc:
            if cgroups is not None:
                cgroups.close()
            if not self._deferred:
                raise
            self._deferred = False   # the deferred check, once; a new launch from scratch
            self.backend = after_failed_launch(self._backend_choice, self.backend, self.plan, exc)
            return self._start_child(argv, stdin, stdout, stderr)
        if limits is not None:
            child = LimitedChild(child, limits, cgroups)
        try:
            if self._observer is not None:
                self._observer.start()
            if self.proxy is not None:
                self.proxy.start()
        except BaseException:
            _end_child(child)
            raise
        return child

    def _started(self) -> None:
        if isinstance(self._child, LimitedChild):   # the wall-time deadline starts with the command
            self._child.start_deadline(lambda: self.send_signal(signal.SIGKILL))

    def _finish(self) -> None:
        """After the reap: the proxy and the observer end with the sandbox."""
        if self.proxy is not None:
            self.proxy.close()   # the sandbox is gone: so is its proxy
        if self._observer is not None:
            self._observer.finish()   # every process under its filter is gone too

    @property
    def cgroups(self):
        """The launch's cgroups (pysandbox/cgroup.py ``Cgroups``) while it runs, or None."""
        return getattr(self._child, "cgroups", None)

    @property
    def observer(self):
        """The denial observer of this sandbox (``report_denials``), or None."""
        return self._observer

    @property
    def denials(self):
        """What the sandbox refused (``Policy(report_denials=True)``; pysandbox/denials.py),
        complete once the command was reaped; None when the policy does not report."""
        if self._observer is None:
            return None
        if self.proxy is None:
            return self._observer.denials
        from .denials import with_proxy_refusals   # proxy mode: its refusals are denials too
        return with_proxy_refusals(self._observer.denials, self.proxy.events)

    @property
    def limit(self) -> str | None:
        """The resource limit that ended the command (``"memory"``, ``"pids"``,
        ``"cpu_time"``, ``"file_size"``, ``"wall_time"``; pysandbox/limits.py), or None;
        known once the command was reaped (``returncode`` set)."""
        return getattr(self._child, "limit", None)

    def forward_signal(self, sig) -> None:
        """Deliver ``sig`` to the sandboxed command through the backend, without reaping
        anything (safe in a signal handler while another thread waits). Does nothing
        once the command is gone."""
        if self._child is None or self.returncode is not None:
            return
        try:
            self._child.forward_signal(sig)
        except ProcessLookupError:
            pass

    @property
    def backend_name(self) -> str:
        return self.backend.name


def _end_child(child) -> None:
    """Kill and reap a sandbox whose launch is abandoned after its spawn returned."""
    child.kill_sandbox()
    try:
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    child.close()
