"""`next` after a login goes only to a path on this site: every other shape lands on Studio,
so a link to /login cannot send a person who signs in to another site."""

from __future__ import annotations

import pytest

from service import passwords
from service.actors.sessions import SetPassword
from tests.pages import csrf, page
from tests.test_dashboard_http import PW

pytestmark = pytest.mark.usefixtures("cheap_hashes")

OFF_SITE = ["//evil.com", "/\\evil.com", "\\\\evil.com", "https:evil.com", "https://evil.com/x", "/\t/evil.com",
            "evil.com", "javascript:alert(1)", "///evil.com", " //evil.com"]


@pytest.mark.parametrize("target", OFF_SITE, ids=range(len(OFF_SITE)))
async def test_login_never_redirects_off_the_site(node, target):
    org = await node.create_org()
    await node.parts.sessions.ask("sessions", SetPassword("owner@acme.test", await passwords.hash_password(PW),
                                                          org["owner_user_id"], org["organization_id"]))
    _, html = await page(node.client, "/login")
    r = await node.client.post("/login", form={"csrf_token": csrf(html), "email": "owner@acme.test", "password": PW,
                                               "next": target})
    assert (r.status_code, r.headers["Location"]) == (303, "/studio")


async def test_login_keeps_a_path_on_the_site(node):
    org = await node.create_org()
    await node.parts.sessions.ask("sessions", SetPassword("owner@acme.test", await passwords.hash_password(PW),
                                                          org["owner_user_id"], org["organization_id"]))
    _, html = await page(node.client, "/login")
    r = await node.client.post("/login", form={"csrf_token": csrf(html), "email": "owner@acme.test", "password": PW,
                                               "next": "/keys?x=1"})
    assert (r.status_code, r.headers["Location"]) == (303, "/keys?x=1")
