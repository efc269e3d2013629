"""Sign-in with a real OpenID Connect provider (oidc-provider-mock in a subprocess): the code
flow with PKCE, state and nonce, the ID token checked against the provider's keys, identities
linked on (issuer, subject) only, verified emails only, invitations through the provider."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from service.clock import Clock
from service.config import Settings
from service.http.app import create_app
from service.node import build
from service.storage.db import Store
from service.storage.migrate import apply_all
from tests.conftest import OPERATOR, Node, run_parts, stop_node
from tests.pages import csrf, page

KEY = "testid"


@pytest.fixture
async def oidc_node(nursery, tmp_path, oidc_issuer):
    """A node on the wall clock (the provider's tokens carry real iat/exp) with one provider."""
    settings = Settings(data_dir=tmp_path, operator_token=OPERATOR, base_url="http://testserver", test_mode=True,
                        oidc_name="TestID", oidc_issuer=oidc_issuer, oidc_client_id="genservice",
                        oidc_client_secret="s3cret")
    apply_all(settings.db_path)
    store = Store(settings.db_path, inline=True)
    parts = build(settings, store, Clock())
    n = Node(parts, create_app(parts))
    n.scope, n.stopped = await run_parts(nursery, parts)
    n.issuer = oidc_issuer
    yield n
    await stop_node(n)


async def set_claims(issuer: str, sub: str, **claims) -> None:
    async with httpx.AsyncClient() as c:
        r = await c.put(f"{issuer}/users/{sub}", json=claims)
        assert r.status_code == 204


async def begin(node, *, form=None, from_page="/login") -> tuple[str, str]:
    """Press "Sign in with TestID" on `from_page`: returns (authorization URL, state)."""
    _, html = await page(node.client, from_page)
    assert "Sign in with TestID" in html or "Link TestID" in html
    r = await node.client.post(f"/login/oidc/{KEY}", form={"csrf_token": csrf(html), **(form or {})})
    assert r.status_code == 303, await r.get_data(as_text=True)
    url = r.headers["Location"]
    q = parse_qs(urlsplit(url).query)
    assert q["code_challenge_method"] == ["S256"] and q["nonce"] and q["state"]
    assert q["redirect_uri"] == [f"http://testserver/login/oidc/{KEY}/callback"]
    return url, q["state"][0]


async def authorize(url: str, sub: str) -> str:
    """Fill the provider's form (`sub`, Authorize); returns the callback path with its query."""
    async with httpx.AsyncClient() as c:
        form_page = await c.get(url)
        assert 'name="sub"' in form_page.text and "Authorize" in form_page.text
        r = await c.post(url, data={"sub": sub})
        assert r.status_code == 302, r.text
    loc = urlsplit(r.headers["Location"])
    return f"{loc.path}?{loc.query}"


async def sign_in(node, sub: str, **kw):
    url, _ = await begin(node, **kw)
    return await node.client.get(await authorize(url, sub))


async def body(r) -> str:
    return await r.get_data(as_text=True)


async def events(node, name: str) -> list[dict]:
    rows = node.store.all("SELECT data FROM events WHERE event = ? ORDER BY seq", (name,))
    return [json.loads(r["data"]) for r in rows]


async def test_new_person_gets_an_org_waiting_for_approval(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "alice-sub", email="alice@example.test", email_verified=True, name="Alice")
    r = await sign_in(n, "alice-sub")
    assert r.status_code == 303 and r.headers["Location"] == "/studio"
    cookie = r.headers["Set-Cookie"]
    assert "gs_session=" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert "Secure" not in cookie  # served over http here
    user = n.store.one("SELECT u.id, u.role, o.approved_at FROM users u JOIN organizations o "
                       "ON o.id = u.organization_id WHERE u.email = 'alice@example.test'")
    assert user["role"] == "owner" and user["approved_at"] is None
    ident = n.store.one("SELECT * FROM identities WHERE subject = 'alice-sub'")
    assert ident["issuer"] == n.issuer and ident["user_id"] == user["id"]
    r = await n.client.get("/account")
    assert r.status_code == 403 and "waiting for early-access approval" in await body(r)
    # approved by the operator: the account page opens
    org_id = n.store.scalar("SELECT organization_id FROM users WHERE id = ?", (user["id"],))
    assert (await n.op("POST", f"/organizations/{org_id}/approve")).status_code == 200
    r = await n.client.get("/account")
    assert r.status_code == 200 and "alice@example.test" in await body(r)


async def test_linked_on_issuer_and_subject_never_on_email(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "bob-sub", email="bob@example.test", email_verified=True)
    assert (await sign_in(n, "bob-sub")).status_code == 303
    bob = n.store.scalar("SELECT id FROM users WHERE email = 'bob@example.test'")
    await n.client.post("/logout", form={"csrf_token": csrf((await page(n.client, "/account"))[1])})
    # same subject, changed email at the provider: still Bob, nobody new
    await set_claims(n.issuer, "bob-sub", email="robert@example.test", email_verified=True)
    assert (await sign_in(n, "bob-sub")).status_code == 303
    sid = n.store.one("SELECT user_id FROM sessions ORDER BY created_at DESC LIMIT 1")
    assert sid["user_id"] == bob
    assert n.store.scalar("SELECT count(*) FROM users") == 1
    # another subject claiming Bob's verified email is not linked to Bob
    n.client.cookie_jar.clear()
    await set_claims(n.issuer, "mallory-sub", email="bob@example.test", email_verified=True)
    r = await sign_in(n, "mallory-sub")
    assert r.status_code == 409
    assert "An account with this email address already exists." in await body(r)
    assert n.store.scalar("SELECT count(*) FROM identities WHERE user_id = ?", (bob,)) == 1
    assert n.store.scalar("SELECT count(*) FROM users") == 1


async def test_unverified_email_is_refused(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "carol-sub", email="carol@example.test", email_verified=False)
    r = await sign_in(n, "carol-sub")
    assert r.status_code == 403
    assert "Your TestID account has no verified email address." in await body(r)
    assert n.store.scalar("SELECT count(*) FROM users") == 0
    assert "gs_session" not in r.headers.get("Set-Cookie", "")


async def test_bad_state_is_refused(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "dave-sub", email="dave@example.test", email_verified=True)
    url, state = await begin(n)
    callback = await authorize(url, "dave-sub")
    forged = callback.replace(f"state={state}", "state=forged-state")
    r = await n.client.get(forged)
    assert r.status_code == 400
    assert "This sign-in could not be matched to this browser, or it took too long." in await body(r)
    # another browser (no flow cookie) bringing the genuine callback is refused too
    n.client.cookie_jar.clear()
    r = await n.client.get(callback)
    assert r.status_code == 400
    assert n.store.scalar("SELECT count(*) FROM users") == 0


async def test_nonce_mismatch_is_refused(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "erin-sub", email="erin@example.test", email_verified=True)
    url, state = await begin(n)
    callback = await authorize(url, "erin-sub")
    # the flow's nonce no longer matches the one the provider put in the ID token
    await n.store.write(lambda conn: conn.execute("UPDATE login_flows SET nonce_hash = ?", ("0" * 64,)))
    r = await n.client.get(callback)
    assert r.status_code == 401
    assert "The sign-in with TestID could not be verified. Start again." in await body(r)
    assert n.store.scalar("SELECT count(*) FROM users") == 0


async def test_callback_is_single_use(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "fay-sub", email="fay@example.test", email_verified=True)
    url, _ = await begin(n)
    callback = await authorize(url, "fay-sub")
    assert (await n.client.get(callback)).status_code == 303
    r = await n.client.get(callback)
    assert r.status_code == 400


async def test_invitation_through_the_provider(oidc_node):
    n = oidc_node
    org = await n.create_org()
    r = await n.op("POST", f"/organizations/{org['organization_id']}/invitations",
                   {"email": "gus@example.test", "role": "member"})
    token = (await r.get_json())["data"]["token"]
    inv_page = f"/invitations/accept?token={token}"
    # the provider's verified email is someone else's: refused, the invitation stays open
    await set_claims(n.issuer, "other-sub", email="other@example.test", email_verified=True)
    r = await sign_in(n, "other-sub", form={"invitation": token}, from_page=inv_page)
    assert r.status_code == 403
    assert "The invitation was sent to a different email address." in await body(r)
    assert await events(n, "member.joined") == []
    # the invited email, verified: joined once, identity linked, logged in
    await set_claims(n.issuer, "gus-sub", email="gus@example.test", email_verified=True)
    r = await sign_in(n, "gus-sub", form={"invitation": token}, from_page=inv_page)
    assert r.status_code == 303
    joined = await events(n, "member.joined")
    assert [e["member_email"] for e in joined] == ["gus@example.test"]
    gus = n.store.one("SELECT id, role FROM users WHERE email = 'gus@example.test'")
    assert gus["role"] == "member"
    assert n.store.scalar("SELECT user_id FROM identities WHERE subject = 'gus-sub'") == gus["id"]
    r = await n.client.get("/account")
    assert r.status_code == 200 and "gus@example.test" in await body(r)
    # the link is used: its page says so
    r = await n.client.get(inv_page)
    assert r.status_code == 404
    assert "The invitation is not valid: unknown, already used" in await body(r)


async def test_sign_in_again_rotates_the_session(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "hal-sub", email="hal@example.test", email_verified=True)
    first = await sign_in(n, "hal-sub")
    old = first.headers["Set-Cookie"].split("gs_session=")[1].split(";")[0]
    second = await sign_in(n, "hal-sub")  # the same browser, still holding the first session
    new = second.headers["Set-Cookie"].split("gs_session=")[1].split(";")[0]
    assert old != new
    assert n.store.scalar("SELECT count(*) FROM sessions") == 1
    n.client.set_cookie("localhost", "gs_session", old)
    assert (await n.client.get("/account")).status_code == 303


async def test_provider_refusal_and_missing_code(oidc_node):
    n = oidc_node
    url, state = await begin(n)
    async with httpx.AsyncClient() as c:
        r = await c.post(url, data={"action": "deny"})  # the provider's Deny button
    loc = urlsplit(r.headers["Location"])
    assert "error=access_denied" in loc.query
    # without `state` (this provider leaves it out of a denial) nothing can be matched
    r = await n.client.get(f"{loc.path}?{loc.query}")
    assert r.status_code == 400 and "could not be matched to this browser" in await body(r)
    url, state = await begin(n)
    r = await n.client.get(f"{loc.path}?{loc.query}&state={state}")
    assert r.status_code == 400 and "The sign-in with TestID was cancelled or refused." in await body(r)
    _, state = await begin(n)
    r = await n.client.get(f"/login/oidc/{KEY}/callback?state={state}")
    assert r.status_code == 400 and "TestID sent no authorization code. Start again." in await body(r)


async def test_unknown_provider(oidc_node):
    _, html = await page(oidc_node.client, "/login")
    r = await oidc_node.client.post("/login/oidc/nope", form={"csrf_token": csrf(html)})
    assert r.status_code == 404 and "This identity provider is not configured." in await body(r)
    r = await oidc_node.client.get("/login/oidc/nope/callback?state=x&code=y")
    assert r.status_code == 404


async def test_removed_member_cannot_sign_in_with_the_provider(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "ivy-sub", email="ivy@example.test", email_verified=True)
    assert (await sign_in(n, "ivy-sub")).status_code == 303
    ivy = n.store.one("SELECT id, organization_id FROM users WHERE email = 'ivy@example.test'")
    await n.store.write(lambda conn: conn.execute("UPDATE users SET role = 'admin' WHERE id = ?", (ivy["id"],)))
    await n.op("POST", f"/organizations/{ivy['organization_id']}/members",
               {"email": "second@example.test", "role": "owner"})
    r = await n.op("DELETE", f"/organizations/{ivy['organization_id']}/members/{ivy['id']}")
    assert r.status_code == 204
    assert n.store.scalar("SELECT count(*) FROM sessions") == 0  # ended with the removal
    r = await sign_in(n, "ivy-sub")
    assert r.status_code == 403 and "Your membership of this organization has ended." in await body(r)


async def test_link_a_provider_to_a_logged_in_person(oidc_node):
    n = oidc_node
    org = await n.create_org(email="jo@acme.test")
    from service.actors.sessions import StartSession
    out = await n.parts.sessions.ask("sessions", StartSession(org["owner_user_id"], org["organization_id"]))
    n.client.set_cookie("localhost", "gs_session", out["token"])
    _, html = await page(n.client, "/account")
    assert "Link TestID" in html
    await set_claims(n.issuer, "jo-sub", email="jo.private@example.test", email_verified=True)
    r = await sign_in(n, "jo-sub", form={"next": "/account"}, from_page="/account")
    assert r.status_code == 303 and r.headers["Location"] == "/account"
    assert n.store.scalar("SELECT user_id FROM identities WHERE subject = 'jo-sub'") == org["owner_user_id"]
    assert "TestID: linked." in (await page(n.client, "/account"))[1]
    # later, from a fresh browser, the provider logs Jo in
    n.client.cookie_jar.clear()
    assert (await sign_in(n, "jo-sub")).status_code == 303
    assert (await n.client.get("/account")).status_code == 200


async def test_signup_closed_refuses_new_people(oidc_node):
    n = oidc_node
    n.parts.settings.signup = "closed"
    await set_claims(n.issuer, "kim-sub", email="kim@example.test", email_verified=True)
    r = await sign_in(n, "kim-sub")
    assert r.status_code == 403 and "Sign-up is by invitation only." in await body(r)
    assert n.store.scalar("SELECT count(*) FROM users") == 0


async def test_unreachable_or_misconfigured_provider(nursery, tmp_path, oidc_issuer):
    from tests.conftest import start_node
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    n = await start_node(nursery, tmp_path, test_mode=True, oidc_providers=[
        {"name": "Down", "issuer": dead, "client_id": "c"},
        {"name": "Wrong", "issuer": oidc_issuer + "/", "client_id": "c"}])
    try:
        _, html = await page(n.client, "/login")
        assert "Sign in with Down" in html and "Sign in with Wrong" in html
        r = await n.client.post("/login/oidc/down", form={"csrf_token": csrf(html)})
        assert r.status_code == 502 and "Down could not be reached. Try again in a moment." in await body(r)
        r = await n.client.post("/login/oidc/wrong", form={"csrf_token": csrf(html)})
        assert r.status_code == 502 and "Wrong is not configured correctly (issuer mismatch)." in await body(r)
    finally:
        await stop_node(n)


def test_provider_settings():
    from service.net.oidc import configured
    s = Settings(oidc_name="Corp SSO", oidc_issuer="https://sso.example", oidc_client_id="id",
                 oidc_providers=[{"name": "Other", "issuer": "https://o.example", "client_id": "x",
                                  "client_secret": "y"}])
    got = configured(s)
    assert [(p.key, p.name, p.client_secret) for p in got] == [("corp-sso", "Corp SSO", None), ("other", "Other", "y")]
    with pytest.raises(ValueError, match="missing issuer"):
        configured(Settings(oidc_name="X", oidc_client_id="id"))
    with pytest.raises(ValueError, match="configured twice"):
        configured(Settings(oidc_providers=[{"name": "A", "issuer": "i", "client_id": "c"}] * 2))
    with pytest.raises(ValueError, match="unknown keys scope"):
        configured(Settings(oidc_providers=[{"name": "A", "issuer": "i", "client_id": "c", "scope": "x"}]))


async def test_bad_email_shape_is_refused(oidc_node):
    n = oidc_node
    await set_claims(n.issuer, "shape-sub", email="a@x.test, b@x.test", email_verified=True)
    r = await sign_in(n, "shape-sub")
    assert r.status_code == 403
    assert "The email address of your TestID account is not one this service can use." in await body(r)
    assert n.store.scalar("SELECT count(*) FROM users") == 0


async def test_invitation_never_links_a_provider_to_an_existing_person(oidc_node):
    """Issue 22, C1: an existing person (here operator-made, no password) accepts only as
    themselves; a provider account that claims their verified email is not linked."""
    from service.actors.accounts.actor import NOT_LINKED

    n = oidc_node
    await n.create_org(name="Victim", email="ceo@victim.test")
    other = await n.create_org(name="Other", email="boss@other.test")
    r = await n.op("POST", f"/organizations/{other['organization_id']}/invitations",
                   {"email": "ceo@victim.test", "role": "owner"})
    token = (await r.get_json())["data"]["token"]
    await set_claims(n.issuer, "claims-ceo", email="ceo@victim.test", email_verified=True)
    r = await sign_in(n, "claims-ceo", form={"invitation": token}, from_page=f"/invitations/accept?token={token}")
    assert r.status_code == 403 and NOT_LINKED in await body(r)
    assert n.store.scalar("SELECT count(*) FROM identities") == 0
    assert await events(n, "member.joined") == []


async def test_linked_provider_accepts_for_its_person_and_linking_mails(oidc_node):
    n = oidc_node
    home = await n.create_org(name="Home", email="lee@acme.test")
    from service.actors.sessions import StartSession
    out = await n.parts.sessions.ask("sessions", StartSession(home["owner_user_id"], home["organization_id"]))
    n.client.set_cookie("localhost", "gs_session", out["token"])
    await set_claims(n.issuer, "lee-sub", email="lee@acme.test", email_verified=True)
    assert (await sign_in(n, "lee-sub", form={"next": "/account"}, from_page="/account")).status_code == 303
    [notice] = n.store.all("SELECT body FROM emails WHERE kind = 'credential_changed' AND to_address = 'lee@acme.test'")
    assert "an identity-provider account" in notice["body"] and "was linked" in notice["body"]
    n.client.cookie_jar.clear()
    other = await n.create_org(name="Other", email="boss@other.test")
    r = await n.op("POST", f"/organizations/{other['organization_id']}/invitations",
                   {"email": "lee@acme.test", "role": "member"})
    token = (await r.get_json())["data"]["token"]
    r = await sign_in(n, "lee-sub", form={"invitation": token}, from_page=f"/invitations/accept?token={token}")
    assert r.status_code == 303
    assert n.store.scalar("SELECT organization_id FROM sessions ORDER BY rowid DESC LIMIT 1") == other["organization_id"]
    assert n.store.scalar("SELECT count(*) FROM identities") == 1
    # the person now has two organizations: a later provider sign-in goes to the switcher
    n.client.cookie_jar.clear()
    r = await sign_in(n, "lee-sub")
    assert r.status_code == 303 and r.headers["Location"].startswith("/organizations?next=")


async def test_unlink_keeps_a_way_in_and_mails(oidc_node):
    from service.actors.accounts.credentials import ONLY_WAY_IN
    from service.actors.sessions import StartSession

    n = oidc_node
    org = await n.create_org(email="uma@acme.test")  # operator-made: no password
    out = await n.parts.sessions.ask("sessions", StartSession(org["owner_user_id"], org["organization_id"]))
    n.client.set_cookie("localhost", "gs_session", out["token"])
    await set_claims(n.issuer, "uma-sub", email="uma@acme.test", email_verified=True)
    assert (await sign_in(n, "uma-sub", form={"next": "/account"}, from_page="/account")).status_code == 303
    _, html = await page(n.client, "/account")
    assert "Unlink TestID" in html
    r = await n.client.post(f"/account/identities/{KEY}/unlink", form={"csrf_token": csrf(html)})
    assert r.status_code == 409 and ONLY_WAY_IN in await body(r)
    assert n.store.scalar("SELECT count(*) FROM identities") == 1
    r = await n.client.post("/account/password", form={"csrf_token": csrf(html), "new_password": "uma's own passphrase"})
    assert r.status_code == 303
    _, html = await page(n.client, "/account")
    r = await n.client.post(f"/account/identities/{KEY}/unlink", form={"csrf_token": csrf(html)})
    assert r.status_code == 303 and n.store.scalar("SELECT count(*) FROM identities") == 0
    mails = [row["body"] for row in n.store.all("SELECT body FROM emails WHERE kind = 'credential_changed' "
                                                "AND to_address = 'uma@acme.test' ORDER BY rowid")]
    assert len(mails) == 3 and "was linked" in mails[0] and "a password was set" in mails[1]
    assert "was unlinked" in mails[2]
    r = await n.client.post(f"/account/identities/{KEY}/unlink", form={"csrf_token": csrf(html)})
    assert r.status_code == 404 and "This identity provider is not linked to your account." in await body(r)


async def test_a_reset_unlinks_every_provider_and_says_so(oidc_node):
    """Someone who held the account for a while (a sign-up's password confirmed by a mail
    scanner, a stolen password) could link their own provider account; a reset, which proves
    the mailbox, must not leave it a way in."""
    from service.actors.sessions import StartSession
    from tests.test_password_reset import set_password

    n = oidc_node
    org = await n.create_org(email="vic@acme.test")
    out = await n.parts.sessions.ask("sessions", StartSession(org["owner_user_id"], org["organization_id"]))
    n.client.set_cookie("localhost", "gs_session", out["token"])
    await set_claims(n.issuer, "intruder-sub", email="intruder@elsewhere.test", email_verified=True)
    assert (await sign_in(n, "intruder-sub", form={"next": "/account"}, from_page="/account")).status_code == 303
    assert n.store.scalar("SELECT count(*) FROM identities") == 1
    n.client.cookie_jar.clear()
    assert (await sign_in(n, "intruder-sub")).status_code == 303  # the link is a way in, until the reset

    n.client.cookie_jar.clear()
    r = await n.op("POST", "/password-resets", {"email": "vic@acme.test"})
    reset_url = (await r.get_json())["data"]["reset_url"]
    assert (await set_password(n.client, reset_url.removeprefix("http://testserver"))).status_code == 303
    assert n.store.scalar("SELECT count(*) FROM identities") == 0
    [notice] = n.store.all("SELECT body FROM emails WHERE kind = 'credential_changed' AND to_address = 'vic@acme.test' "
                           "AND body LIKE '%password was reset%'")
    assert (f"the password was reset with a link sent to this address, and the identity-provider accounts linked "
            f"to it ({n.issuer}) were unlinked (link yours again on your account page)") in notice["body"]
    n.client.cookie_jar.clear()
    r = await sign_in(n, "intruder-sub")
    assert r.status_code == 303  # a stranger now: signed up as themselves, not into vic's account
    assert n.store.scalar("SELECT u.email FROM identities i JOIN users u ON u.id = i.user_id") == "intruder@elsewhere.test"
    assert [row["email"] for row in n.store.all("SELECT u.email FROM sessions s JOIN users u ON u.id = s.user_id "
                                                "ORDER BY s.created_at")] == ["vic@acme.test", "intruder@elsewhere.test"]
