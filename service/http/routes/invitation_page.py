"""`GET /invitations/accept?token=`: the page an invitation mail links to.

The invited person accepts by choosing a password or through an identity provider ("Sign in
with NAME"; the provider's verified email must be the invited one). Either way the accounts
actor accepts once (`member.joined` once); an unknown, used, replaced (resent) or expired
link is a 404 page with the reason.
"""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service import passwords
from service.actors.accounts import INVALID_INVITE
from service.actors.sessions import ABSOLUTE
from service.errors import Conflict, NotFound
from service.http.auth import node
from service.http.browser import HOME, SESSION_COOKIE, csrf_protected, session_token, set_cookie, throttle
from service.http.pages import PageError, render
from service.storage import sessions as sql
from service.storage.logins import invitation_by_hash

bp = Blueprint("invitation_page", __name__)


def pending(token: str) -> dict:
    inv = invitation_by_hash(node().store, sql.digest(token), node().clock.iso_now()) if token else None
    if inv is None:
        raise PageError(404, "Invitation not valid", INVALID_INVITE)
    return inv


@bp.get("/invitations/accept")
@hide
async def accept_page():
    token = request.args.get("token", "")
    inv = pending(token)
    return invitation_form(inv, token)


def invitation_form(inv: dict, token: str, status: int = 200, error: str | None = None):
    providers = [(p.config.key, p.name) for p in node().oidc.values()]
    existing = sql.password_hash(node().store, inv["email"]) is not None
    return render("invitation.html", status, title="Accept invitation", inv=inv, token=token,
                  providers=providers, error=error, password_form=True, existing=existing)


@bp.post("/invitations/accept")
@hide
@csrf_protected
async def accept():
    form = await request.form
    token, password = form.get("token", ""), form.get("password", "")
    inv = pending(token)
    throttle(inv["email"])
    svc = node()
    existing = sql.password_hash(svc.store, inv["email"])
    new_hash = None
    if existing is not None:  # the person already has a password (another membership): prove it
        if not await passwords.verify(existing, password):
            return invitation_form(inv, token, 401, "The password is not the one of your account.")
    else:
        problem = passwords.weakness(password)
        if problem:
            return invitation_form(inv, token, 422, problem)
        new_hash = await passwords.hash_password(password)
    try:
        out = await svc.accounts.accept_invite(token=token, password_hash=new_hash)
    except (NotFound, Conflict) as e:
        raise PageError(e.status, "Invitation not accepted", e.message) from None
    session = await svc.sessions.start_session(out["user_id"], out["organization_id"],
                                               session_token())
    resp = redirect(HOME, 303)
    set_cookie(resp, SESSION_COOKIE, session["token"], int(ABSOLUTE))
    return resp
