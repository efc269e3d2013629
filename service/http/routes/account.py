"""The account page (`GET /account`, a dashboard page reached from the header's menu): change one's password, link an
identity provider, and manage members: change a role, remove a member.

Members are changed through the accounts actor with the person's role as the caller, so the
API's rules hold here too: nobody grants more than they hold (an admin cannot make anyone
owner, nor change or remove an owner), the last owner can be neither demoted nor removed,
and each change fires its `member.*` event once. A removed member's sessions end in the same
transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable

from quart import Blueprint, redirect, request
from quart_schema import hide

from service import passwords
from service.actors.sessions import ABSOLUTE
from service.errors import ApiError
from service.http.auth import node, principal
from service.http.browser import SESSION_COOKIE, csrf_protected, page, page_session, set_cookie, throttle
from service.http.dashboard import show
from service.http.pages import PageError
from service.roles import ROLE_NAMES, allows
from service.storage import accounts as accounts_sql
from service.storage import identity as identity_sql
from service.storage import sessions as sessions_sql

bp = Blueprint("account", __name__)


def members(org_id: str) -> list[dict]:
    return accounts_sql.active_members(node().store, org_id)


@bp.get("/account")
@hide
@page()
async def account():
    p = principal()
    s = page_session()
    linked = {row["issuer"] for row in identity_sql.identities_of_person(node().store, s.email)}
    providers = [(k, prov.name, prov.config.issuer in linked) for k, prov in node().oidc.items()]
    has_password = sessions_sql.password_hash(node().store, s.email) is not None
    return show("account.html", title="Account", members=members(p.org_id), roles=ROLE_NAMES,
                  can_manage=allows(p.role, "users:update"), providers=providers, me=p.user_id,
                  has_password=has_password)


async def _ask(call: Awaitable[object]) -> None:
    try:
        await call
    except ApiError as e:
        raise PageError(e.status, "Not changed", e.message) from None


@bp.post("/account/password")
@hide
@csrf_protected
@page(waiting_ok=True)
async def change_password():
    """Set or change the person's password: every session of theirs ends, this browser gets a
    new one. A person who has a password must give it; one who signed in only through a
    provider sets a first one."""
    form = await request.form
    s = page_session()
    svc = node()
    throttle(s.email)
    existing = sessions_sql.password_hash(svc.store, s.email)
    if existing is not None and not await passwords.verify(existing, form.get("current_password", "")):
        raise PageError(401, "Password not changed", "The current password is not correct.")
    problem = passwords.weakness(form.get("new_password", ""))
    if problem:
        raise PageError(422, "Password not changed", problem)
    hashed = await passwords.hash_password(form["new_password"])
    out = await svc.sessions.set_password(s.email, hashed, s.user_id, s.org_id, had_password=existing is not None)
    resp = redirect("/account", 303)
    set_cookie(resp, SESSION_COOKIE, out["token"], int(ABSOLUTE))
    return resp


@bp.post("/account/identities/<key>/unlink")
@hide
@csrf_protected
@page(waiting_ok=True)
async def unlink_identity(key: str):
    """Unlink a provider account from the signed-in person (a mail tells them); refused when
    it is their only way to sign in."""
    provider = node().oidc.get(key)
    if provider is None:
        raise PageError(404, "Not unlinked", "This identity provider is not configured.")
    s = page_session()
    await _ask(node().accounts.unlink_identity(s.email, provider.config.issuer))
    return redirect("/account", 303)


@bp.post("/account/members/<user_id>/role")
@hide
@csrf_protected
@page("users:update")
async def change_role(user_id: str):
    role = (await request.form).get("role", "")
    await _ask(node().accounts.change_role(principal().org_id, user_id, role, caller_role=principal().role))
    return redirect("/account", 303)


@bp.post("/account/members/<user_id>/remove")
@hide
@csrf_protected
@page("users:delete")
async def remove_member(user_id: str):
    await _ask(node().accounts.remove_member(principal().org_id, user_id, caller_role=principal().role))
    return redirect("/account", 303)
