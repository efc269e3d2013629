"""Invitations and members of one organization are one person per address: inviting, adding
or accepting for an address that is already an active member is 409 (a second membership
would give the person two roles at once); and invitation mails to one address are bounded
(at most 5 a day from one organization, invite and resend alike), so an inviter cannot
flood a mailbox. Time moves on trio's mock clock only."""

from __future__ import annotations

from conftest import err, j
from service.actors.accounts.invite_rules import ALREADY_MEMBER, INVITE_MAILS_PER_DAY, TOO_MANY_INVITES


async def invite(node, org_id, email, role="member"):
    return await node.op("POST", f"/organizations/{org_id}/invitations", {"email": email, "role": role})


async def test_invite_of_an_active_member_is_409(node):
    org = await node.create_org()
    oid = org["organization_id"]
    r = await invite(node, oid, "OWNER@acme.test", "admin")
    assert r.status_code == 409
    assert err(await j(r)) == {"code": "request.conflict", "message": ALREADY_MEMBER,
                               "details": {"email": "OWNER@acme.test"}}
    assert node.store.scalar("SELECT count(*) FROM invitations") == 0


async def test_operator_add_of_an_active_member_is_409(node):
    org = await node.create_org()
    oid = org["organization_id"]
    r = await node.op("POST", f"/organizations/{oid}/members", {"email": "owner@acme.test", "role": "admin"})
    assert r.status_code == 409
    assert err(await j(r)) == {"code": "request.conflict", "message": ALREADY_MEMBER,
                               "details": {"email": "owner@acme.test"}}
    assert node.store.scalar("SELECT count(*) FROM users WHERE organization_id = ?", (oid,)) == 1


async def test_accept_after_joining_another_way_is_409(node):
    org = await node.create_org()
    oid = org["organization_id"]
    inv = (await j(await invite(node, oid, "pat@acme.test")))["data"]
    await node.add_member(oid, "read_only", "pat@acme.test")  # joined meanwhile
    r = await node.op("POST", "/invitations/accept", {"token": inv["token"]})
    assert r.status_code == 409
    assert err(await j(r)) == {"code": "request.conflict", "message": ALREADY_MEMBER,
                               "details": {"email": "pat@acme.test"}}
    assert node.store.scalar("SELECT count(*) FROM users WHERE email = 'pat@acme.test'") == 1


async def test_a_removed_member_may_be_invited_again(node):
    org = await node.create_org()
    oid = org["organization_id"]
    m = await node.add_member(oid, "member", "gone@acme.test")
    assert (await node.op("DELETE", f"/organizations/{oid}/members/{m['user_id']}")).status_code == 204
    assert (await invite(node, oid, "gone@acme.test")).status_code == 201


async def test_invitation_mails_bounded_per_address_and_day(node, autojump_clock):
    org = await node.create_org()
    oid = org["organization_id"]
    inv = (await j(await invite(node, oid, "target@mail.test")))["data"]
    resend = f"/organizations/{oid}/invitations/{inv['invitation_id']}/resend"
    for _ in range(INVITE_MAILS_PER_DAY - 1):
        assert (await node.op("POST", resend)).status_code == 200
    r = await node.op("POST", resend)
    assert r.status_code == 429 and r.headers["Retry-After"] == "86400"
    assert err(await j(r)) == {"code": "request.rate_limited", "message": TOO_MANY_INVITES,
                               "details": {"email": "target@mail.test", "retry_after": 86400}}
    r = await invite(node, oid, "TARGET@mail.test")  # a new invitation to the same mailbox counts too
    assert r.status_code == 429
    mails = node.store.scalar("SELECT count(*) FROM emails WHERE kind = 'invitation'")
    assert mails == INVITE_MAILS_PER_DAY
    other = await node.create_org(name="Other", email="o@other.test")  # another organization: its own count
    assert (await invite(node, other["organization_id"], "target@mail.test")).status_code == 201
    node.clock.advance(86400)
    assert (await node.op("POST", resend)).status_code == 200
