"""Sandboxed commands across a Ray cluster: ``SandboxCluster``.

    import ray
    from pysandbox import Policy
    from pysandbox.integrations.ray import SandboxCluster

    ray.init(address="auto")
    with SandboxCluster(Policy.default(workdir="/srv/job"), pool_size=4) as sc:
        done = sc.run(["pytest", "-q"], capture_output=True, timeout=600)
        ref = sc.submit(["make", "test"])                 # a Ray ObjectRef to a CommandResult
        for result in sc.map([["sh", "-c", f"echo {i}"] for i in range(100)], capture_output=True):
            ...                                            # as they finish (ordered=True: in order)
        with sc.session() as s:                            # pinned to one host: shares /tmp, workdir
            s.run(["sh", "-c", "echo hi >/tmp/x"]); s.run(["cat", "/tmp/x"], capture_output=True)
        done = await sc.arun(["true"])                     # from an event loop

Ray places the hosts; we schedule nothing. One host actor per node (``hosts=None``: every
alive node with ``cpus_per_host`` CPUs, a ``STRICT_SPREAD`` placement group; ``hosts=N``:
N hosts, ``SPREAD``, so one per node where there are enough nodes), each reserving
``cpus_per_host`` CPUs and running up to ``pool_size`` commands at once (its actor's
``max_concurrency``), each in a fresh sandbox of a :class:`pysandbox.Pool`
(``pysandbox/integrations/ray_host.py``). The policy is compiled on the driver first
(a ``PolicyError`` raises there), then each host runs :func:`pysandbox.status` on its
node: a node that cannot enforce the policy is logged, listed in ``sc.left_out`` with its
reason, and never sent a command. With no node left: ``SessionError``
(``session_unavailable``).

Results are :class:`CommandResult` (``ray_host.py``): ``CompletedProcess``'s fields plus
``node_id``, ``limit``, ``timed_out`` and timings, each output stream cut at
:data:`OUTPUT_LIMIT` (1 MiB). A timeout is a result (``timed_out=True``, ``returncode``
None; ``check_returncode()`` raises ``TimeoutExpired``), not an exception; an error of the
launch (``PolicyError``, ``FileNotFoundError``, ``SetupError``) raises on the driver as
itself.

Back-pressure: at most ``max_pending`` calls in flight from this driver (default
``2 * pool_size`` per host) and at most ``per_host`` on one host (default ``2 *
pool_size``: its slots and as many queued). A submit beyond either waits for a call to
finish (``block=True``, the default) or raises :class:`ClusterBusy` (``block=False``).
A call counts until its command finished, whether or not its result was fetched.

Faults: a call whose host dies raises :class:`HostLost` (``session_lost``). Ray does not
say whether a call reached the actor before it died, so a call in flight then counts as
started and is not run again, unless it was submitted with ``idempotent=True``: then it
runs once more on another live host (``attempts == 2``), never a third time. Calls
submitted after a host's death is known go only to live hosts. A session whose host dies
raises ``HostLost`` on the call in flight and on every later call at once. ``run``,
``map``, ``arun``, sessions and :meth:`SandboxCluster.result` apply these rules; a bare
``ray.get`` of a ``submit`` ref raises Ray's own ``ActorDiedError`` instead.

``close()`` (or leaving the ``with``) closes every session and pool on every host (their
sandboxes and cgroups with them), kills the actors and removes the placement group. If
``SandboxCluster`` started Ray itself (``ray.init()`` when none was running) it shuts it
down too.

Needs Ray: ``pip install 'pysandbox[ray]'``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("pysandbox.integrations.ray needs Ray: pip install 'pysandbox[ray]'") from exc

from ..errors import PolicyError, Reason, SessionError
from ..policy import Policy
from .ray_host import OUTPUT_LIMIT, ClusterBusy, CommandResult, HostLost, SandboxHost
from .ray_session import CLOSE_TIMEOUT, ClusterSession

__all__ = ["OUTPUT_LIMIT", "ClusterBusy", "ClusterSession", "CommandResult", "HostLost", "SandboxCluster"]

log = logging.getLogger("pysandbox.ray")

START_TIMEOUT = 120.0   # seconds for the placement group and the hosts' status checks
_CALLS_KEPT = 4096      # submitted calls remembered for result()'s retry rule


class _HostActor(SandboxHost):
    def __init__(self, policy, pool_size, backend):
        super().__init__(policy, pool_size, backend, node_id=ray.get_runtime_context().get_node_id())


_remote_host = None


def _host_class():
    global _remote_host
    if _remote_host is None:
        _remote_host = ray.remote(concurrency_groups={"control": 2})(_HostActor)
    return _remote_host


class _Call:
    __slots__ = ("host", "args", "kw", "idempotent", "attempts")

    def __init__(self, host, args, kw, idempotent, attempts):
        self.host, self.args, self.kw, self.idempotent, self.attempts = host, args, kw, idempotent, attempts


class _Host:
    __slots__ = ("actor", "info", "node_id", "inflight", "dead")

    def __init__(self, actor, info):
        self.actor, self.info, self.node_id = actor, info, info["node_id"]
        self.inflight = 0
        self.dead = False


class SandboxCluster:
    """Sandboxed commands on the nodes of a Ray cluster; see the module.

    Raises (from the constructor):
        PolicyError: the policy does not compile, or a bad argument.
        SessionError (session_unavailable): no node can enforce the policy (each one's
            reason in the message and in ``left_out`` of the error), or the placement
            group was not ready within ``start_timeout``.
    """

    def __init__(self, policy: Policy | None = None, hosts: int | None = None, pool_size: int = 4,
                 max_pending: int | None = None, backend: str | None = None, *, per_host: int | None = None,
                 block: bool = True, cpus_per_host: float = 1, start_timeout: float = START_TIMEOUT):
        from ..process import compiled
        self.policy = policy if policy is not None else Policy.default()
        if not isinstance(self.policy, Policy):
            raise PolicyError("SandboxCluster needs a Policy", Reason.INVALID_VALUE, policy)
        compiled(self.policy)   # a policy that cannot compile fails here, not on every node
        for name, value in (("hosts", hosts), ("max_pending", max_pending), ("per_host", per_host)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise PolicyError(f"{name} must be a positive int", Reason.INVALID_VALUE, value)
        self.backend = backend or "auto"
        self.pool_size, self.block = pool_size, block
        self.per_host = per_host or 2 * pool_size
        self.left_out: list[dict] = []
        self.closed_info: list[dict] = []
        self._lock = threading.Condition()
        self._inflight: dict = {}          # ObjectRef -> _Call, until its command finished
        self._calls: collections.OrderedDict = collections.OrderedDict()   # ObjectRef -> _Call, until result()
        self._hosts: list[_Host] = []
        self._pg = None
        self._closed = False
        self._own_ray = not ray.is_initialized()
        if self._own_ray:
            ray.init()
        try:
            self._start(hosts, cpus_per_host, start_timeout)
        except BaseException:
            self.close()
            raise
        self.max_pending = max_pending or 2 * pool_size * len(self._hosts)

    # ------------------------------------------------------------------ start
    def _start(self, hosts, cpus, start_timeout) -> None:
        n = hosts or max(1, sum(x.get("Alive") and x.get("Resources", {}).get("CPU", 0) >= cpus for x in ray.nodes()))
        strategy = "SPREAD" if hosts is not None else "STRICT_SPREAD"
        self._pg = placement_group([{"CPU": cpus}] * n, strategy=strategy)
        try:
            ray.get(self._pg.ready(), timeout=start_timeout)
        except GetTimeoutError:
            raise SessionError(f"the placement group of {n} hosts ({cpus} CPU each, {strategy}) was not ready "
                               f"within {start_timeout} s", Reason.SESSION_UNAVAILABLE) from None
        cls = _host_class()
        actors = [cls.options(num_cpus=cpus, max_concurrency=self.pool_size, max_restarts=0, max_task_retries=0,
                              scheduling_strategy=PlacementGroupSchedulingStrategy(
                                  self._pg, placement_group_bundle_index=i)).remote(
                                      self.policy, self.pool_size, self.backend)
                  for i in range(n)]
        infos = ray.get([a.info.options(concurrency_group="control").remote() for a in actors],
                        timeout=start_timeout)
        for actor, info in zip(actors, infos):
            if info["available"]:
                self._hosts.append(_Host(actor, info))
                continue
            log.warning("node %s left out: it cannot enforce the policy (%s: %s)",
                        info["node_id"], info["reason"], info["detail"])
            self.left_out.append(info)
            ray.kill(actor)
        if not self._hosts:
            why = "; ".join(f"{i['node_id']}: {i['reason']}" for i in self.left_out)
            raise SessionError(f"no node can enforce the policy ({why})", Reason.SESSION_UNAVAILABLE,
                               left_out=list(self.left_out))

    @property
    def hosts(self) -> list[dict]:
        """Each live host's ``info()`` at start (node_id, host, pid, backend, mode)."""
        return [h.info for h in self._hosts if not h.dead]

    def stats(self) -> list[dict]:
        """Each live host's ``info()`` now: running, most_running, done, sessions."""
        live = [h for h in self._hosts if not h.dead]
        return ray.get([h.actor.info.options(concurrency_group="control").remote() for h in live])

    # ------------------------------------------------------------------ admission
    def _prune(self) -> None:
        with self._lock:
            refs = list(self._inflight)
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        with self._lock:
            for ref in ready:
                call = self._inflight.pop(ref, None)
                if call is not None:
                    call.host.inflight -= 1

    def _pick(self, node_id=None, host=None):
        live = [h for h in self._hosts if not h.dead]
        if host is not None:
            live = [host] if not host.dead else []
        elif node_id is not None:
            live = [h for h in live if h.node_id == node_id]
        if not live:
            raise HostLost(f"no live host{' on node ' + node_id if node_id else ''}", node_id=node_id or "")
        if len(self._inflight) >= self.max_pending:
            return None
        best = min(live, key=lambda h: h.inflight)
        return best if best.inflight < self.per_host else None

    def _admit(self, block, node_id=None, host=None) -> _Host:
        block = self.block if block is None else block
        while True:
            if self._closed:
                raise SessionError("the sandbox cluster is closed", Reason.SESSION_CLOSED)
            self._prune()
            with self._lock:
                chosen = self._pick(node_id, host)
                if chosen is not None:
                    chosen.inflight += 1
                    return chosen
            if not block:
                raise ClusterBusy(f"{len(self._inflight)} calls in flight (max_pending {self.max_pending}, "
                                  f"per_host {self.per_host})")
            with self._lock:
                refs = list(self._inflight)
            if refs:
                ray.wait(refs, num_returns=1, timeout=1.0, fetch_local=False)

    def _dispatch(self, host: _Host, args, kw, idempotent, attempts):
        kw = dict(kw, submitted_at=time.time(), attempts=attempts)
        try:
            ref = host.actor.run.remote(list(args), **kw)
        except BaseException:
            with self._lock:
                host.inflight -= 1
            raise
        call = _Call(host, list(args), kw, idempotent, attempts)
        with self._lock:
            self._inflight[ref] = call
            self._calls[ref] = call
            while len(self._calls) > _CALLS_KEPT:
                self._calls.popitem(last=False)
        return ref

    # ------------------------------------------------------------------ the API
    def submit(self, args, *, capture_output: bool = False, input=None, timeout: float | None = None, env=None,
               cwd=None, text: bool = False, idempotent: bool = False, node_id: str | None = None,
               block: bool | None = None):
        """Start ``args`` on the least loaded live host (or on ``node_id``'s); a Ray
        ``ObjectRef`` to its :class:`CommandResult`. Use :meth:`result` (not a bare
        ``ray.get``) for the fault rules of the module.

        Raises:
            ClusterBusy: ``block=False`` and a bound of calls in flight is reached.
            HostLost: no live host (on ``node_id``).
            SessionError (session_closed): the cluster is closed.
        """
        host = self._admit(block, node_id)
        kw = {"capture_output": capture_output, "input": input, "timeout": timeout, "env": env, "cwd": cwd,
              "text": text}
        return self._dispatch(host, args, kw, idempotent, 1)

    def result(self, ref, timeout: float | None = None) -> CommandResult:
        """The :class:`CommandResult` of a :meth:`submit` ref, retrying an idempotent
        call once elsewhere when its host died (see the module).

        Raises:
            HostLost: its host died (and the call is not idempotent, or ran twice).
            The launch's own error (PolicyError, FileNotFoundError, SetupError, ...).
            ray.exceptions.GetTimeoutError: ``timeout`` passed.
        """
        while True:
            with self._lock:
                call = self._calls.get(ref)
            try:
                done = ray.get(ref, timeout=timeout)
                with self._lock:
                    self._calls.pop(ref, None)
                return done
            except RayTaskError as exc:
                with self._lock:
                    self._calls.pop(ref, None)
                raise (exc.cause if isinstance(exc.cause, BaseException) else exc) from None
            except RayActorError as exc:
                ref = self._after_loss(ref, call, exc)

    def _after_loss(self, ref, call, exc):
        """A host died under ``ref``: the retry's ref, or raise HostLost."""
        with self._lock:
            self._calls.pop(ref, None)
            if self._inflight.pop(ref, None) is not None:
                call.host.inflight -= 1
        if call is None:
            raise HostLost(f"the host of this call died: {exc}") from None
        self._mark_dead(call.host, exc)
        node = call.host.node_id
        if not call.idempotent or call.attempts >= 2:
            why = ("it was run twice" if call.attempts >= 2 else
                   "it may have started, so it was not run again (idempotent=True allows one retry elsewhere)")
            raise HostLost(f"node {node} died while {call.args!r} was in flight: {why}", node_id=node) from None
        log.warning("node %s died; running %r again elsewhere (idempotent)", node, call.args)
        host = self._admit(True)
        kw = {k: v for k, v in call.kw.items() if k not in ("submitted_at", "attempts")}
        return self._dispatch(host, call.args, kw, True, call.attempts + 1)

    def _mark_dead(self, host: _Host, exc) -> None:
        with self._lock:
            if not host.dead:
                host.dead = True
                log.warning("node %s: its sandbox host died (%s)", host.node_id, type(exc).__name__)

    def run(self, args, *, timeout: float | None = None, idempotent: bool = False, node_id: str | None = None,
            **kwargs) -> CommandResult:
        """Run ``args`` on the cluster and wait: :meth:`submit` then :meth:`result`.
        ``timeout`` is the command's (the sandbox is ended); the wait is bounded by it
        plus the host's own time, or unbounded without one."""
        ref = self.submit(args, timeout=timeout, idempotent=idempotent, node_id=node_id, block=True, **kwargs)
        return self.result(ref)

    def map(self, argvs, *, ordered: bool = False, **kwargs):
        """Run every argv of ``argvs``; yield each :class:`CommandResult` as it finishes
        (``ordered=True``: in the order of ``argvs``). Submits within the bounds of calls
        in flight, so ``argvs`` may be a long generator. ``kwargs``: :meth:`submit`'s.
        A HostLost or launch error raises from the generator at that command."""
        todo = iter(argvs)
        pending: list = []          # refs in submission order
        exhausted = False
        while True:
            while not exhausted:
                try:
                    host = self._admit(False)
                except ClusterBusy:
                    break
                try:
                    args = next(todo)
                except StopIteration:
                    with self._lock:
                        host.inflight -= 1
                    exhausted = True
                    break
                kw = {k: kwargs.get(k) for k in ("input", "timeout", "env", "cwd")}
                kw.update(capture_output=bool(kwargs.get("capture_output")), text=bool(kwargs.get("text")))
                pending.append(self._dispatch(host, args, kw, kwargs.get("idempotent", False), 1))
            if not pending:
                if exhausted:
                    return
                ray.wait(list(self._inflight) or pending, num_returns=1, timeout=1.0, fetch_local=False)
                continue
            if ordered:
                ref = pending.pop(0)
            else:
                ready, _ = ray.wait(pending, num_returns=1, timeout=1.0 if not exhausted else None)
                if not ready:
                    continue
                ref = ready[0]
                pending.remove(ref)
            yield self.result(ref)

    async def arun(self, args, **kwargs) -> CommandResult:
        """:meth:`run` for a driver in an event loop: the submit (which may wait for
        room) runs in a thread, the result is awaited; a host loss as :meth:`result`."""
        ref = await asyncio.to_thread(self.submit, args, **kwargs)
        while True:
            with self._lock:
                call = self._calls.get(ref)
            try:
                done = await ref
                with self._lock:
                    self._calls.pop(ref, None)
                return done
            except RayTaskError as exc:
                raise (exc.cause if isinstance(exc.cause, BaseException) else exc) from None
            except RayActorError as exc:
                ref = await asyncio.to_thread(self._after_loss, ref, call, exc)

    def session(self, node_id: str | None = None) -> "ClusterSession":
        """A session (:class:`pysandbox.Sandbox`) on one host: its commands share the
        policy's writable filesystem and /tmp, as a local session's. Use it as a context
        manager; ``close()`` ends it on the host.

        Raises:
            HostLost: no live host (on ``node_id``).
            The session's own start errors (PolicyError for a policy with limits, ...).
        """
        with self._lock:
            live = [h for h in self._hosts if not h.dead and (node_id is None or h.node_id == node_id)]
        if not live:
            raise HostLost(f"no live host{' on node ' + node_id if node_id else ''}", node_id=node_id or "")
        host = min(live, key=lambda h: h.inflight)
        try:
            sid = ray.get(host.actor.open_session.options(concurrency_group="control").remote())
        except RayTaskError as exc:
            raise (exc.cause if isinstance(exc.cause, BaseException) else exc) from None
        except RayActorError as exc:
            self._mark_dead(host, exc)
            raise HostLost(f"node {host.node_id} died while a session started", node_id=host.node_id) from None
        return ClusterSession(self, host, sid)

    # ------------------------------------------------------------------ close
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close every host's sessions and pool, kill the actors, remove the placement
        group (and shut Ray down if this object started it). Nothing is left."""
        if self._closed:
            return
        self._closed = True
        live = [h for h in self._hosts if not h.dead]
        refs = [h.actor.close.options(concurrency_group="control").remote() for h in live]
        for host, ref in zip(live, refs):
            try:
                self.closed_info.append(ray.get(ref, timeout=CLOSE_TIMEOUT))
            except (RayActorError, GetTimeoutError, RayTaskError) as exc:
                log.warning("node %s: its sandbox host did not close cleanly (%s); killing it",
                            host.node_id, type(exc).__name__)
        for host in self._hosts:
            ray.kill(host.actor, no_restart=True)
        if self._pg is not None:
            remove_placement_group(self._pg)
            self._pg = None
        with self._lock:
            self._inflight.clear()
            self._calls.clear()
        if self._own_ray:
            ray.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
