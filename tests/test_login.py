"""Password login, throttling, password change and invitations accepted with a password,
through the pages (Quart test client), time rules on trio's mock clock."""

from __future__ import annotations

import json
import re

import pytest

from service import passwords
from service.actors.sessions import SetPassword
from service.storage.sessions import digest
from tests.pages import csrf, page

PW = "correct horse battery"
BAD = "Email or password is incorrect."


pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def with_password(node, email="owner@acme.test", pw=PW) -> dict:
    org = await node.create_org(email=email)
    await node.parts.sessions.ask("sessions", SetPassword(email, await passwords.hash_password(pw),
                                                          org["owner_user_id"], org["organization_id"]))
    await node.store.write(lambda conn: conn.execute("DELETE FROM sessions"))
    return org


async def login(client, email, pw, next_path=None, scope_base=None):
    _, html = await page(client, "/login")
    form = {"csrf_token": csrf(html), "email": email, "password": pw}
    if next_path is not None:
        form["next"] = next_path
    r = await client.post("/login", form=form, scope_base=scope_base)
    return r, await r.get_data(as_text=True)


async def test_login_page_names(node):
    r, html = await page(node.client, "/login")
    assert r.status_code == 200
    assert re.search(r'<label for="email">Email</label>\s*<input id="email" name="email" type="email"', html)
    assert re.search(r'<label for="password">Password</label>\s*<input id="password" name="password" '
                     r'type="password"', html)
    assert '<button type="submit">Log in</button>' in html
    assert "Sign in with" not in html  # no provider configured


async def test_good_login_lands_in_studio(node, mock_clock):
    org = await with_password(node)
    r, _ = await login(node.client, "Owner@Acme.test", PW)
    assert r.status_code == 303 and r.headers["Location"] == "/studio"
    cookie = r.headers["Set-Cookie"]
    token = cookie.split("gs_session=")[1].split(";")[0]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie
    row = node.store.one("SELECT * FROM sessions")
    assert row["token_hash"] == digest(token) and row["user_id"] == org["owner_user_id"]
    r = await node.client.get("/account")
    assert r.status_code == 200 and "owner@acme.test" in await r.get_data(as_text=True)


@pytest.mark.parametrize("next_path,lands", [
    ("/studio?tab=images", "/studio?tab=images"),
    ("/billing", "/billing"),
    ("//evil.test/x", "/studio"),
    ("https://evil.test/", "/studio"),
    ("/\\evil.test", "/studio"),
    ("javascript:alert(1)", "/studio"),
    ("/ok\r\nSet-Cookie: x=y", "/studio"),
    ("http://testserver/billing", "/studio"),  # absolute, even this host's: only paths are followed
    ("\\\\evil.test", "/studio"),
    ("/\tevil.test", "/studio"),
])
async def test_next_only_same_site_paths(node, next_path, lands):
    await with_password(node)
    r, _ = await login(node.client, "owner@acme.test", PW, next_path)
    assert r.status_code == 303 and r.headers["Location"] == lands


@pytest.mark.parametrize("asked,kept", [("https://evil.test/x", "/studio"), ("//evil.test", "/studio"),
                                         ("/billing?tab=usage", "/billing?tab=usage")])
async def test_login_page_keeps_only_a_path_of_this_site(node, asked, kept):
    """The login form carries `next` on to the post only when it is a path here."""
    r, html = await page(node.client, "/login?next=" + asked.replace("?", "%3F").replace("&", "%26"))
    assert r.status_code == 200
    assert f'<input type="hidden" name="next" value="{kept}">' in html


async def test_same_answer_for_unknown_email_and_wrong_password(node):
    await with_password(node)
    r1, wrong = await login(node.client, "owner@acme.test", "wrong password here")
    r2, unknown = await login(node.app.test_client(), "nobody@acme.test", "wrong password here")
    assert r1.status_code == r2.status_code == 401
    def same(html, email):  # the page minus the echoed email and the form's CSRF token
        return re.sub(r'name="csrf_token" value="[^"]+"', "", html.replace(email, "X"))

    assert BAD in wrong and same(wrong, "owner@acme.test") == same(unknown, "nobody@acme.test")
    assert "gs_session" not in r1.headers.get("Set-Cookie", "")
    r, html = await login(node.client, "", "")
    assert r.status_code == 400 and "Enter your email and password." in html


async def test_removed_member_cannot_log_in(node):
    org = await with_password(node)
    m = await node.add_member(org["organization_id"], "member", "m@acme.test")
    await node.parts.sessions.ask("sessions", SetPassword("m@acme.test", await passwords.hash_password(PW),
                                                          m["user_id"], org["organization_id"]))
    await node.op("DELETE", f"/organizations/{org['organization_id']}/members/{m['user_id']}")
    r, html = await login(node.client, "m@acme.test", PW)
    assert r.status_code == 401 and BAD in html


async def test_login_rotates_the_session(node):
    await with_password(node)
    r, _ = await login(node.client, "owner@acme.test", PW)
    first = r.headers["Set-Cookie"].split("gs_session=")[1].split(";")[0]
    r, _ = await login(node.client, "owner@acme.test", PW)
    second = r.headers["Set-Cookie"].split("gs_session=")[1].split(";")[0]
    assert first != second
    assert [x["token_hash"] for x in node.store.all("SELECT token_hash FROM sessions")] == [digest(second)]


async def test_login_form_needs_csrf(node):
    await with_password(node)
    r = await node.client.post("/login", form={"email": "owner@acme.test", "password": PW})
    assert r.status_code == 403 and "Request refused" in await r.get_data(as_text=True)
    assert node.store.scalar("SELECT count(*) FROM sessions") == 0


async def test_throttle_per_account(node, mock_clock):
    await with_password(node)
    for _ in range(5):
        r, _ = await login(node.client, "owner@acme.test", "wrong password here")
        assert r.status_code == 401
    r, html = await login(node.client, "OWNER@acme.test", PW)  # even the right password waits
    assert r.status_code == 429 and r.headers["Retry-After"] == "60"
    assert "Too many login attempts. Wait 60 seconds and try again." in html
    mock_clock.jump(59)
    r, html = await login(node.client, "owner@acme.test", PW)
    assert r.status_code == 429 and r.headers["Retry-After"] == "1"
    mock_clock.jump(1)
    r, _ = await login(node.client, "owner@acme.test", PW)
    assert r.status_code == 303
    r, _ = await login(node.client, "owner@acme.test", PW)
    assert r.status_code == 429


async def test_throttle_per_address(node, mock_clock):
    here, there = {"client": ("203.0.113.7", 5000)}, {"client": ("198.51.100.9", 5000)}
    for i in range(20):
        r, _ = await login(node.client, f"p{i}@acme.test", "wrong password here", scope_base=here)
        assert r.status_code == 401
    r, html = await login(node.client, "p99@acme.test", "wrong password here", scope_base=here)
    assert r.status_code == 429 and r.headers["Retry-After"] == "6"
    r, _ = await login(node.client, "p99@acme.test", "wrong password here", scope_base=there)
    assert r.status_code == 401
    mock_clock.jump(6)
    r, _ = await login(node.client, "p98@acme.test", "wrong password here", scope_base=here)
    assert r.status_code == 401


async def test_password_change_ends_every_session(node, mock_clock):
    org = await with_password(node)
    a, b = node.client, node.app.test_client()
    await login(a, "owner@acme.test", PW)
    await login(b, "owner@acme.test", PW)
    assert node.store.scalar("SELECT count(*) FROM sessions") == 2
    _, html = await page(a, "/account")
    assert "Current password" in html and "Change password" in html

    async def change(current, new):
        r = await a.post("/account/password", form={"csrf_token": csrf(html), "current_password": current,
                                                    "new_password": new})
        return r, await r.get_data(as_text=True)

    r, text = await change("not it", "a brand new passphrase")
    assert r.status_code == 401 and "The current password is not correct." in text
    r, text = await change(PW, "short")
    assert r.status_code == 422 and "The password must be at least 12 characters long." in text
    r, text = await change(PW, "password1234")
    assert r.status_code == 422 and "This password is too common. Choose another one." in text
    r, _ = await change(PW, "a brand new passphrase")
    assert r.status_code == 429  # password attempts count against the email's bucket too
    mock_clock.jump(300)
    r, _ = await change(PW, "a brand new passphrase")
    assert r.status_code == 303
    rows = node.store.all("SELECT user_id FROM sessions")
    assert len(rows) == 1 and rows[0]["user_id"] == org["owner_user_id"]
    assert (await a.get("/account")).status_code == 200  # this browser got a fresh session
    assert (await b.get("/account")).status_code == 303  # the other one is logged out
    r, _ = await login(node.app.test_client(), "owner@acme.test", PW)
    assert r.status_code == 401
    r, _ = await login(node.app.test_client(), "owner@acme.test", "a brand new passphrase")
    assert r.status_code == 303
    stored = node.store.scalar("SELECT password_hash FROM passwords")
    assert stored.startswith("$argon2id$") and "brand new" not in stored


async def invite(node, org_id, email="new@acme.test", role="member") -> dict:
    r = await node.op("POST", f"/organizations/{org_id}/invitations", {"email": email, "role": role})
    assert r.status_code == 201
    return (await r.get_json())["data"]


async def test_invitation_accepted_with_a_password(node, mock_clock):
    org = await node.create_org()
    inv = await invite(node, org["organization_id"])
    path = f"/invitations/accept?token={inv['token']}"
    r, html = await page(node.client, path)
    assert r.status_code == 200 and "Join Acme" in html and "new@acme.test" in html
    assert '<label for="password">Password</label>' in html and "Accept invitation" in html

    async def accept(pw):
        r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                                "password": pw})
        return r, await r.get_data(as_text=True)

    r, text = await accept("too short")
    assert r.status_code == 422 and "The password must be at least 12 characters long." in text
    r, _ = await accept(PW)
    assert r.status_code == 303 and r.headers["Location"] == "/studio"
    joined = node.store.all("SELECT data FROM events WHERE event = 'member.joined'")
    assert [json.loads(e["data"])["member_email"] for e in joined] == ["new@acme.test"]
    r = await node.client.get("/account")
    assert r.status_code == 200 and "member of Acme" in await r.get_data(as_text=True)
    again = node.app.test_client()  # the same link again, from another browser
    _, login_html = await page(again, "/login")
    r = await again.post("/invitations/accept", form={"csrf_token": csrf(login_html), "token": inv["token"],
                                                      "password": PW})
    text = await r.get_data(as_text=True)
    assert r.status_code == 404 and "The invitation is not valid: unknown, already used" in text
    assert len(node.store.all("SELECT 1 FROM events WHERE event = 'member.joined'")) == 1
    r, _ = await login(node.app.test_client(), "new@acme.test", PW)
    assert r.status_code == 303


async def test_invitation_link_expiry_and_resend(node, mock_clock):
    org = await node.create_org()
    inv = await invite(node, org["organization_id"])
    mock_clock.jump(14 * 86400 - 1)
    assert (await node.client.get(f"/invitations/accept?token={inv['token']}")).status_code == 200
    mock_clock.jump(1)
    r = await node.client.get(f"/invitations/accept?token={inv['token']}")
    assert r.status_code == 404 and "The invitation is not valid" in await r.get_data(as_text=True)
    r = await node.op("POST", f"/organizations/{org['organization_id']}/invitations/{inv['invitation_id']}/resend")
    fresh = (await r.get_json())["data"]
    assert (await node.client.get(f"/invitations/accept?token={inv['token']}")).status_code == 404
    assert (await node.client.get(f"/invitations/accept?token={fresh['token']}")).status_code == 200
    assert (await node.client.get("/invitations/accept")).status_code == 404


async def test_invitation_for_someone_with_a_password(node):
    first = await with_password(node, "multi@acme.test")
    other = await node.create_org(name="Other", email="boss@other.test")
    inv = await invite(node, other["organization_id"], "multi@acme.test", "admin")
    path = f"/invitations/accept?token={inv['token']}"
    _, html = await page(node.client, path)
    assert "You already have an account with this email address: enter its password." in html
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                            "password": "not my password"})
    assert r.status_code == 401 and "The password is not the one of your account." in await r.get_data(as_text=True)
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                            "password": PW})
    assert r.status_code == 303
    s = node.store.one("SELECT s.organization_id FROM sessions s")
    assert s["organization_id"] == other["organization_id"] != first["organization_id"]


async def test_weaker_hash_is_upgraded_at_login(node, monkeypatch):
    import argon2
    await with_password(node)  # stored with the cheapest profile
    old = node.store.scalar("SELECT password_hash FROM passwords")
    stronger = argon2.PasswordHasher(time_cost=2, memory_cost=64, parallelism=1, hash_len=16, salt_len=8)
    monkeypatch.setattr(passwords, "HASHER", stronger)
    r, _ = await login(node.client, "owner@acme.test", PW)
    assert r.status_code == 303
    new = node.store.scalar("SELECT password_hash FROM passwords")
    assert new != old and "m=64,t=2,p=1" in new and not stronger.check_needs_rehash(new)
    assert node.store.scalar("SELECT count(*) FROM sessions") == 1  # the login's session stays
    r, _ = await login(node.app.test_client(), "owner@acme.test", PW)
    assert r.status_code == 303
