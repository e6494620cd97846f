"""Who a connection is for: the credentials of one proxy shared by the commands of a
session (pysandbox/session_proxy.py), each command a :class:`Tenant`.

Each command gets a fresh random user and password (in the userinfo of its
``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``), valid from when it is issued until it is
revoked, at the command's exit. The engine (pysandbox/proxy/server.py), given a
:class:`Tenants`, asks every connection for one (HTTP ``Proxy-Authorization: Basic``,
SOCKS5 user/password, RFC 1929): a connection without a valid one is refused
(``proxy_auth_required``) and recorded on the engine, the session's record; one with a
valid one is decided by that command's allow list (never wider than the session's) and
recorded on that command's :class:`Tenant`. Revoking a tenant refuses its credential from
then on and cancels every connection it holds (a tunnel left open by a command that
ended is closed, not kept).

Thread-safety: :meth:`Tenants.admit` and :meth:`Tenants.release` run on the engine's
loop; :meth:`Tenants.issue` and :meth:`Tenant.revoke` on any thread.
"""

from __future__ import annotations

import collections
import hmac
import itertools
import secrets
import threading

from ..errors import PolicyError, Reason
from .rules import AllowList, HostRule

__all__ = ["DRAIN_TIMEOUT", "Tenant", "Tenants", "narrowed"]

DRAIN_TIMEOUT = 5.0   # seconds a revoked tenant's connections get to end (their events recorded)


def _covers(outer: HostRule, inner: HostRule, port: int) -> bool:
    """Does ``outer`` allow, on ``port``, every host ``inner`` allows?"""
    if port not in outer.ports:
        return False
    if inner.address is not None or outer.address is not None:
        return inner.address is not None and outer.address is not None and inner.host == outer.host
    if outer.wildcard:
        return inner.host.endswith("." + outer.host) or (inner.wildcard and inner.host == outer.host)
    return not inner.wildcard and inner.host == outer.host


def narrowed(session: AllowList, hosts) -> AllowList:
    """``hosts`` (allow-list texts) as an AllowList, checked to allow nothing the
    session's list does not.

    Raises:
        PolicyError: ``invalid_value`` for an entry that is not a rule;
            ``allow_list_widened`` for one the session's list does not cover (each of its
            ports by one rule of the session's).
    """
    allow = AllowList.from_strings(hosts)
    for rule in allow:
        for port in rule.ports:
            if not any(_covers(outer, rule, port) for outer in session):
                raise PolicyError(f"allowed host {str(rule)!r} (port {port}) is not allowed by the session's "
                                  "allow list: a command's list may narrow it, never widen it",
                                  Reason.ALLOW_LIST_WIDENED, value=str(rule), field="allow_hosts")
    return allow


class Tenant:
    """One command's share of a session's proxy: its credential (``user``,
    ``password``), allow list, ``on_event`` callback, and what the engine recorded for
    it (``counts``, ``events``)."""

    def __init__(self, owner: "Tenants", user: str, allow: AllowList, on_event, max_events: int):
        self.owner, self.user, self.allow, self.on_event = owner, user, allow, on_event
        self.password = secrets.token_urlsafe(24)
        self._events: collections.deque = collections.deque(maxlen=max_events)
        self._counts = {"allowed": 0, "refused": 0}
        self._tasks: set = set()        # the engine's tasks serving this tenant's connections
        self.revoked = False
        self._drained = threading.Event()

    def record(self, event) -> None:
        with self.owner.lock:
            self._events.append(event)
            self._counts[event.verdict] = self._counts.get(event.verdict, 0) + 1

    @property
    def counts(self) -> dict:
        self.drain()
        with self.owner.lock:
            return dict(self._counts)

    @property
    def events(self) -> list:
        self.drain()
        with self.owner.lock:
            return list(self._events)

    def drain(self, timeout: float = DRAIN_TIMEOUT) -> bool:
        """Once revoked: wait (at most ``timeout``) until its connections ended, so the
        events are complete; True when they did. Does not wait while not revoked."""
        return self._drained.wait(timeout) if self.revoked else False

    def revoke(self) -> None:
        """The credential is refused from now on and every connection of it cancelled.
        Idempotent; any thread; does not wait (see :meth:`drain`)."""
        with self.owner.lock:
            if self.revoked:
                return
            self.revoked = True
            self.owner.live.pop(self.user, None)
            tasks = list(self._tasks)
            if not tasks:
                self._drained.set()
        loop = self.owner.loop
        if tasks and loop is not None:
            try:
                loop.call_soon_threadsafe(lambda: [task.cancel() for task in tasks])
            except RuntimeError:     # the loop ended: so did its tasks
                self._drained.set()
        elif tasks:
            self._drained.set()


class Tenants:
    """The live credentials of one engine; see the module."""

    def __init__(self, max_events: int = 10000):
        self.lock = threading.Lock()
        self.live: dict[str, Tenant] = {}
        self.loop = None                 # the engine's loop, set once it runs
        self._ids = itertools.count(1)
        self.max_events = max_events

    def issue(self, allow: AllowList, on_event=None) -> Tenant:
        with self.lock:
            tenant = Tenant(self, f"c{next(self._ids)}", allow, on_event, self.max_events)
            self.live[tenant.user] = tenant
        return tenant

    def admit(self, user: str, password: str, task) -> Tenant | None:
        """The live tenant of ``user:password``, with ``task`` counted as its connection
        (cancelled if it is revoked); None for anything else (unknown, revoked, wrong)."""
        with self.lock:
            tenant = self.live.get(user)
            if tenant is None or not hmac.compare_digest(tenant.password.encode(), password.encode("utf-8",
                                                                                              "surrogateescape")):
                return None
            tenant._tasks.add(task)
            return tenant

    def release(self, tenant: Tenant, task) -> None:
        """``task`` (a connection of ``tenant``) ended."""
        with self.lock:
            tenant._tasks.discard(task)
            if tenant.revoked and not tenant._tasks:
                tenant._drained.set()

    def close(self) -> None:
        """The engine ended: every tenant revoked, nothing to wait for."""
        with self.lock:
            tenants = list(self.live.values())
        for tenant in tenants:
            tenant.revoke()
            tenant._drained.set()
