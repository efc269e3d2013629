"""The operator API under /operator/v1 (operations.md), with the operator bearer token.

Billing and test-mode routes of the operator live beside their features
(`operator_billing`, ...); this module has organizations and members.
"""

from __future__ import annotations

from functools import wraps

from pydantic import Field
from quart import Blueprint, request
from quart_schema import hide

from service.http.auth import constant_time_equal, node
from service.http.errors import AuthFailure
from service.http.schemas import Body, body

bp = Blueprint("operator", __name__)


def operator(func):
    """Require the operator token; test-mode-only routes pass `test_only=True` to `operator_route`."""

    @wraps(func)
    async def wrapper(*args, **kwargs):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        expected = node().settings.operator_token or ""
        if scheme.lower() != "bearer" or not expected or not constant_time_equal(token.strip(), expected):
            raise AuthFailure(401)
        return await func(*args, **kwargs)

    return hide(wrapper)


class OrgCreate(Body):
    name: str
    owner_email: str
    approved: bool = True


class MemberAdd(Body):
    email: str
    role: str = Field(description="owner, admin, member or read_only")


class MemberUpdate(Body):
    role: str


class InviteBody(Body):
    email: str
    role: str


class AcceptBody(Body):
    token: str


@bp.post("/operator/v1/organizations")
@operator
@body(OrgCreate)
async def create_org(data: OrgCreate):
    out = await node().accounts.create_org(data.name, data.owner_email, data.approved)
    if data.approved:
        await node().balances.on_approved(out["organization_id"])
    return {"data": out}, 201


@bp.post("/operator/v1/organizations/<org_id>/approve")
@operator
async def approve_org(org_id: str):
    out = await node().accounts.approve_org(org_id)
    await node().balances.on_approved(org_id)
    return {"data": out}


@bp.post("/operator/v1/organizations/<org_id>/members")
@operator
@body(MemberAdd)
async def add_member(org_id: str, data: MemberAdd):
    return {"data": await node().accounts.add_member(org_id, data.email, data.role)}, 201


@bp.patch("/operator/v1/organizations/<org_id>/members/<user_id>")
@operator
@body(MemberUpdate)
async def change_role(org_id: str, user_id: str, data: MemberUpdate):
    return {"data": await node().accounts.change_role(org_id, user_id, data.role)}


@bp.delete("/operator/v1/organizations/<org_id>/members/<user_id>")
@operator
async def remove_member(org_id: str, user_id: str):
    await node().accounts.remove_member(org_id, user_id)
    return "", 204


@bp.post("/operator/v1/organizations/<org_id>/invitations")
@operator
@body(InviteBody)
async def invite(org_id: str, data: InviteBody):
    """Invite a member: fires `member.invited`; the answer carries the link's token once (valid
    14 days on the service clock). The dashboard's email delivery is outside this node."""
    return {"data": await node().accounts.invite(org_id, data.email, data.role)}, 201


@bp.post("/operator/v1/organizations/<org_id>/invitations/<invitation_id>/resend")
@operator
async def resend_invite(org_id: str, invitation_id: str):
    """A new link (14 days); the previous one stops working. Fires `member.invited` again."""
    return {"data": await node().accounts.resend_invite(org_id, invitation_id)}


@bp.post("/operator/v1/invitations/accept")
@operator
@body(AcceptBody)
async def accept_invite(data: AcceptBody):
    """The invited person accepts: a joined member with a new key; fires `member.joined`."""
    return {"data": await node().accounts.accept_invite(data.token)}, 201


@bp.post("/operator/v1/node-key/rotate")
@operator
async def rotate_node_key():
    """A new node key; every stored webhook secret re-sealed with it (service/sealing.py)."""

    return {"data": await node().webhook_delivery.rotate_node_key()}
