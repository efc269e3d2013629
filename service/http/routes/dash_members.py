"""Members page (`/members`): the organization's members with their roles and pending
invitations; invite, resend, change a role, remove, following the spec's rules through the
accounts actor with the person's role as the caller: nobody grants more than they hold (an
admin cannot make an owner), only an owner changes or removes an owner, the last owner stays.

An invitation's link goes only by mail to the invited address: it is never shown to the
person who invites (whoever holds the link of a new address chooses its first password).
Without SMTP the mail, link included, is written to the node's log, which only the operator
reads (docs/people.md)."""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.errors import ApiError, Forbidden
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.dashboard import show
from service.roles import ROLE_NAMES, within
from service.storage import accounts as accounts_sql

bp = Blueprint("dash_members", __name__)


def members_page(status: int = 200, **ctx):
    svc, p = node(), principal()
    members = accounts_sql.active_members(svc.store, p.org_id)
    pending = accounts_sql.pending_invitations(svc.store, p.org_id)
    grantable = [r for r in ROLE_NAMES if within(r, p.role)]
    return show("members.html", status, title="Members", members=members, pending=pending, grantable=grantable,
                me=p.user_id, now=svc.clock.iso_now(), **ctx)


@bp.get("/members")
@hide
@page("users:read")
async def members():
    return members_page()


def sent(out: dict) -> dict:
    """What the page says of a made or resent invitation: never its token or link."""
    return {"email": out["email"], "role": out["role"], "expires_at": out["expires_at"],
            "by_mail": node().settings.smtp_host is not None}


@bp.post("/members/invite")
@hide
@page("users:create")
@csrf_protected
async def invite():
    form = await request.form
    return await forms.once(form, lambda: send_invitation(form), "/members")


async def send_invitation(form):
    p = principal()
    email, role = form.get("email", "").strip(), form.get("role", "")
    try:
        if role in ROLE_NAMES and not within(role, p.role):
            raise Forbidden("You cannot grant a broader role than your own.", {"role": role})
        out = await node().accounts.invite(p.org_id, email, role)
    except ApiError as e:
        return members_page(e.status, error=e.message)
    forms.notify(None, invited=sent(out))  # never the link: it goes only by mail
    return redirect("/members", 303)


@bp.post("/members/invitations/<invitation_id>/resend")
@hide
@page("users:create")
@csrf_protected
async def resend(invitation_id: str):
    form = await request.form
    return await forms.once(form, lambda: resend_invitation(invitation_id), "/members")


async def resend_invitation(invitation_id: str):
    p = principal()
    row = accounts_sql.get_invitation(node().store, p.org_id, invitation_id)
    if row is not None and not within(row["role"], p.role):
        return members_page(403, error="You cannot grant a broader role than your own.")
    try:
        out = await node().accounts.resend_invite(p.org_id, invitation_id)
    except ApiError as e:
        return members_page(e.status, error=e.message)
    forms.notify(None, invited=sent(out))  # never the link: it goes only by mail
    return redirect("/members", 303)


@bp.post("/members/<user_id>/role")
@hide
@page("users:update")
@csrf_protected
async def change_role(user_id: str):
    role = (await request.form).get("role", "")
    try:
        await node().accounts.change_role(principal().org_id, user_id, role, caller_role=principal().role)
    except ApiError as e:
        return members_page(e.status, error=e.message)
    forms.notify(f"Role changed to {role}.")
    return redirect("/members", 303)


@bp.post("/members/<user_id>/remove")
@hide
@page("users:delete")
@csrf_protected
async def remove(user_id: str):
    try:
        await node().accounts.remove_member(principal().org_id, user_id, caller_role=principal().role)
    except ApiError as e:
        return members_page(e.status, error=e.message)
    forms.notify("Member removed.")
    return redirect("/members", 303)
