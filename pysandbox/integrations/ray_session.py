"""A session of ``SandboxCluster`` pinned to one host actor: ``ClusterSession``
(``sc.session()``; see ``pysandbox/integrations/ray.py`` for the fault rules)."""

from __future__ import annotations

import asyncio

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from ..errors import Reason, SessionError
from .ray_host import CommandResult, HostLost

__all__ = ["CLOSE_TIMEOUT", "ClusterSession"]

CLOSE_TIMEOUT = 60.0    # seconds one host may take to close its pool or a session


class ClusterSession:
    """Commands pinned to one host's session; see :meth:`SandboxCluster.session`."""

    def __init__(self, cluster, host, sid: str):
        self.cluster, self._host, self.id = cluster, host, sid
        self.node_id = host.node_id
        self._lost: HostLost | None = None
        self._closed = False

    def submit(self, args, **kwargs):
        """Start ``args`` in this session; an ``ObjectRef`` (use :meth:`result`).

        Raises:
            HostLost: the session's host died (at once, once known).
            SessionError (session_closed): the session is closed.
        """
        if self._lost is not None:
            raise HostLost(str(self._lost), node_id=self.node_id)
        if self._closed:
            raise SessionError("the session is closed", Reason.SESSION_CLOSED)
        host = self.cluster._admit(kwargs.pop("block", None), host=self._host)
        kw = {"capture_output": False, "input": None, "timeout": None, "env": None, "cwd": None, "text": False}
        kw.update(kwargs)
        kw["session"] = self.id
        return self.cluster._dispatch(host, args, kw, False, 1)

    def result(self, ref) -> CommandResult:
        try:
            return self.cluster.result(ref)
        except HostLost as exc:
            self._lost = HostLost(f"the session's node {self.node_id} died: its files and processes are gone "
                                  f"({exc})", node_id=self.node_id)
            raise self._lost from None

    def run(self, args, **kwargs) -> CommandResult:
        """Run ``args`` in this session and wait (:meth:`SandboxCluster.run`'s arguments)."""
        return self.result(self.submit(args, **kwargs))

    async def arun(self, args, **kwargs) -> CommandResult:
        return await asyncio.to_thread(self.run, args, **kwargs)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._lost is None and not self._host.dead and not self.cluster.closed:
            try:
                ray.get(self._host.actor.close_session.options(concurrency_group="control").remote(self.id),
                        timeout=CLOSE_TIMEOUT)
            except (RayActorError, GetTimeoutError):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
