"""`GET /invitations/accept?token=`: the page an invitation mail links to.

The invited person accepts by choosing a password or through an identity provider ("Sign in
with NAME"; the provider's verified email must be the invited one). Either way the accounts
actor accepts once (`member.joined` once); an unknown, used, replaced (resent) or expired
link is a 404 page with the reason.
"""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import hide

from service.actors.accounts import INVALID_INVITE
from service.http.auth import node
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
    providers = [(p.config.key, p.name) for p in node().oidc.values()]
    return render("invitation.html", title="Accept invitation", inv=inv, token=token, providers=providers,
                  error=None)
