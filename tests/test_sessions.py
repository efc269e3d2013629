"""Browser sessions on the mock clock: digest-only storage, idle and absolute expiry, logout,
rotation, member removal; CSRF refusals; the pages' principal and member rules."""

from __future__ import annotations

import json

import pytest
import trio

from service.actors.sessions import ABSOLUTE, IDLE, StartSession
from service.storage.sessions import digest
from tests.conftest import START, start_node, stop_node
from tests.pages import csrf, page


async def login_as(node, user_id: str, org_id: str, client=None) -> str:
    """A session made by the sessions actor (as a login does), its cookie put in the browser."""
    out = await node.parts.sessions.ask("sessions", StartSession(user_id, org_id))
    (client or node.client).set_cookie("localhost", "gs_session", out["token"])
    return out["token"]


async def owner_session(node) -> tuple[dict, str]:
    org = await node.create_org()
    token = await login_as(node, org["owner_user_id"], org["organization_id"])
    return org, token


async def test_session_row_keeps_only_a_digest(node, autojump_clock):
    org, token = await owner_session(node)
    rows = node.store.all("SELECT * FROM sessions")
    assert len(rows) == 1 and rows[0]["token_hash"] == digest(token)
    assert token not in json.dumps(rows)
    assert rows[0]["created_at"] == START and rows[0]["expires_at"] == START + ABSOLUTE
    r = await node.client.get("/account")
    assert r.status_code == 200 and "owner@acme.test" in await r.get_data(as_text=True)


async def test_idle_expiry(node, autojump_clock):
    await owner_session(node)
    await trio.sleep(IDLE - 1)
    assert (await node.client.get("/account")).status_code == 200  # activity recorded
    await trio.sleep(1)
    assert node.store.scalar("SELECT last_seen_at FROM sessions") == START + IDLE - 1
    await trio.sleep(IDLE - 2)  # idle since the last request: one second short
    assert (await node.client.get("/account")).status_code == 200
    await trio.sleep(IDLE)  # exactly IDLE since the last recorded activity
    r = await node.client.get("/account")
    assert r.status_code == 303 and r.headers["Location"] == "/login?next=/account"


async def test_absolute_expiry(node, autojump_clock):
    await owner_session(node)
    step = IDLE / 2
    while node.clock.now() + step < START + ABSOLUTE:
        await trio.sleep(step)
        assert (await node.client.get("/account")).status_code == 200
    await trio.sleep(START + ABSOLUTE - 1 - node.clock.now())
    assert (await node.client.get("/account")).status_code == 200
    await trio.sleep(1)
    assert (await node.client.get("/account")).status_code == 303


async def test_no_session_redirects_to_login_with_next(node):
    r = await node.client.get("/account?tab=members")
    assert r.status_code == 303 and r.headers["Location"] == "/login?next=/account%3Ftab%3Dmembers"
    node.client.set_cookie("localhost", "gs_session", "made-up")
    assert (await node.client.get("/account")).status_code == 303


async def test_logout_deletes_the_session(node):
    _, token = await owner_session(node)
    _, html = await page(node.client, "/account")
    r = await node.client.post("/logout", form={"csrf_token": csrf(html)})
    assert r.status_code == 303 and r.headers["Location"] == "/login"
    assert "gs_session=;" in r.headers["Set-Cookie"]
    assert node.store.scalar("SELECT count(*) FROM sessions") == 0
    node.client.set_cookie("localhost", "gs_session", token)  # the old cookie, replayed
    assert (await node.client.get("/account")).status_code == 303


async def test_a_new_session_replaces_the_browsers_previous_one(node):
    org, first = await owner_session(node)
    out = await node.parts.sessions.ask("sessions", StartSession(org["owner_user_id"], org["organization_id"],
                                                                 previous_token=first))
    hashes = [r["token_hash"] for r in node.store.all("SELECT token_hash FROM sessions")]
    assert hashes == [digest(out["token"])]


async def test_removed_member_loses_sessions_and_event_fires_once(node):
    org, _ = await owner_session(node)
    m = await node.add_member(org["organization_id"], "member")
    other = node.app.test_client()
    await login_as(node, m["user_id"], org["organization_id"], client=other)
    assert (await other.get("/account")).status_code == 200
    _, html = await page(node.client, "/account")
    r = await node.client.post(f"/account/members/{m['user_id']}/remove", form={"csrf_token": csrf(html)})
    assert r.status_code == 303 and r.headers["Location"] == "/account"
    assert node.store.scalar("SELECT count(*) FROM sessions WHERE user_id = ?", (m["user_id"],)) == 0
    assert (await other.get("/account")).status_code == 303
    # removing again changes nothing and fires nothing
    r = await node.client.post(f"/account/members/{m['user_id']}/remove", form={"csrf_token": csrf(html)})
    assert r.status_code == 303
    removed = node.store.all("SELECT data FROM events WHERE event = 'member.removed'")
    assert [json.loads(e["data"])["member_id"] for e in removed] == [m["user_id"]]
    r = await node.call("GET", "/v1/projects", m["api_key"])
    assert r.status_code == 401


@pytest.mark.parametrize("role", ["member", "read_only"])
async def test_role_table_applies_to_pages(node, role):
    org = await node.create_org()
    m = await node.add_member(org["organization_id"], role)
    await login_as(node, m["user_id"], org["organization_id"])
    _, html = await page(node.client, "/account")
    assert "Change role" not in html
    r = await node.client.post(f"/account/members/{org['owner_user_id']}/role",
                               form={"csrf_token": csrf(html), "role": "read_only"})
    assert r.status_code == 403
    assert f"Your role ({role}) does not allow this." in await r.get_data(as_text=True)


async def test_member_rules_from_the_browser(node):
    org = await node.create_org()
    oid = org["organization_id"]
    admin = await node.add_member(oid, "admin")
    member = await node.add_member(oid, "member")
    await login_as(node, admin["user_id"], oid)
    _, html = await page(node.client, "/account")
    token = csrf(html)

    async def post(path, **form):
        r = await node.client.post(path, form={"csrf_token": token, **form})
        return r.status_code, await r.get_data(as_text=True)

    status, text = await post(f"/account/members/{member['user_id']}/role", role="owner")
    assert status == 403 and "You cannot grant a broader role than your own." in text
    status, text = await post(f"/account/members/{org['owner_user_id']}/role", role="member")
    assert status == 403 and "Only an owner can change or remove an owner." in text
    status, text = await post(f"/account/members/{org['owner_user_id']}/remove")
    assert status == 403 and "Only an owner can change or remove an owner." in text
    status, _ = await post(f"/account/members/{member['user_id']}/role", role="read_only")
    assert status == 303
    status, _ = await post(f"/account/members/{member['user_id']}/role", role="read_only")  # no change
    assert status == 303
    changed = node.store.all("SELECT data FROM events WHERE event = 'member.role_changed'")
    assert [json.loads(e["data"])["role"] for e in changed] == ["read_only"]
    status, text = await post(f"/account/members/{member['user_id']}/role", role="superuser")
    assert status == 422 and "role must be one of owner, admin, member, read_only." in text
    # the owner is the last one: cannot be demoted or removed, by themselves either
    owner_browser = node.app.test_client()
    await login_as(node, org["owner_user_id"], oid, client=owner_browser)
    _, html = await page(owner_browser, "/account")
    r = await owner_browser.post(f"/account/members/{org['owner_user_id']}/role",
                                 form={"csrf_token": csrf(html), "role": "admin"})
    assert r.status_code == 409 and "The last owner cannot be demoted." in await r.get_data(as_text=True)
    r = await owner_browser.post(f"/account/members/{org['owner_user_id']}/remove",
                                 form={"csrf_token": csrf(html)})
    assert r.status_code == 409 and "The last owner cannot be removed." in await r.get_data(as_text=True)
    # with a second owner, the first may step down
    r = await owner_browser.post(f"/account/members/{admin['user_id']}/role",
                                 form={"csrf_token": csrf(html), "role": "owner"})
    assert r.status_code == 303
    r = await owner_browser.post(f"/account/members/{org['owner_user_id']}/role",
                                 form={"csrf_token": csrf(html), "role": "admin"})
    assert r.status_code == 303


async def test_operator_cannot_remove_the_last_owner(node):
    org = await node.create_org()
    r = await node.op("DELETE", f"/organizations/{org['organization_id']}/members/{org['owner_user_id']}")
    assert r.status_code == 409
    assert (await r.get_json())["error"]["message"] == "The last owner cannot be removed."


FORGED = "This form was not sent from this site, or the page was open too long."


async def test_csrf_refusals(node):
    org, _ = await owner_session(node)
    _, html = await page(node.client, "/account")
    good = csrf(html)

    async def logout(form, headers=None):
        r = await node.client.post("/logout", form=form, headers=headers or {})
        return r.status_code, await r.get_data(as_text=True)

    for form, headers in [({}, None),
                          ({"csrf_token": "not-a-token"}, None),
                          ({"csrf_token": good[:-2] + "xx"}, None),
                          ({"csrf_token": good}, {"Origin": "https://evil.test"}),
                          ({"csrf_token": good}, {"Origin": "null"}),
                          ({"csrf_token": good}, {"Referer": "https://evil.test/page"})]:
        status, text = await logout(form, headers)
        assert status == 403 and "Request refused" in text and FORGED in text, (form, headers)
    assert node.store.scalar("SELECT count(*) FROM sessions") == 1
    # a token of another browser's session does not fit this one
    other = node.app.test_client()
    await login_as(node, org["owner_user_id"], org["organization_id"], client=other)
    _, other_html = await page(other, "/account")
    status, _ = await logout({"csrf_token": csrf(other_html)})
    assert status == 403
    # the anonymous token (before login) does not fit a session either
    anon = node.app.test_client()
    _, login_html = await page(anon, "/login")
    status, _ = await logout({"csrf_token": csrf(login_html)})
    assert status == 403
    status, _ = await logout({"csrf_token": good}, {"Origin": "http://testserver"})
    assert status == 303


async def test_cookies_are_secure_behind_https(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, base_url="https://genservice.example")
    try:
        r = await n.client.get("/login")
        cookie = r.headers["Set-Cookie"]
        assert "gs_anon=" in cookie and "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    finally:
        await stop_node(n)


async def test_cookies_are_secure_over_https(node):
    r = await node.client.get("/login", scheme="https")
    assert "Secure" in r.headers["Set-Cookie"]
    r = await node.app.test_client().get("/login")
    assert "Secure" not in r.headers["Set-Cookie"]


async def test_sign_in_flows_expire_after_ten_minutes(node, autojump_clock):
    from service.actors.sessions import FLOW_TTL, BeginFlow, TakeFlow
    ask = node.parts.sessions.ask
    kept = await ask("sessions", BeginFlow(provider="p", next_path="/account"))
    await trio.sleep(FLOW_TTL - 1)
    assert (await ask("sessions", TakeFlow(kept["state"])))["next_path"] == "/account"
    assert await ask("sessions", TakeFlow(kept["state"])) is None  # used once
    late = await ask("sessions", BeginFlow(provider="p", next_path="/account"))
    await trio.sleep(FLOW_TTL)
    assert await ask("sessions", TakeFlow(late["state"])) is None
    abandoned = await ask("sessions", BeginFlow(provider="p", next_path="/account"))
    await trio.sleep(FLOW_TTL)
    await ask("sessions", BeginFlow(provider="p", next_path="/account"))
    assert node.store.scalar("SELECT count(*) FROM login_flows") == 1
    assert abandoned["state"] not in json.dumps(node.store.all("SELECT * FROM login_flows"))
