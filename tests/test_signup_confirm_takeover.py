"""An unconfirmed sign-up under someone else's address (pre-account hijack, M4) must neither
hand its chosen password to a person who exists by the time the link is followed, nor keep
the address's owner from accepting an invitation."""

from __future__ import annotations

import pytest
from smtp_server import link_in

from service.actors.accounts.invitations import INVALID_INVITE
from tests.pages import csrf, page
from tests.test_identity import (
    ATTACKER_PW,
    BAD,
    PW,
    invite_api,
    login,
    password_of,
    sign_up,
)

pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def confirm_link(smtp, email: str, org_name: str) -> str:
    mails = await smtp.wait_for(email)
    [mail] = [m for m in mails if org_name in m.get_body(("plain",)).get_content()]
    return link_in(mail, "http://testserver/confirm?token=").removeprefix("http://testserver")


async def test_confirming_an_attackers_sign_up_gives_no_password_to_an_existing_person(mail_node, smtp):
    """The victim (or their mail scanner) opening the confirmation mail of a sign-up they
    never made must not let its maker's password into the victim's other organizations."""
    node, email = mail_node, "ceo@prodvictim.test"
    assert (await sign_up(node.app.test_client(), email, ATTACKER_PW, "Attacker Org")).status_code == 200
    link = await confirm_link(smtp, email, "Attacker Org")
    await node.create_org(name="ProdVictim", email=email)  # the operator's owner: no password yet
    r = await node.app.test_client().get(link)
    assert r.status_code == 200 and "Email confirmed" in await r.get_data(as_text=True)
    assert password_of(node, email) is None
    r, text = await login(node.app.test_client(), email, ATTACKER_PW)
    assert r.status_code == 401 and BAD in text


async def test_an_unconfirmed_sign_up_does_not_block_an_invitation(mail_node, smtp):
    node, email = mail_node, "new@victim.test"
    assert (await sign_up(node.app.test_client(), email, ATTACKER_PW, "Attacker Org")).status_code == 200
    org = await node.create_org(name="Real Org", email="boss@real.test")
    inv = await invite_api(node, org["organization_id"], email)
    client = node.app.test_client()
    r, html = await page(client, f"/invitations/accept?token={inv['token']}")
    assert r.status_code == 200 and 'name="password"' in html and "minlength" in html  # a new address
    r = await client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                       "password": PW})
    assert r.status_code == 303
    assert (await login(node.app.test_client(), email, PW))[0].status_code == 303
    r = await node.app.test_client().get(f"/invitations/accept?token={inv['token']}")
    assert r.status_code == 404 and INVALID_INVITE in await r.get_data(as_text=True)
    # the attacker's link, followed later, changes nothing of the person's password
    before = password_of(node, email)
    assert (await node.app.test_client().get(await confirm_link(smtp, email, "Attacker Org"))).status_code == 200
    assert password_of(node, email) == before
