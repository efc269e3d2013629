"""Sign-up by email and password, end to end through the pages and a real SMTP server
(tests/smtp_server.py: STARTTLS with a test CA, AUTH): sign up -> confirmation mail ->
confirm -> pending list -> approve -> welcome mail -> log in -> the 200-credit signup lot.
Then every rejection with its exact status and message, and the time rules on trio's clock."""

from __future__ import annotations

import re

import pytest

from service import passwords
from service.actors.accounts.people import INVALID_CONFIRM
from service.mail.addresses import BAD_ADDRESS
from conftest import outboxes_settled
from smtp_server import html_part, link_in, text_part
from tests.pages import csrf, page

PW = "a long sign-up passphrase"


pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def sign_up(client, email, password=PW, organization="Lab One"):
    _, html = await page(client, "/signup")
    r = await client.post("/signup", form={"csrf_token": csrf(html), "email": email, "password": password,
                                           "organization": organization})
    return r, await r.get_data(as_text=True)


async def login(client, email, password=PW):
    _, html = await page(client, "/login")
    return await client.post("/login", form={"csrf_token": csrf(html), "email": email, "password": password})


def path_of(link: str) -> str:
    return link.removeprefix("http://testserver")


async def pending(node, status="pending"):
    r = await node.op("GET", f"/organizations?status={status}")
    assert r.status_code == 200
    return (await r.get_json())["data"]


async def test_sign_up_confirm_approve_log_in(mail_node, smtp):
    node, email = mail_node, "ada@signup.test"
    r, html = await page(node.client, "/signup")
    assert r.status_code == 200
    for label in ('<label for="email">Email</label>', '<label for="password">Password</label>',
                  '<label for="organization">Organization</label>', '<button type="submit">Sign up</button>'):
        assert label in html
    r, html = await sign_up(node.client, email)
    assert r.status_code == 200 and "Check your email" in html and "We sent a mail to ada@signup.test" in html
    [unconfirmed] = await pending(node, "unconfirmed")
    assert unconfirmed["name"] == "Lab One" and unconfirmed["owner_email"] == email
    assert await pending(node) == []

    [mail] = await smtp.wait_for(email)
    assert mail["Subject"] == "Confirm your email address"
    assert mail["From"] == "genservice@mail.test" and mail["To"] == email
    assert mail["Date"] and re.fullmatch(r"<[0-9a-f-]{36}@mail\.test>", mail["Message-ID"])
    assert smtp.handler.logins and smtp.handler.logins[-1] == ("mailer", True)  # AUTH after STARTTLS
    link = link_in(mail, "http://testserver/confirm?token=")
    assert f'href="{link}"' in html_part(mail)
    assert "Lab One" in text_part(mail)

    token = link.split("token=")[1]
    raw = b"".join(p.read_bytes() for p in node.parts.settings.data_dir.glob("genservice.db*"))
    assert token.encode() not in raw  # a digest in mail_tokens, the link sealed in the outbox row
    r = await node.client.get(path_of(link))
    body = await r.get_data(as_text=True)
    assert r.status_code == 200 and "Email confirmed" in body
    [org] = await pending(node)
    assert org["organization_id"] == unconfirmed["organization_id"] and org["status"] == "pending"
    assert org["confirmed_at"] is not None and org["approved_at"] is None

    r = await login(node.client, email)  # a confirmed person waiting for approval sees the waiting page
    assert r.status_code == 303
    r = await node.client.get("/account")
    assert r.status_code == 403 and "Waiting for approval" in await r.get_data(as_text=True)

    r = await node.op("POST", f"/organizations/{org['organization_id']}/approve")
    assert r.status_code == 200
    assert await pending(node) == []
    welcome = (await smtp.wait_for(email, 2))[1]
    assert welcome["Subject"] == "Your genservice organization is approved"
    assert "200.00 sign-up credits" in text_part(welcome) and "30 days" in text_part(welcome)
    assert "http://testserver/login" in text_part(welcome)

    r = await node.client.get("/account")
    assert r.status_code == 200 and email in await r.get_data(as_text=True)
    lots = node.store.all("SELECT source, amount_uc, expires_at FROM credit_lots WHERE organization_id = ?",
                          (org["organization_id"],))
    assert [(x["source"], x["amount_uc"]) for x in lots] == [("signup", 200_000_000)]
    # approving again grants nothing more and mails nothing more
    await node.op("POST", f"/organizations/{org['organization_id']}/approve")
    await outboxes_settled(node, real_time=True)
    assert len(smtp.messages(email)) == 2
    assert node.store.scalar("SELECT count(*) FROM credit_lots WHERE organization_id = ?",
                             (org["organization_id"],)) == 1


async def test_signup_lot_lasts_30_days(mail_node, smtp, mock_clock):
    node, email = mail_node, "lot@signup.test"
    await sign_up(node.client, email)
    [mail] = await smtp.wait_for(email)
    await node.client.get(path_of(link_in(mail, "http://testserver/confirm?token=")))
    [org] = await pending(node)
    await node.op("POST", f"/organizations/{org['organization_id']}/approve")
    key = (await node.add_member(org["organization_id"], "admin", "lot-admin@signup.test"))["api_key"]

    async def available():
        r = await node.call("GET", "/v1/billing/balance", key)
        return (await r.get_json())["data"]["available"]

    assert await available() == "200.00"
    node.clock.advance(30 * 86400 - 1)
    assert await available() == "200.00"
    node.clock.advance(1)
    assert await available() == "0.00"


async def test_known_address_gets_the_same_page_and_a_mail(mail_node, smtp):
    node = mail_node
    await node.create_org(email="taken@signup.test")
    r1, html1 = await sign_up(node.client, "taken@signup.test")
    r2, html2 = await sign_up(node.client, "fresh@signup.test")
    assert r1.status_code == r2.status_code == 200
    assert html1.replace("taken@", "X@") == html2.replace("fresh@", "X@")
    [note] = await smtp.wait_for("taken@signup.test")
    assert note["Subject"] == "Someone tried to sign up with your email address"
    assert "http://testserver/forgot-password" in text_part(note)
    assert node.store.scalar("SELECT count(*) FROM organizations") == 2  # Acme and fresh's, nothing more


async def test_second_sign_up_while_unconfirmed_is_its_own(mail_node, smtp):
    """An unconfirmed sign-up neither blocks nor absorbs a later one (issue 22, M4): each has
    its own organization and link, and a link confirms only its own sign-up."""
    node, email = mail_node, "twice@signup.test"
    await sign_up(node.client, email)
    await sign_up(node.client, email, organization="Other name")
    mails = await smtp.wait_for(email, 2)
    assert node.store.scalar("SELECT count(*) FROM organizations") == 2
    links = {("Lab One" in text_part(m)): path_of(link_in(m, "http://testserver/confirm?token=")) for m in mails}
    r = await node.client.get(links[False])
    assert r.status_code == 200 and "Other name" in await r.get_data(as_text=True)
    assert [o["name"] for o in await pending(node)] == ["Other name"]
    assert [o["name"] for o in await pending(node, "unconfirmed")] == ["Lab One"]
    r = await node.client.get(links[True])  # not spent by the other one
    assert r.status_code == 200 and "Email confirmed" in await r.get_data(as_text=True)


async def test_confirmation_link_twice_unknown_and_expired(mail_node, smtp, mock_clock):
    node = mail_node
    await sign_up(node.client, "click@signup.test")
    [mail] = await smtp.wait_for("click@signup.test")
    link = path_of(link_in(mail, "http://testserver/confirm?token="))
    assert (await node.client.get(link)).status_code == 200
    r = await node.client.get(link)
    body = await r.get_data(as_text=True)
    assert r.status_code == 200 and "Email already confirmed" in body and "already confirmed" in body
    for bad in ("/confirm?token=nope", "/confirm", "/confirm?token="):
        r = await node.client.get(bad)
        assert r.status_code == 404 and INVALID_CONFIRM in await r.get_data(as_text=True)

    await sign_up(node.client, "late@signup.test")
    [mail] = await smtp.wait_for("late@signup.test")
    node.clock.advance(7 * 86400)  # valid 7 days
    r = await node.client.get(path_of(link_in(mail, "http://testserver/confirm?token=")))
    assert r.status_code == 404 and INVALID_CONFIRM in await r.get_data(as_text=True)
    assert [o["owner_email"] for o in await pending(node, "unconfirmed")] == ["late@signup.test"]


@pytest.mark.parametrize("form, status, message", [
    ({"email": "not-an-address"}, 422, BAD_ADDRESS),
    ({"email": "two@@signup.test"}, 422, BAD_ADDRESS),
    ({"email": "nodot@localhost"}, 422, BAD_ADDRESS),
    ({"email": "a b@signup.test"}, 422, BAD_ADDRESS),
    ({"password": "short-pw"}, 422, "The password must be at least 12 characters long."),
    ({"password": "password1234"}, 422, "This password is too common. Choose another one."),
    ({"password": ""}, 400, "Enter your email, a password and an organization name."),
    ({"organization": "   "}, 400, "Enter your email, a password and an organization name."),
    ({"organization": "x" * 101}, 422, "The organization name must be at most 100 characters."),
])
async def test_sign_up_rejections(node, form, status, message):
    fields = {"email": "bad@signup.test", "password": PW, "organization": "Lab"} | form
    _, html = await page(node.client, "/signup")
    r = await node.client.post("/signup", form={"csrf_token": csrf(html), **fields})
    assert r.status_code == status
    assert message in (await r.get_data(as_text=True)).replace("&#39;", "'")
    assert node.store.scalar("SELECT count(*) FROM organizations") == 0
    assert node.store.scalar("SELECT count(*) FROM emails") == 0


async def test_sign_up_needs_csrf_and_is_throttled(node, mock_clock):
    r = await node.client.post("/signup", form={"email": "x@signup.test", "password": PW, "organization": "L"})
    assert r.status_code == 403 and "Request refused" in await r.get_data(as_text=True)
    for _ in range(5):
        r, _ = await sign_up(node.client, "flood@signup.test")
        assert r.status_code == 200
    r, html = await sign_up(node.client, "flood@signup.test")
    assert r.status_code == 429 and r.headers["Retry-After"] == "60"
    assert "Too many sign-up attempts. Wait 60 seconds and try again." in html
    assert node.store.scalar("SELECT count(*) FROM emails WHERE to_address = 'flood@signup.test'") == 5


async def test_closed_sign_up(nursery, tmp_path):
    from conftest import start_node, stop_node

    node = await start_node(nursery, tmp_path, signup="closed")
    closed = "This service takes new accounts by invitation only."
    r = await node.client.get("/signup")
    assert r.status_code == 403 and closed in (await r.get_data(as_text=True)).replace("&#39;", "'")
    _, html = await page(node.client, "/login")
    r = await node.client.post("/signup", form={"csrf_token": csrf(html), "email": "c@signup.test",
                                                "password": PW, "organization": "L"})
    assert r.status_code == 403 and "Sign-up is closed" in await r.get_data(as_text=True)
    assert node.store.scalar("SELECT count(*) FROM organizations") == 0
    await stop_node(node)


async def test_pending_list_rejects_unknown_status(node):
    r = await node.op("GET", "/organizations?status=waiting")
    assert r.status_code == 422
    assert (await r.get_json())["error"]["message"] == "status must be one of unconfirmed, pending, approved."
    await node.create_org(name="Approved")
    await node.create_org(name="Held", email="held@acme.test", approved=False)
    assert [o["name"] for o in await pending(node)] == ["Held"]
    assert [o["status"] for o in (await (await node.op("GET", "/organizations")).get_json())["data"]] == \
        ["approved", "pending"]


def test_admin_pending_command():
    from service.cli import build_parser

    args = build_parser().parse_args(["admin", "pending"])
    assert args.handler(args) == ("GET", "/organizations?status=pending", None)


async def test_unconfirmed_sign_up_cannot_log_in(mail_node, smtp):
    """Until its own link is followed, a sign-up's password is held aside: it opens nothing."""
    node, email = mail_node, "early@signup.test"
    await sign_up(node.client, email)
    r = await login(node.client, email)
    assert r.status_code == 401 and "Email or password is incorrect." in await r.get_data(as_text=True)
    assert node.store.scalar("SELECT count(*) FROM passwords") == 0


async def test_keys_of_an_unapproved_organization_answer_401(node):
    org = await node.create_org(name="Held", email="held@signup.test", approved=False)
    r = await node.call("GET", "/v1/projects", org["api_key"])
    assert r.status_code == 401
    await node.op("POST", f"/organizations/{org['organization_id']}/approve")
    assert (await node.call("GET", "/v1/projects", org["api_key"])).status_code == 200


async def test_former_member_signs_up_and_keeps_their_password(mail_node, smtp):
    node, email = mail_node, "former@signup.test"
    org = await node.create_org(email="boss@signup.test")
    member = await node.add_member(org["organization_id"], "member", email)
    old = await passwords.hash_password("the old passphrase")
    await node.store.write(lambda c: c.execute("INSERT INTO passwords (email, password_hash, updated_at) "
                                               "VALUES (?, ?, '2026-01-01')", (email, old)))
    await node.op("DELETE", f"/organizations/{org['organization_id']}/members/{member['user_id']}")
    r, html = await sign_up(node.client, email, "someone else's passphrase", "Fresh Start")
    assert r.status_code == 200 and "Check your email" in html
    [mail] = await smtp.wait_for(email)
    assert mail["Subject"] == "Confirm your email address"
    assert node.store.scalar("SELECT password_hash FROM passwords WHERE email = ?", (email,)) == old
    assert [o["name"] for o in await pending(node, "unconfirmed")] == ["Fresh Start"]
