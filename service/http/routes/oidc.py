"""Sign-in with an OpenID Connect provider: `POST /login/oidc/<key>` starts it (CSRF-checked
form, the login page's "Sign in with NAME" button), `GET /login/oidc/<key>/callback` ends it.

The flow's `state` goes to the provider and into a short-lived HttpOnly cookie; the callback
must bring back the same `state` in the query and the cookie, and the flow row is used once.
What the callback does with the checked ID token, in this order:

1. (issuer, subject) already linked: log that person in (a removed member cannot).
2. The flow accepts an invitation: the provider's email must be verified and be the invited
   email; the invitation is accepted and the identity linked, in one transaction.
3. The flow was started by a logged-in person: the identity is linked to them.
4. Otherwise a new person: the email must be verified and not belong to anyone yet (an
   identity is never linked on the email alone: an existing person logs in with their
   password and links the provider from there); sign-up must be open. A new organization
   is made, waiting for approval, with the person as owner.
"""

from __future__ import annotations

import hmac
from typing import NoReturn

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.actors.accounts import Identity
from service.actors.sessions import ABSOLUTE, FLOW_TTL
from service.errors import Conflict, Forbidden, NotFound
from service.http.auth import node
from service.http.browser import (SESSION_COOKIE, csrf_protected, current_session, safe_next, session_token,
                                  set_cookie)
from service.http.pages import PageError
from service.net.oidc import OidcError, OidcProvider, pkce_verifier
from service.storage import accounts as accounts_sql
from service.storage import sessions as sql
from service.storage.logins import email_taken

bp = Blueprint("oidc", __name__)

FLOW_COOKIE = "gs_oidc"
NO_MATCH = "This sign-in could not be matched to this browser, or it took too long. Start again."


def _provider(key: str) -> OidcProvider:
    provider = node().oidc.get(key)
    if provider is None:
        raise PageError(404, "Unknown provider", "This identity provider is not configured.")
    return provider


def redirect_uri(key: str) -> str:
    return f"{node().settings.public_base_url}/login/oidc/{key}/callback"


def refuse(status: int, message: str) -> NoReturn:
    raise PageError(status, "Sign-in failed", message)


@bp.post("/login/oidc/<key>")
@hide
@csrf_protected
async def start(key: str):
    provider = _provider(key)
    form = await request.form
    invitation = form.get("invitation") or None
    s = current_session()
    flow = await node().sessions.begin_flow(
        provider=key, next_path=safe_next(form.get("next")),
        invitation_hash=sql.digest(invitation) if invitation else None,
        link_user_id=s.user_id if s is not None and invitation is None else None)
    try:
        url = await provider.authorization_url(redirect_uri(key), flow["state"], flow["nonce"],
                                               pkce_verifier(node().page_secret, flow["state"]))
    except OidcError as e:
        refuse(502, str(e))
    resp = redirect(url, 303)
    set_cookie(resp, FLOW_COOKIE, flow["state"], int(FLOW_TTL))
    return resp


@bp.get("/login/oidc/<key>/callback")
@hide
async def callback(key: str):
    provider = _provider(key)
    svc = node()
    state = request.args.get("state", "")
    cookie = request.cookies.get(FLOW_COOKIE, "")
    if not state or not cookie or not hmac.compare_digest(state, cookie):
        refuse(400, NO_MATCH)
    flow = await svc.sessions.take_flow(state)
    if flow is None or flow["provider"] != key:
        refuse(400, NO_MATCH)
    if request.args.get("error"):
        refuse(400, f"The sign-in with {provider.name} was cancelled or refused.")
    code = request.args.get("code")
    if not code:
        refuse(400, f"{provider.name} sent no authorization code. Start again.")
    try:
        claims = await provider.exchange(code, pkce_verifier(svc.page_secret, state), redirect_uri(key),
                                         flow["nonce_hash"])
    except OidcError as e:
        refuse(401, str(e))
    user_id, org_id = await _person(provider, claims, flow)
    out = await svc.sessions.start_session(user_id, org_id, session_token())
    resp = redirect(flow["next_path"], 303)
    set_cookie(resp, SESSION_COOKIE, out["token"], int(ABSOLUTE))
    resp.delete_cookie(FLOW_COOKIE, path="/", httponly=True, samesite="Lax")
    return resp


def _verified_email(provider: OidcProvider, claims: dict) -> str:
    email = claims.get("email")
    if claims.get("email_verified") is not True or not isinstance(email, str) or "@" not in email:
        refuse(403, f"Your {provider.name} account has no verified email address. Verify it with "
                    f"{provider.name} and try again.")
    return email.strip()


async def _person(provider: OidcProvider, claims: dict, flow: dict) -> tuple[str, str]:
    """The (user_id, organization_id) this sign-in logs in as, linking or creating as needed."""
    svc = node()
    issuer, subject = provider.config.issuer, str(claims["sub"])
    linked = sql.identity(svc.store, issuer, subject)
    if linked is not None and flow["invitation_hash"] is None:
        if not linked["is_active"]:
            refuse(403, "Your membership of this organization has ended.")
        return linked["user_id"], linked["organization_id"]
    if flow["invitation_hash"] is not None:
        email = _verified_email(provider, claims)
        try:
            out = await svc.accounts.accept_invite(
                token_hash=flow["invitation_hash"], identity=Identity(issuer, subject, email))
        except (NotFound, Forbidden, Conflict) as e:
            refuse(e.status, e.message)
        return out["user_id"], out["organization_id"]
    if flow["link_user_id"] is not None:
        row = accounts_sql.membership(svc.store, flow["link_user_id"])
        if row is None or not row["is_active"]:
            refuse(403, "Your membership of this organization has ended.")
        try:
            await svc.accounts.link_identity(flow["link_user_id"], Identity(
                issuer, subject, claims.get("email") if claims.get("email_verified") is True else None))
        except Conflict as e:
            refuse(409, e.message)
        return flow["link_user_id"], row["organization_id"]
    email = _verified_email(provider, claims)
    if email_taken(svc.store, email):
        refuse(409, f"An account with this email address already exists. Log in with your password, "
                    f"then link {provider.name} from your account page.")
    if svc.settings.signup != "open":
        refuse(403, "Sign-up is by invitation only.")
    given = claims.get("name")
    name = given if isinstance(given, str) and given.strip() else email
    try:
        out = await svc.accounts.create_org(name=f"{name.strip()[:80]}", owner_email=email,
                                            approved=False,
                                            identity=Identity(issuer, subject, email))
    except Conflict as e:
        refuse(409, e.message)
    return out["owner_user_id"], out["organization_id"]
