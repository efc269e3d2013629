"""Password reset by mail (real SMTP server) and by the operator (no SMTP): the same answer
whether or not the address exists, single-use links kept as digests, one hour on the service
clock, a reset ends every other session, every rejection with its status and message."""

from __future__ import annotations

import pytest

from service import passwords
from service.clock import iso
from service.actors.accounts.people import INVALID_RESET, UNKNOWN_EMAIL
from service.mail.addresses import BAD_ADDRESS
from conftest import outboxes_settled
from smtp_server import link_in, text_part
from tests.pages import csrf, page

PW = "a brand new passphrase"
RESET = "http://testserver/reset-password?token="


pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def forgot(client, email):
    _, html = await page(client, "/forgot-password")
    r = await client.post("/forgot-password", form={"csrf_token": csrf(html), "email": email})
    return r, await r.get_data(as_text=True)


async def set_password(client, path, password=PW):
    r, html = await page(client, path)
    assert r.status_code == 200, html
    return await client.post("/reset-password", form={"csrf_token": csrf(html), "token": path.split("=", 1)[1],
                                                       "password": password})


async def login(client, email, password=PW):
    _, html = await page(client, "/login")
    return await client.post("/login", form={"csrf_token": csrf(html), "email": email, "password": password})


async def reset_link(smtp, to, count=1) -> str:
    """The link of the `count`-th reset mail of `to` (other mails, such as the notice after a
    credential change, may come between)."""
    total = count
    while True:
        resets = [m for m in await smtp.wait_for(to, total) if m["Subject"] == "Reset your genservice password"]
        if len(resets) >= count:
            return link_in(resets[count - 1], RESET).removeprefix("http://testserver")
        total += 1


async def test_reset_by_mail_ends_other_sessions(mail_node, smtp):
    node, email = mail_node, "reset-owner@reset.test"
    await node.create_org(email=email)  # an owner made by the operator: no password yet
    r, html = await forgot(node.client, email)
    assert r.status_code == 200 and "If an account exists for reset-owner@reset.test" in html
    mail = (await smtp.wait_for(email))[0]
    assert mail["Subject"] == "Reset your genservice password" and "for 60 minutes" in text_part(mail)
    r = await set_password(node.client, link_in(mail, RESET).removeprefix("http://testserver"))
    assert r.status_code == 303 and r.headers["Location"] == "/studio"
    assert (await node.client.get("/account")).status_code == 200

    other = node.app.test_client()  # a second browser, logged in with the new password
    assert (await login(other, email)).status_code == 303
    assert (await other.get("/account")).status_code == 200

    third = node.app.test_client()
    await forgot(third, email)
    r = await set_password(third, await reset_link(smtp, email, 2), "another long passphrase")
    assert r.status_code == 303
    for ended in (node.client, other):
        r = await ended.get("/account")
        assert r.status_code == 303 and r.headers["Location"].startswith("/login")
    assert (await third.get("/account")).status_code == 200
    stored = node.store.scalar("SELECT password_hash FROM passwords WHERE email = ?", (email,))
    assert await passwords.verify(stored, "another long passphrase") and not await passwords.verify(stored, PW)


async def test_same_answer_for_unknown_address_and_no_mail(mail_node, smtp):
    node = mail_node
    await node.create_org(email="known@reset.test")
    r1, html1 = await forgot(node.client, "known@reset.test")
    r2, html2 = await forgot(node.client, "nobody@reset.test")
    assert r1.status_code == r2.status_code == 200
    assert html1.replace("known@", "X@") == html2.replace("nobody@", "X@")
    await smtp.wait_for("known@reset.test")
    await outboxes_settled(node, real_time=True)
    assert smtp.messages("nobody@reset.test") == []
    assert node.store.scalar("SELECT count(*) FROM emails WHERE to_address = 'nobody@reset.test'") == 0


async def test_link_single_use_digest_only_and_one_hour(mail_node, smtp, mock_clock):
    node, email = mail_node, "once@reset.test"
    await node.create_org(email=email)
    await forgot(node.client, email)
    await forgot(node.client, email)
    first, second = await reset_link(smtp, email, 1), await reset_link(smtp, email, 2)
    token = first.split("=", 1)[1]
    raw = b"".join(p.read_bytes() for p in node.parts.settings.data_dir.glob("genservice.db*"))
    assert token.encode() not in raw  # only its digest is kept
    assert (await set_password(node.client, first)).status_code == 303
    for used in (first, second):  # using one spends every other link of the address
        r = await node.client.get(used)
        assert r.status_code == 404 and INVALID_RESET in await r.get_data(as_text=True)
    _, html = await page(node.client, "/forgot-password")
    r = await node.client.post("/reset-password", form={"csrf_token": csrf(html), "token": token, "password": PW})
    assert r.status_code == 404 and INVALID_RESET in await r.get_data(as_text=True)

    await forgot(node.client, email)
    late = await reset_link(smtp, email, 3)
    node.clock.advance(3599)
    r = await node.client.get(late)
    assert r.status_code == 200 and r.headers["Referrer-Policy"] == "same-origin"
    node.clock.advance(1)
    r = await node.client.get(late)
    assert r.status_code == 404 and INVALID_RESET in await r.get_data(as_text=True)


@pytest.mark.parametrize("password, message", [
    ("short", "The password must be at least 12 characters long."),
    ("qwerty123456", "This password is too common. Choose another one."),
    ("", "The password must be at least 12 characters long."),
])
async def test_weak_new_password_refused(mail_node, smtp, password, message):
    node, email = mail_node, f"weak{len(password)}@reset.test"
    await node.create_org(email=email)
    await forgot(node.client, email)
    path = await reset_link(smtp, email)
    r = await set_password(node.client, path, password)
    assert r.status_code == 422 and message in await r.get_data(as_text=True)
    assert (await node.client.get(path)).status_code == 200  # the link still works


@pytest.mark.parametrize("email, status, message", [
    ("", 400, "Enter your email address."),
    ("no-at-sign", 422, BAD_ADDRESS),
    ("x@y", 422, BAD_ADDRESS),
])
async def test_forgot_form_rejections(node, email, status, message):
    r, html = await forgot(node.client, email)
    assert r.status_code == status and message in html
    assert node.store.scalar("SELECT count(*) FROM emails") == 0


async def test_unknown_link_and_csrf(node):
    for path in ("/reset-password", "/reset-password?token=nope"):
        r = await node.client.get(path)
        assert r.status_code == 404 and INVALID_RESET in await r.get_data(as_text=True)
    r = await node.client.post("/forgot-password", form={"email": "x@reset.test"})
    assert r.status_code == 403 and "Request refused" in await r.get_data(as_text=True)


async def test_forgot_throttled_per_address(node, mock_clock):
    for _ in range(5):
        r, _ = await forgot(node.client, "flood@reset.test")
        assert r.status_code == 200
    r, html = await forgot(node.client, "flood@reset.test")
    assert r.status_code == 429 and r.headers["Retry-After"] == "60"
    assert "Too many password reset requests. Wait 60 seconds and try again." in html


async def test_reset_neither_confirms_nor_serves_an_unconfirmed_sign_up(mail_node, smtp):
    """Only a sign-up's own link confirms it (issue 22, M4): an address whose only trace is an
    unconfirmed sign-up is unknown to the reset, and its sign-up stays unconfirmed."""
    node, email = mail_node, "proves@reset.test"
    _, html = await page(node.client, "/signup")
    await node.client.post("/signup", form={"csrf_token": csrf(html), "email": email, "password": PW,
                                            "organization": "Proof"})
    await smtp.wait_for(email)  # the confirmation mail, not followed
    await forgot(node.client, email)
    assert node.store.scalar("SELECT count(*) FROM emails WHERE to_address = ? AND kind = 'password_reset'",
                             (email,)) == 0
    r = await node.op("GET", "/organizations?status=pending")
    assert (await r.get_json())["data"] == []


async def test_operator_reset_link_without_smtp(node, mock_clock):
    await node.create_org(email="cli@reset.test")
    r = await node.op("POST", "/password-resets", {"email": "cli@reset.test"})
    assert r.status_code == 201
    data = (await r.get_json())["data"]
    assert data["email"] == "cli@reset.test" and data["reset_url"].startswith(RESET)
    assert data["expires_at"] == iso(node.clock.now() + 3600)
    assert node.store.scalar("SELECT count(*) FROM emails") == 0  # answered, not mailed
    assert (await set_password(node.client, data["reset_url"].removeprefix("http://testserver"))).status_code == 303
    r = await node.op("POST", "/password-resets", {"email": "nobody@reset.test"})
    assert r.status_code == 404 and (await r.get_json())["error"]["message"] == UNKNOWN_EMAIL
    r = await node.op("POST", "/password-resets", {"mail": "x"})
    assert r.status_code == 400 and (await r.get_json())["error"]["code"] == "request.validation_failed"
    r = await node.client.post("/operator/v1/password-resets", json={"email": "cli@reset.test"})
    assert r.status_code == 401


def test_admin_reset_password_command():
    from service.cli import build_parser

    args = build_parser().parse_args(["admin", "reset-password", "a@b.test"])
    assert args.handler(args) == ("POST", "/password-resets", {"email": "a@b.test"})
