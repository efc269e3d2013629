"""Sign-in with an OpenID Connect provider: `POST /login/oidc/<key>` starts it (CSRF-checked
form, the login page's "Sign in with NAME" button), `GET /login/oidc/<key>/callback` ends it.

The flow's `state` goes to the provider and into a short-lived HttpOnly cookie; the callback
must bring back the same `state` in the query and the cookie, and the flow row is used once.
What the callback does with the checked ID token, in this order:

1. (issuer, subject) already linked: log that person in, as a person (one identity across
   organizations: several memberships go to the switcher; none left is refused).
2. The flow accepts an invitation: the provider's email must be verified and be the invited
   email. A brand-new address: the invitation is accepted and the identity linked, in one
   transaction. An existing person: only an identity already linked to them accepts (an
   invitation never links a provider to someone who exists).
3. The flow was started by a logged-in person: the identity is linked to them (a mail tells
   them).
4. Otherwise a new person: the email must be verified, have the shape of one address and not
   belong to anyone yet (an identity is never linked on the email alone: an existing person
   logs in with their password and links the provider from there); sign-up must be open. A
   new organization is made, waiting for approval, with the person as owner.
"""

from __future__ import annotations

import hmac
from typing import NoReturn

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.actors.accounts.member_rules import Identity
from service.actors.accounts.org_rules import has_control
from service.actors.sessions import FLOW_TTL
from service.errors import Conflict, Forbidden, NotFound, Unprocessable
from service.http.auth import node
from service.http.browser import csrf_protected, current_session, safe_next, set_cookie
from service.http.pages import PageError
from service.http.signin import enter, sign_in
from service.mail.addresses import valid_address
from service.net.oidc import OidcError, OidcProvider, pkce_verifier
from service.storage import accounts as accounts_sql
from service.storage import identity as identity_sql
from service.storage import sessions as sql

bp = Blueprint("oidc", __name__)

FLOW_COOKIE = "gs_oidc"
NO_MATCH = "This sign-in could not be matched to this browser, or it took too long. Start again."
ENDED = "Your membership of this organization has ended."


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
    person_email, user_id, org_id = await _person(provider, claims, flow)
    if user_id is not None and org_id is not None:
        resp = await enter(user_id, org_id, flow["next_path"])
    else:
        resp = await sign_in(person_email, flow["next_path"])
        if resp is None:
            refuse(403, ENDED)
    set_cookie(resp, FLOW_COOKIE, "", 0)  # cleared with the flags it was set with (Secure behind https)
    return resp


def provider_email(claims: dict) -> str | None:
    """The provider's email when it says it verified it and it has the shape of one address."""
    email = claims.get("email")
    if claims.get("email_verified") is not True or not isinstance(email, str):
        return None
    email = email.strip()
    return email if valid_address(email) else None


def _verified_email(provider: OidcProvider, claims: dict) -> str:
    email = claims.get("email")
    if claims.get("email_verified") is not True or not isinstance(email, str):
        refuse(403, f"Your {provider.name} account has no verified email address. Verify it with "
                    f"{provider.name} and try again.")
    checked = provider_email(claims)
    if checked is None:
        refuse(403, f"The email address of your {provider.name} account is not one this service can use. "
                    f"Log in with your password instead.")
    return checked


async def _person(provider: OidcProvider, claims: dict, flow: dict) -> tuple[str, str | None, str | None]:
    """(person's email, user_id, organization_id) this sign-in logs in as, linking or creating
    as needed; the ids are None when the person is to pick among their organizations."""
    svc = node()
    issuer, subject = provider.config.issuer, str(claims["sub"])
    linked = identity_sql.identity_person(svc.store, issuer, subject)
    if linked is not None and flow["invitation_hash"] is None:
        return linked["email"], None, None  # the person, whichever membership the link was made in
    if flow["invitation_hash"] is not None:
        email = _verified_email(provider, claims)
        try:
            out = await svc.accounts.accept_invite(
                token_hash=flow["invitation_hash"], identity=Identity(issuer, subject, email))
        except (NotFound, Forbidden, Conflict) as e:
            refuse(e.status, e.message)
        return email, out["user_id"], out["organization_id"]
    if flow["link_user_id"] is not None:  # a signed-in person links their own account
        row = accounts_sql.membership(svc.store, flow["link_user_id"])
        if row is None or not row["is_active"]:
            refuse(403, ENDED)
        try:
            await svc.accounts.link_identity(flow["link_user_id"], Identity(issuer, subject, provider_email(claims)))
        except Conflict as e:
            refuse(409, e.message)
        return "", flow["link_user_id"], row["organization_id"]
    email = _verified_email(provider, claims)
    if identity_sql.person_known(svc.store, email):
        refuse(409, f"An account with this email address already exists. Log in with your password, "
                    f"then link {provider.name} from your account page.")
    if svc.settings.signup != "open":
        refuse(403, "Sign-up is by invitation only.")
    given = claims.get("name")
    name = " ".join("".join(c for c in given if not has_control(c)).split())[:80] if isinstance(given, str) else ""
    try:
        out = await svc.accounts.create_org(name=name or email, owner_email=email,
                                            approved=False,
                                            identity=Identity(issuer, subject, email))
    except (Conflict, Unprocessable) as e:
        refuse(e.status, e.message)
    return email, out["owner_user_id"], out["organization_id"]
