"""The sign-in pages share the dashboard's look and never strand a person: each is the public
header plus one card (static/auth-1.css), each offers a way on inside the page, `/account`
is a dashboard page with its sections, and the waiting page lets a person log out."""

from __future__ import annotations

import re

import pytest

from service import passwords
from service.actors.sessions import SetPassword
from tests.pages import csrf, page

PW = "correct horse battery"
CARD = '<div class="auth">'
STYLE = '<link rel="stylesheet" href="/static/auth-1.css">'

pytestmark = pytest.mark.usefixtures("cheap_hashes")


def main_part(html: str) -> str:
    return html.split('<main id="main">', 1)[1].split("</main>", 1)[0]


def links_in(html: str) -> list[str]:
    return re.findall(r'<a[^>]* href="([^"#][^"]*)"', html)


async def log_in(node, email: str, org: dict, user_id: str | None = None) -> None:
    await node.parts.sessions.ask("sessions", SetPassword(email, await passwords.hash_password(PW),
                                                          user_id or org["owner_user_id"], org["organization_id"]))
    _, html = await page(node.client, "/login")
    r = await node.client.post("/login", form={"csrf_token": csrf(html), "email": email, "password": PW})
    assert r.status_code == 303 and r.headers["Location"] == "/studio"


@pytest.mark.parametrize("path,heading,onward", [
    ("/login", "Log in", ["/forgot-password", "/signup"]),
    ("/signup", "Sign up", ["/login"]),
    ("/forgot-password", "Forgot your password?", ["/login"]),
])
async def test_each_sign_in_page_is_a_card_with_a_way_on(node, path, heading, onward):
    r, html = await page(node.client, path)
    assert r.status_code == 200
    assert STYLE in html and '<link rel="stylesheet" href="/static/dash-2.css">' in html
    assert f"{CARD}\n<h1>{heading}</h1>" in html
    inside = links_in(main_part(html))
    assert all(link in inside for link in onward), inside
    assert 'href="/"' in html  # the header leads to the front page


async def test_a_closed_node_offers_no_sign_up_on_the_login_page(nursery, tmp_path):
    from conftest import start_node, stop_node

    node = await start_node(nursery, tmp_path, signup="closed")
    _, html = await page(node.client, "/login")
    assert "/signup" not in html
    await stop_node(node)


async def test_account_is_a_dashboard_page_with_a_way_into_studio(node):
    org = await node.create_org(email="owner@acme.test")
    await log_in(node, "owner@acme.test", org)
    r, html = await page(node.client, "/account")
    assert r.status_code == 200
    assert '<nav aria-label="Sections">' in html and 'href="/studio"' in main_part(html)
    assert '<a href="/keys"' in html and '<a href="/billing"' in html


async def test_waiting_page_lets_the_person_leave_or_come_back(node):
    org = await node.create_org(name="Held", email="held@acme.test", approved=False)
    await log_in(node, "held@acme.test", org)
    r, html = await page(node.client, "/studio")
    assert r.status_code == 403 and "<h1>Waiting for approval</h1>" in html and CARD in html
    inside = main_part(html)
    assert '<a class="button" href="/studio">Open Studio</a>' in inside
    assert 'action="/logout"' in inside and 'href="/"' in inside
    r = await node.client.post("/logout", form={"csrf_token": csrf(html)})
    assert r.status_code == 303 and r.headers["Location"] == "/login"


async def test_login_page_tells_a_signed_in_person_where_to_go_on(node):
    org = await node.create_org(email="owner@acme.test")
    await log_in(node, "owner@acme.test", org)
    _, html = await page(node.client, "/login?next=/billing")
    assert 'You are logged in as owner@acme.test. <a href="/billing">Continue</a>' in html
    # the public header of a signed-in person: Studio and Log out, no Log in
    header = html.split("<header", 1)[1].split("</header>", 1)[0]
    assert 'href="/studio"' in header and 'action="/logout"' in header and 'href="/login"' not in header


async def test_a_notice_without_a_button_still_leads_on(node):
    _, html = await page(node.client, "/forgot-password")
    r = await node.client.post("/forgot-password", form={"csrf_token": csrf(html), "email": "x@acme.test"})
    body = await r.get_data(as_text=True)
    assert r.status_code == 200 and "<h1>Check your email</h1>" in body
    assert links_in(main_part(body)) == ["/", "/login"]
