"""API-key authentication, permissions, route time limits and project scoping.

`@requires(permission)` authenticates the bearer key (one indexed read), checks the
permission against the fixed role table, and runs the handler under the route's time
limit (408). Every cause of a 401 gives the same flat body. A bound key acts with its
role, capped at its creator's current role so a demoted creator's old keys shrink too (never
beyond either: `Principal.may`).
"""

from __future__ import annotations

import hmac
import random
from dataclasses import dataclass
from functools import wraps
from typing import TYPE_CHECKING, Callable

import trio
from quart import current_app, g, request

from service.clock import TOUCH_EVERY, iso
from service.errors import Conflict, NotFound, RateLimited
from service.http.errors import AuthFailure, RouteTimeout
from service.roles import ROLE_BY_ID, allows, within
from service.storage import accounts as sql

if TYPE_CHECKING:
    from service.node import Node

ROUTE_LIMIT = 10
UPLOAD_LIMIT = 120


@dataclass(frozen=True)
class Principal:
    org_id: str
    user_id: str
    key_id: str | None  # None: a browser session (service.http.browser), which holds no key
    role: str  # what the caller may do: the person's role, or the narrower role its key is bound to
    user_role: str | None = None  # the person's own role when `role` is narrower (a bound key)
    # a bound key's role, checked as well: read_only and member are not nested, so capping one
    # by the other must not lend the key what its binding lacks
    binding: str | None = None

    def may(self, permission: str) -> bool:
        return allows(self.role, permission) and (self.binding is None or allows(self.binding, permission))


TARPIT_S = 1.0  # the longest pause before a per-key 429


def node() -> Node:
    return current_app.config["NODE"]


def authenticate() -> Principal:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.startswith("aak_"):
        raise AuthFailure(401)
    found = principal_for_key(node(), token.strip())
    if found is None:
        raise AuthFailure(401)
    return found


def principal_for_key(svc: Node, token: str) -> Principal | None:
    """The principal a key acts as now, or None when it does not authenticate (any cause)."""
    row = sql.key_for_auth(svc.store, sql.key_digest(token))
    if row is None:
        return None
    now = svc.clock.now()
    now_iso = iso(now)
    if (row["revoked_at"] or not row["is_active"] or not row["user_active"] or not row["approved_at"]
            or (row["expires_at"] is not None and row["expires_at"] <= now_iso)):
        return None
    role = user_role = row["user_role"]
    bound = ROLE_BY_ID.get(row["role_id"]) if row["role_id"] else None
    if bound is not None and within(bound, role):
        role = bound
    last = row["last_used_at"]
    if last is None or last < iso(now - TOUCH_EVERY):
        svc.accounts.touch_key(row["id"], now)
    return Principal(row["organization_id"], row["user_id"], row["id"], role,
                     user_role if user_role != role else None, bound)


def still_allowed() -> Callable[[], bool]:
    """For a response that outlives its request (an event stream): a check, callable later
    without the request's context, that the caller's key still authenticates with a role
    that holds the route's permission (revoked, paused, expired or removed: False)."""
    svc = node()
    token = request.headers.get("Authorization", "").partition(" ")[2].strip()
    permission = getattr(g, "permission", None)

    def check() -> bool:
        found = principal_for_key(svc, token)
        return found is not None and (permission is None or found.may(permission))

    return check


def requires(permission: str | None, *, limit: int | Callable[[], int] = ROUTE_LIMIT) -> Callable:
    """Authenticate, check `permission` (None: any valid key), and enforce the time limit
    (seconds, or a function of the request giving them: a submit that waits)."""

    def deco(func: Callable) -> Callable:
        @wraps(func)
        async def wrapper(*args, **kwargs):
            principal = authenticate()
            if principal.key_id is not None:  # before the role check: a 403 is a request too
                try:
                    node().key_buckets.take(principal.key_id)
                except RateLimited as e:
                    # answered after a pause (no CPU: a sleep): a client that floods without
                    # reading Retry-After is slowed to a trickle per connection instead of
                    # taking the node's time from everyone else's requests; the pause is
                    # jittered so its connections do not all come back at once
                    await trio.sleep(min(TARPIT_S, e.retry_after) * random.uniform(0.5, 1.0))
                    raise
            if permission is not None and not principal.may(permission):
                raise AuthFailure(403)
            g.principal = principal
            g.permission = permission
            seconds = limit() if callable(limit) else limit
            with trio.move_on_after(seconds) as scope:
                return await func(*args, **kwargs)
            if scope.cancelled_caught:
                raise RouteTimeout(seconds)

        wrapper.permission = permission  # type: ignore[attr-defined]  # read by the authorization tests
        return wrapper

    return deco


def principal() -> Principal:
    return g.principal


def resolve_project(body_project: str | None = None, *, write: bool = False) -> dict:
    """The spec's scoping rule: body `project_id`, else X-Service-Project, else the default.

    Unknown -> 404; a write into an archived project -> 409 "The project is archived."
    """
    p = principal()
    store = node().store
    ref = body_project or request.headers.get("X-Service-Project") or None
    project = sql.get_project(store, p.org_id, ref) if ref else sql.default_project(store, p.org_id)
    if project is None:
        raise NotFound("Project not found.")
    if write and project["is_archived"]:
        raise Conflict("The project is archived.", {"project_id": project["id"]})
    return project


def constant_time_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
