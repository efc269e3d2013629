"""`GET /invitations/accept?token=`: the page an invitation mail links to.

An invitation never changes the credentials of a person who already exists (any membership
or a password under the invited address): they accept signed in as themselves, with the
session they have, with their password on this page (a login), or through a provider
account already linked to them. Only a brand-new address chooses a password here or links
a provider, because the link itself came only by mail (it is never shown to the inviter).
The accounts actor checks the same rules in the acceptance's transaction, and accepts once
(`member.joined` once); an unknown, used, replaced (resent) or expired link is a 404 page.
"""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import hide

from service import passwords
from service.actors.accounts.invitations import EXISTING_PERSON, INVALID_INVITE, INVITE_EMAIL_MISMATCH
from service.errors import ApiError
from service.http.auth import node
from service.http.browser import HOME, current_session, csrf_protected, throttle
from service.http.pages import PageError, render
from service.http.routes.password_reset import SAME_ORIGIN_REFERRER
from service.http.signin import enter
from service.storage import identity as identity_sql
from service.storage import sessions as sql
from service.storage.logins import invitation_by_hash

bp = Blueprint("invitation_page", __name__)

SOMEONE_ELSE = ("You are signed in as {me}, and this invitation is for {email}. Log out, then open the "
                "invitation link again to accept it as {email}.")
NO_PASSWORD = ("You already have an account with this email address. Sign in with an identity provider "
               "linked to it, or get a password with \u201cForgot your password?\u201d on the login page "
               "(we mail you a link), then open this invitation again.")


def pending(token: str) -> dict:
    inv = invitation_by_hash(node().store, sql.digest(token), node().clock.iso_now()) if token else None
    if inv is None:
        raise PageError(404, "Invitation not valid", INVALID_INVITE)
    return inv


def same_person(a: str, b: str) -> bool:
    return a.lower() == b.lower()


@bp.get("/invitations/accept")
@hide
async def accept_page():
    token = request.args.get("token", "")
    return invitation_form(pending(token), token)


def invitation_form(inv: dict, token: str, status: int = 200, error: str | None = None):
    """The page for whoever opened the link: signed in as the invited person (one button),
    as someone else (log out first), an existing person (their password, or their linked
    provider), or a new address (a new password, or a provider)."""
    svc = node()
    s = current_session()
    providers = [(p.config.key, p.name) for p in svc.oidc.values()]
    state = "new"
    if s is not None:
        state = "signed_in" if same_person(s.email, inv["email"]) else "someone_else"
    elif sql.password_hash(svc.store, inv["email"]) is not None:
        state = "password"
    elif identity_sql.person_known(svc.store, inv["email"]):
        state = "no_password"
    notice = {"someone_else": SOMEONE_ELSE.format(me=s.email, email=inv["email"]) if s else "",
              "no_password": NO_PASSWORD}.get(state)
    # The URL and the form carry the token: the reset page's policy (see SAME_ORIGIN_REFERRER).
    return render("invitation.html", status, SAME_ORIGIN_REFERRER, title="Accept invitation", inv=inv, token=token,
                  state=state, providers=providers if state in ("new", "no_password", "password") else [],
                  error=error, notice=notice)


@bp.post("/invitations/accept")
@hide
@csrf_protected
async def accept():
    form = await request.form
    token, password = form.get("token", ""), form.get("password", "")
    inv = pending(token)
    svc = node()
    s = current_session()
    if s is not None and not same_person(s.email, inv["email"]):
        raise PageError(403, "Invitation not accepted", INVITE_EMAIL_MISMATCH)
    signed_in_email = s.email if s is not None else None
    password_hash = None
    if s is None:
        throttle(inv["email"])
        existing = sql.password_hash(svc.store, inv["email"])
        if existing is not None:  # an existing person: their password signs them in
            if not await passwords.verify(existing, password):
                return invitation_form(inv, token, 401, "The password is not the one of your account.")
            signed_in_email = inv["email"]
        elif identity_sql.person_known(svc.store, inv["email"]):
            return invitation_form(inv, token, 409, EXISTING_PERSON)
        else:
            problem = passwords.weakness(password)
            if problem:
                return invitation_form(inv, token, 422, problem)
            password_hash = await passwords.hash_password(password)
    try:
        out = await svc.accounts.accept_invite(token=token, signed_in_email=signed_in_email,
                                             password_hash=password_hash)
    except ApiError as e:
        raise PageError(e.status, "Invitation not accepted", e.message) from None
    return await enter(out["user_id"], out["organization_id"], HOME)
