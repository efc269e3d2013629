"""The invitation page's URL and form carry its token: like the reset page, no Referer with
the token leaves this site (`Referrer-Policy: same-origin`), on the page and its error answers."""

from __future__ import annotations

import pytest

from tests.pages import csrf, page
from tests.test_login import invite, with_password

pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def test_invitation_page_sends_same_origin_referrer_policy(node):
    org = await node.create_org()
    inv = await invite(node, org["organization_id"])
    r, html = await page(node.client, f"/invitations/accept?token={inv['token']}")
    assert r.status_code == 200 and r.headers["Referrer-Policy"] == "same-origin"
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                            "password": "too short"})
    text = await r.get_data(as_text=True)
    assert r.status_code == 422 and "The password must be at least 12 characters long." in text
    assert inv["token"] in text and r.headers["Referrer-Policy"] == "same-origin"


async def test_invitation_wrong_password_answer_sends_the_policy(node):
    await with_password(node, "multi@acme.test")
    other = await node.create_org(name="Other", email="boss@other.test")
    inv = await invite(node, other["organization_id"], "multi@acme.test", "admin")
    _, html = await page(node.client, f"/invitations/accept?token={inv['token']}")
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                            "password": "not my password"})
    text = await r.get_data(as_text=True)
    assert r.status_code == 401 and "The password is not the one of your account." in text
    assert inv["token"] in text and r.headers["Referrer-Policy"] == "same-origin"
