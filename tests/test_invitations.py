"""Invitations through the operator API: member.invited on invite and resend, a resend
invalidates the previous link, a link is valid 14 days (service clock), accepting makes a
joined member (member.joined) once."""

import json

from service.actors.accounts.actor import INVALID_INVITE
from conftest import j


def member_events(node, org_id):
    rows = node.store.all("SELECT event, data FROM events WHERE organization_id = ? AND event LIKE 'member.%' "
                          "ORDER BY seq", (org_id,))
    return [(r["event"], json.loads(r["data"])) for r in rows]


async def invite(node, org_id, email="new@acme.test", role="member"):
    r = await node.op("POST", f"/organizations/{org_id}/invitations", {"email": email, "role": role})
    assert r.status_code == 201, await j(r)
    return (await j(r))["data"]


async def accept(node, token):
    return await node.op("POST", "/invitations/accept", {"token": token})


async def test_invite_resend_accept(node):
    org = await node.create_org()
    oid = org["organization_id"]
    inv = await invite(node, oid)
    base = {"member_id": inv["member_id"], "member_email": "new@acme.test", "role": "member",
            "organization_id": oid}
    assert member_events(node, oid) == [("member.invited", base)]
    again = (await j(await node.op("POST", f"/organizations/{oid}/invitations/{inv['invitation_id']}/resend")))
    again = again["data"]
    assert again["token"] != inv["token"] and again["member_id"] == inv["member_id"]
    assert member_events(node, oid) == [("member.invited", base)] * 2
    r = await accept(node, inv["token"])  # the replaced link
    assert r.status_code == 404
    assert (await j(r))["error"]["message"] == INVALID_INVITE
    r = await accept(node, again["token"])
    assert r.status_code == 201
    joined = (await j(r))["data"]
    assert joined["user_id"] == inv["member_id"]
    assert (await node.call("GET", "/v1/projects", joined["api_key"])).status_code == 200
    assert member_events(node, oid)[-1] == ("member.joined", base)
    assert (await accept(node, again["token"])).status_code == 404  # once
    r = await node.op("POST", f"/organizations/{oid}/invitations/{inv['invitation_id']}/resend")
    assert r.status_code == 404  # accepted: nothing to resend


async def test_link_valid_14_days(node, autojump_clock):
    org = await node.create_org()
    inv = await invite(node, org["organization_id"])
    late = await invite(node, org["organization_id"], "late@acme.test")
    node.clock.advance(14 * 86400 - 1)
    assert (await accept(node, inv["token"])).status_code == 201
    node.clock.advance(1)
    r = await accept(node, late["token"])
    assert r.status_code == 404 and (await j(r))["error"]["message"] == INVALID_INVITE


async def test_invite_rejects_unknown_role_and_org(node):
    org = await node.create_org()
    r = await node.op("POST", f"/organizations/{org['organization_id']}/invitations",
                      {"email": "x@y.test", "role": "god"})
    assert r.status_code == 422
    r = await node.op("POST", "/organizations/00000000-0000-4000-8000-000000000000/invitations",
                      {"email": "x@y.test", "role": "member"})
    assert r.status_code == 404
    assert node.store.scalar("SELECT count(*) FROM invitations") == 0


async def test_token_stored_as_digest_only(node):
    org = await node.create_org()
    inv = await invite(node, org["organization_id"])
    raw = b"".join(p.read_bytes() for p in node.parts.settings.data_dir.glob("genservice.db*"))
    assert inv["token"].encode() not in raw
