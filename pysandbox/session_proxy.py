"""Network proxy mode in sessions and pools: one egress engine per session, each
command's connections attributed to that command.

The session's sandbox is launched as a one-shot proxy-mode sandbox is
(pysandbox/egress.py): its setup makes the listener inside the sandbox's network
namespace and hands it to the launcher, whose engine serves it for the session's whole
life and is closed when the session's sandbox is reaped (``Sandbox.close``). The one
difference is the engine's :class:`pysandbox.proxy.tenants.Tenants`: every command gets
its own random credential in the userinfo of its ``HTTP_PROXY``/``HTTPS_PROXY``/
``ALL_PROXY`` (``http://cN:SECRET@127.0.0.1:3128``), and the engine serves a connection
only with the credential of a command still running: its events and counts land on that
command's :attr:`SessionProcess.proxy` (``result.proxy``), its allow list is that
command's. A connection without a live credential is refused
(``proxy_auth_required``) and recorded on the session (``Sandbox.proxy``). The
credential is revoked when the command's exit is reported (the server has then killed
every process it left), and every connection made with it is closed then: a tunnel a
command handed to another (a descriptor passed over a unix socket) does not outlive it.

``allow_hosts=[...]`` on ``sb.run``/``sb.Popen`` (and ``pool.run``, the asyncio
session's ``run``/``create_subprocess_exec``) narrows the command's list; an entry the
session's list does not cover raises PolicyError (``allow_list_widened``).
``on_proxy_event=`` is that command's callback.

Concurrent commands (THREAT_MODEL.md): each command of a session is in a Landlock
domain of its own where the kernel has Landlock, and the kernel refuses a read of
another domain's ``/proc/PID/environ``. Without one the commands are one uid: a command
can read a running command's credential there and use it until that command ends
(within the session's list, recorded on its owner). A pool (a sandbox per command) is
the boundary everywhere.
"""

from __future__ import annotations

from .egress import apply_proxy_env, check_callback
from .errors import PolicyError, Reason
from .policy import PROXY_PORT

__all__ = ["CommandProxy", "SessionEgress", "attach", "command_proxy", "for_policy"]


class SessionEgress:
    """A session's side of its proxy: the session's allow list and the credentials
    (``tenants``) its engine checks."""

    def __init__(self, policy):
        from .proxy.rules import AllowList
        from .proxy.tenants import Tenants
        self.allow = AllowList.from_strings(tuple(policy.network.allow_hosts))
        self.tenants = Tenants()
        self.port = PROXY_PORT

    def launch_kwargs(self) -> dict:
        """The session sandbox's launch options (SandboxProcess) for this engine."""
        return {"_proxy_tenants": self.tenants}


def for_policy(policy) -> SessionEgress | None:
    """A :class:`SessionEgress` for a proxy-mode policy, else None."""
    return SessionEgress(policy) if policy.network.mode == "proxy" else None


def launch_kwargs(egress: SessionEgress | None) -> dict:
    return {} if egress is None else egress.launch_kwargs()


class CommandProxy:
    """One command's share of its session's proxy (``proc.proxy``, ``result.proxy``):
    ``counts`` and ``events`` as :class:`pysandbox.egress.Egress` has them, of this
    command's connections only. Once the command ended, reading them waits (at most
    ``tenants.DRAIN_TIMEOUT`` s) until its connections were closed, so they are complete."""

    def __init__(self, tenant):
        self._tenant = tenant

    @property
    def user(self) -> str:
        return self._tenant.user

    @property
    def allow(self):
        return self._tenant.allow

    @property
    def revoked(self) -> bool:
        return self._tenant.revoked

    @property
    def counts(self) -> dict[str, int]:
        return self._tenant.counts

    @property
    def events(self) -> list:
        return self._tenant.events

    def revoke(self) -> None:
        """The credential refused from now on, the command's connections closed."""
        self._tenant.revoke()

    def __repr__(self):
        return f"<CommandProxy {self.user} {self.counts if self.revoked else 'running'}>"


def command_proxy(session, env: dict, kwargs: dict) -> CommandProxy | None:
    """For a command of ``session``: take ``allow_hosts``/``on_proxy_event`` out of
    ``kwargs``, issue its credential and set its proxy variables in ``env``.

    Raises:
        PolicyError: ``allow_list_widened`` (an entry the session's list does not cover),
            ``invalid_value`` (an entry that is not a rule, a callback not callable),
            ``conflicting_options`` (either option in a session not in proxy mode).
    """
    hosts = kwargs.pop("allow_hosts", None)
    on_event = kwargs.pop("on_proxy_event", None)
    egress = getattr(session, "egress", None)
    if egress is None:
        if hosts is not None or on_event is not None:
            raise PolicyError("allow_hosts= and on_proxy_event= need a session in network proxy mode",
                              Reason.CONFLICTING_OPTIONS, "allow_hosts" if hosts is not None else "on_proxy_event")
        return None
    check_callback(on_event)
    if hosts is None:
        allow = egress.allow
    else:
        from .proxy.tenants import narrowed
        allow = narrowed(egress.allow, hosts)
    tenant = egress.tenants.issue(allow, on_event)
    apply_proxy_env(env, egress.port, f"{tenant.user}:{tenant.password}@")
    return CommandProxy(tenant)


def attach(proxy: CommandProxy | None, child) -> None:
    """Revoke ``proxy`` when the session reports the command's exit (``child``: the
    session's ``RemoteChild``, pysandbox/session_channel.py), or now if it already did."""
    if proxy is None:
        return
    ch, cmd = child.channel, child.cmd
    with ch.cv:
        done = cmd.status is not None or ch.lost is not None
        if not done:
            cmd.on_exit = proxy.revoke
    if done:
        proxy.revoke()
