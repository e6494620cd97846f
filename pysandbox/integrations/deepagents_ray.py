"""A LangChain Deep Agents sandbox backend on a session of a Ray cluster
(:class:`pysandbox.integrations.ray.SandboxCluster`).

    from pysandbox.integrations.ray import SandboxCluster
    from pysandbox.integrations.deepagents_ray import ClusterSandbox

    with SandboxCluster(Policy.default(workdir="/srv/job")) as sc, ClusterSandbox(sc) as sandbox:
        agent = create_deep_agent(model=..., backend=sandbox)

``ClusterSandbox`` is :class:`~pysandbox.integrations.deepagents.PysandboxSandbox` with
its session on one host of the cluster (``sc.session(node_id)``): the same tools, the
same rules (every file transfer a command inside the sandbox), the cluster's policy as it
is. Its files live on that node and go with the session: a node that dies takes them,
and every later call raises ``HostLost`` (a ``SessionError``) at once. Each output the
model sees is cut at the cluster's ``OUTPUT_LIMIT`` (``truncated`` then says so).

Needs the ``deepagents`` and ``ray`` extras.
"""

from __future__ import annotations

import subprocess

from ..process import compiled
from .deepagents import DEFAULT_TIMEOUT, PysandboxSandbox

__all__ = ["ClusterSandbox"]


class ClusterSandbox(PysandboxSandbox):
    """A Deep Agents sandbox on one session of ``cluster`` (on ``node_id``'s host, or the
    least loaded). ``env``, ``default_timeout``, ``overwrite`` and ``glob_paths`` as
    :class:`PysandboxSandbox`'s. ``close()`` ends the session on its host (the cluster
    stays open: it is the caller's).

    Raises:
        HostLost: no live host (on ``node_id``). The session's own start errors.
    """

    def __init__(self, cluster, *, node_id: str | None = None, env=None, default_timeout: float = DEFAULT_TIMEOUT,
                 overwrite: bool = True, glob_paths: str = "absolute"):
        self._configure(env, default_timeout, overwrite, glob_paths, None)
        self._start = compiled(cluster.policy).chdir
        self._session = cluster.session(node_id)
        self._id = f"ray-{self._session.id}"

    @property
    def node_id(self) -> str:
        """The node whose host holds the session."""
        return self._session.node_id

    @property
    def start_directory(self) -> str:
        """The policy's start directory (its workdir), ``/`` without one."""
        return self._start

    def _call(self, argv: list[str], data: bytes | None, limit: float | None, merge: bool = False):
        done = self._session.run(argv, capture_output=True, input=data if data is not None else b"",
                                 timeout=limit, env=self._env, merge_stderr=merge)
        if done.timed_out:
            raise subprocess.TimeoutExpired(argv, limit or 0, done.stdout, done.stderr)
        return done.returncode, done.stdout, done.stderr, done.stdout_truncated
