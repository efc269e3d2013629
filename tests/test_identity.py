"""A person is one identity across organizations (issue 22: C1, M4, L8, L9): every route by
which a credential can be set, the probe's cross-organization takeover through the pages and
through the API (now refused), the organization switcher, the mail after every credential
change, pre-account hijack, reset links dying with a password change, and the shapes of
invited addresses and organization names."""

from __future__ import annotations

import pytest

from service import passwords
from service.actors.accounts.actor import EXISTING_PERSON, INVITE_EMAIL_MISMATCH
from service.actors.accounts.org_rules import INVALID_EMAIL
from service.actors.accounts.people import INVALID_RESET
from service.actors.sessions import SetPassword, StartSession
from service.http.routes.invitation_page import NO_PASSWORD
from service.http.routes.operator_people import MAILS_RESETS
from service.http.routes.organizations import NOT_A_MEMBER
from service.http.routes.signup import CONTROL_NAME
from tests.pages import csrf, page

PW = "correct horse battery"
ATTACKER_PW = "attacker chose this one"
BAD = "Email or password is incorrect."
CHANGED = "Your genservice sign-in was changed"

pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def set_pw(node, org: dict, email: str, pw: str = PW) -> None:
    await node.parts.sessions.ask("sessions", SetPassword(email, await passwords.hash_password(pw),
                                                          org["owner_user_id"], org["organization_id"]))
    await node.store.write(lambda conn: conn.execute("DELETE FROM sessions"))  # the one SetPassword opened


async def login(client, email, pw=PW, next_path=None):
    _, html = await page(client, "/login")
    form = {"csrf_token": csrf(html), "email": email, "password": pw}
    if next_path:
        form["next"] = next_path
    r = await client.post("/login", form=form)
    return r, await r.get_data(as_text=True)


async def invite_api(node, org_id, email, role="member") -> dict:
    r = await node.op("POST", f"/organizations/{org_id}/invitations", {"email": email, "role": role})
    assert r.status_code == 201, await r.get_data(as_text=True)
    return (await r.get_json())["data"]


def credential_mails(node, email: str) -> list[str]:
    return [r["body"] for r in node.store.all("SELECT body FROM emails WHERE kind = 'credential_changed' "
                                              "AND to_address = ? ORDER BY created_at, rowid", (email,))]


def password_of(node, email: str) -> str | None:
    return node.store.scalar("SELECT password_hash FROM passwords WHERE email = ? COLLATE NOCASE", (email,))


async def attacker_and_victim(node) -> tuple[dict, dict]:
    """The probe's setting: an operator-made victim owner (no password, as the README's first
    step makes them) and an attacker who owns an organization and logs in."""
    victim = await node.create_org(name="ProdVictim", email="CEO@ProdVictim.test")
    attacker = await node.create_org(name="Evil", email="boss@evil.test")
    await set_pw(node, attacker, "boss@evil.test")
    r, _ = await login(node.client, "boss@evil.test")
    assert r.status_code == 303
    return victim, attacker


# -- C1: the probe's attack, through the pages ----------------------------------------------
async def test_c1_takeover_through_the_pages_is_refused(node):
    victim, attacker = await attacker_and_victim(node)
    _, html = await page(node.client, "/members")
    r = await node.client.post("/members/invite", form={"csrf_token": csrf(html), "email": "CEO@ProdVictim.test",
                                                        "role": "admin"})
    assert r.status_code == 303  # Post/Redirect/Get: the page after it says what was done
    _, text = await page(node.client, "/members")
    assert "Invitation sent to CEO@ProdVictim.test" in text
    assert "/invitations/accept" not in text and "token=" not in text and "inv_" not in text
    inv_id = node.store.scalar("SELECT id FROM invitations WHERE organization_id = ?", (attacker["organization_id"],))
    r = await node.client.post(f"/members/invitations/{inv_id}/resend", form={"csrf_token": csrf(html)})
    assert r.status_code == 303
    _, text = await page(node.client, "/members")
    assert "Invitation sent to CEO@ProdVictim.test" in text
    assert "/invitations/accept" not in text and "inv_" not in text
    # even holding the link (here: the operator's answer leaked), the page sets no password
    leaked = (await (await node.op("POST", f"/organizations/{attacker['organization_id']}/invitations/"
                                           f"{inv_id}/resend")).get_json())["data"]["token"]
    other = node.app.test_client()
    r, html = await page(other, f"/invitations/accept?token={leaked}")
    assert r.status_code == 200 and NO_PASSWORD in html
    assert 'name="password"' not in html
    _, login_html = await page(other, "/login")  # a forged post: the page itself offers no form
    r = await other.post("/invitations/accept", form={"csrf_token": csrf(login_html), "token": leaked,
                                                      "password": ATTACKER_PW})
    assert r.status_code == 409 and EXISTING_PERSON in await r.get_data(as_text=True)
    assert password_of(node, "CEO@ProdVictim.test") is None
    assert node.store.scalar("SELECT accepted_at FROM invitations WHERE id = ?", (inv_id,)) is None
    r, text = await login(node.app.test_client(), "CEO@ProdVictim.test", ATTACKER_PW)
    assert r.status_code == 401 and BAD in text


async def test_c1_takeover_through_the_api_is_refused(node):
    victim, attacker = await attacker_and_victim(node)
    inv = await invite_api(node, attacker["organization_id"], "ceo@prodvictim.test", "owner")
    client = node.app.test_client()
    _, html = await page(client, "/login")  # a forged post: the invitation page offers no password field
    r = await client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                       "password": ATTACKER_PW})
    assert r.status_code == 409
    # the actor refuses it too, whoever asks (a route that forgot the check)
    with pytest.raises(Exception) as e:
        await node.parts.accounts.accept_invite(token=inv["token"],
                                                password_hash=await passwords.hash_password(ATTACKER_PW))
    assert getattr(e.value, "status", None) == 409 and e.value.message == EXISTING_PERSON
    # the operator's accept (`genservice admin accept-invite`): a membership, never a credential
    r = await node.op("POST", "/invitations/accept", {"token": inv["token"]})
    assert r.status_code == 201
    assert password_of(node, "CEO@ProdVictim.test") is None
    assert node.store.scalar("SELECT count(*) FROM identities") == 0
    assert (await login(node.app.test_client(), "CEO@ProdVictim.test", ATTACKER_PW))[0].status_code == 401


# -- accepting an invitation: every way ---------------------------------------------------
async def test_existing_person_accepts_with_their_password_and_it_stays(node):
    home = await node.create_org(name="Home", email="multi@acme.test")
    await set_pw(node, home, "multi@acme.test")
    before = password_of(node, "multi@acme.test")
    other = await node.create_org(name="Other", email="boss@other.test")
    inv = await invite_api(node, other["organization_id"], "multi@acme.test", "admin")
    _, html = await page(node.client, f"/invitations/accept?token={inv['token']}")
    assert "You already have an account with this email address: enter its password." in html
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                            "password": "not my password at all"})
    assert r.status_code == 401
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                            "password": PW})
    assert r.status_code == 303 and r.headers["Location"] == "/studio"
    assert password_of(node, "multi@acme.test") == before
    s = node.store.one("SELECT organization_id, org_chosen FROM sessions")
    assert s["organization_id"] == other["organization_id"] and s["org_chosen"] == 1
    assert len(credential_mails(node, "multi@acme.test")) == 1  # the set_pw above, nothing more


async def test_signed_in_person_accepts_with_one_button(node):
    home = await node.create_org(name="Home", email="pat@acme.test")
    other = await node.create_org(name="Other", email="boss@other.test")
    inv = await invite_api(node, other["organization_id"], "Pat@Acme.test")
    out = await node.parts.sessions.ask("sessions", StartSession(home["owner_user_id"], home["organization_id"]))
    node.client.set_cookie("localhost", "gs_session", out["token"])
    _, html = await page(node.client, f"/invitations/accept?token={inv['token']}")
    assert 'name="password"' not in html and "Accept invitation" in html
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"]})
    assert r.status_code == 303
    assert node.store.scalar("SELECT organization_id FROM sessions") == other["organization_id"]
    assert password_of(node, "pat@acme.test") is None and credential_mails(node, "pat@acme.test") == []


async def test_signed_in_as_someone_else_cannot_accept(node):
    home = await node.create_org(name="Home", email="eve@acme.test")
    other = await node.create_org(name="Other", email="boss@other.test")
    inv = await invite_api(node, other["organization_id"], "new@acme.test")
    out = await node.parts.sessions.ask("sessions", StartSession(home["owner_user_id"], home["organization_id"]))
    node.client.set_cookie("localhost", "gs_session", out["token"])
    _, html = await page(node.client, f"/invitations/accept?token={inv['token']}")
    assert "You are signed in as eve@acme.test, and this invitation is for new@acme.test." in html
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                            "password": ATTACKER_PW})
    assert r.status_code == 403 and INVITE_EMAIL_MISMATCH in await r.get_data(as_text=True)
    assert password_of(node, "new@acme.test") is None


async def test_new_address_sets_a_password_from_the_mailed_link_and_is_told(node):
    org = await node.create_org()
    inv = await invite_api(node, org["organization_id"], "fresh@acme.test")
    _, html = await page(node.client, f"/invitations/accept?token={inv['token']}")
    r = await node.client.post("/invitations/accept", form={"csrf_token": csrf(html), "token": inv["token"],
                                                            "password": PW})
    assert r.status_code == 303 and password_of(node, "fresh@acme.test") is not None
    [mail] = credential_mails(node, "fresh@acme.test")
    assert "a password was set" in mail and "http://testserver/forgot-password" in mail


# -- the switcher --------------------------------------------------------------------------
async def test_several_organizations_pick_one_after_login(node):
    a = await node.create_org(name="Alpha", email="two@orgs.test")
    b = await node.create_org(name="Beta", email="boss@beta.test")
    await node.add_member(b["organization_id"], "admin", "two@orgs.test")
    await set_pw(node, a, "two@orgs.test")
    await node.store.write(lambda conn: conn.execute("DELETE FROM sessions"))
    r, _ = await login(node.client, "two@orgs.test", next_path="/keys")
    assert r.status_code == 303 and r.headers["Location"] == "/organizations?next=/keys"
    assert node.store.scalar("SELECT org_chosen FROM sessions") == 0
    r = await node.client.get("/account")  # no page acts in an organization nobody picked
    assert r.status_code == 303 and r.headers["Location"] == "/organizations?next=/account"
    r, html = await page(node.client, "/organizations?next=/keys")
    assert r.status_code == 200 and "Open Alpha" in html and "Open Beta" in html
    r = await node.client.post("/organizations/switch", form={"csrf_token": csrf(html), "next": "/keys",
                                                              "organization_id": b["organization_id"]})
    assert r.status_code == 303 and r.headers["Location"] == "/keys"
    s = node.store.one("SELECT organization_id, org_chosen FROM sessions")
    assert s["organization_id"] == b["organization_id"] and s["org_chosen"] == 1
    r, html = await page(node.client, "/members")  # the dashboard header's switcher
    assert r.status_code == 200 and "Switch organization" in html and "Alpha" in html
    r = await node.client.post("/organizations/switch", form={"csrf_token": csrf(html),
                                                              "organization_id": a["organization_id"]})
    assert r.status_code == 303
    assert node.store.scalar("SELECT organization_id FROM sessions") == a["organization_id"]
    stranger = await node.create_org(name="Gamma", email="g@gamma.test")
    _, html = await page(node.client, "/organizations")
    r = await node.client.post("/organizations/switch", form={"csrf_token": csrf(html),
                                                              "organization_id": stranger["organization_id"]})
    assert r.status_code == 404 and NOT_A_MEMBER in await r.get_data(as_text=True)
    r = await node.app.test_client().get("/organizations")
    assert r.status_code == 303 and r.headers["Location"].startswith("/login")


async def test_one_organization_lands_straight_in_it(node):
    org = await node.create_org(name="Solo", email="solo@acme.test")
    await set_pw(node, org, "solo@acme.test")
    r, _ = await login(node.client, "solo@acme.test")
    assert r.status_code == 303 and r.headers["Location"] == "/studio"
    _, html = await page(node.client, "/members")
    assert "Switch organization" not in html


# -- credential changes mail the person; L8 ------------------------------------------------
async def test_password_change_mails_and_kills_older_reset_links(node):
    org = await node.create_org(email="l8@acme.test")
    await set_pw(node, org, "l8@acme.test")
    r = await node.op("POST", "/password-resets", {"email": "l8@acme.test"})
    link = (await r.get_json())["data"]["reset_url"].removeprefix("http://testserver")
    assert (await node.client.get(link)).status_code == 200
    await login(node.client, "l8@acme.test")
    _, html = await page(node.client, "/account")
    r = await node.client.post("/account/password", form={"csrf_token": csrf(html), "current_password": PW,
                                                           "new_password": "a different passphrase"})
    assert r.status_code == 303
    r = await node.client.get(link)
    assert r.status_code == 404 and INVALID_RESET in await r.get_data(as_text=True)
    mails = credential_mails(node, "l8@acme.test")
    assert len(mails) == 2 and "the password was changed" in mails[1]


async def test_operator_reset_link_only_without_smtp(mail_node):
    await mail_node.create_org(email="op@acme.test")
    r = await mail_node.op("POST", "/password-resets", {"email": "op@acme.test"})
    assert r.status_code == 409 and (await r.get_json())["error"]["message"] == MAILS_RESETS


# -- M4: pre-account hijack ----------------------------------------------------------------
async def sign_up(client, email, password, organization):
    _, html = await page(client, "/signup")
    return await client.post("/signup", form={"csrf_token": csrf(html), "email": email, "password": password,
                                              "organization": organization})


async def test_m4_pre_account_hijack(mail_node, smtp):
    from smtp_server import link_in

    node, email = mail_node, "victim@hijack.test"
    attacker, victim = node.app.test_client(), node.app.test_client()
    assert (await sign_up(attacker, email, ATTACKER_PW, "Attacker Org")).status_code == 200
    assert password_of(node, email) is None  # an unconfirmed sign-up sets no credential
    assert (await sign_up(victim, email, PW, "Victim Org")).status_code == 200  # not blocked, not absorbed
    mails = await smtp.wait_for(email, 2)
    [first] = [m for m in mails if "Attacker Org" in m.get_body(("plain",)).get_content()]
    [second] = [m for m in mails if "Victim Org" in m.get_body(("plain",)).get_content()]
    r = await victim.get(link_in(second, "http://testserver/confirm?token=").removeprefix("http://testserver"))
    assert r.status_code == 200 and "Victim Org" in await r.get_data(as_text=True)
    rows = {o["name"]: o["status"] for o in (await (await node.op("GET", "/organizations")).get_json())["data"]}
    assert rows == {"Attacker Org": "unconfirmed", "Victim Org": "pending"}
    assert (await login(node.app.test_client(), email, ATTACKER_PW))[0].status_code == 401
    assert (await login(node.app.test_client(), email, PW))[0].status_code == 303
    victims = password_of(node, email)
    # the attacker's link, followed later, confirms only its own organization: the password stays the victim's
    await node.client.get(link_in(first, "http://testserver/confirm?token=").removeprefix("http://testserver"))
    assert password_of(node, email) == victims
    assert node.store.scalar("SELECT count(*) FROM signup_passwords") == 0


async def test_reset_ends_sessions_and_can_revoke_keys(node):
    org = await node.create_org(email="keys@acme.test")
    await set_pw(node, org, "keys@acme.test")
    minted = org["api_key"]
    assert (await node.call("GET", "/v1/projects", minted)).status_code == 200

    async def reset(revoke: bool):
        r = await node.op("POST", "/password-resets", {"email": "keys@acme.test"})
        link = (await r.get_json())["data"]["reset_url"].removeprefix("http://testserver")
        client = node.app.test_client()
        _, html = await page(client, link)
        assert 'name="revoke_keys"' in html
        form = {"csrf_token": csrf(html), "token": link.split("=", 1)[1], "password": "reset passphrase one"}
        if revoke:
            form["revoke_keys"] = "1"
        return await client.post("/reset-password", form=form)

    other = node.app.test_client()
    await login(other, "keys@acme.test")
    assert (await reset(False)).status_code == 303
    assert (await other.get("/account")).status_code == 303  # the other session ended
    assert (await node.call("GET", "/v1/projects", minted)).status_code == 200
    assert (await reset(True)).status_code == 303
    assert (await node.call("GET", "/v1/projects", minted)).status_code == 401
    assert node.store.scalar("SELECT count(*) FROM events WHERE event = 'api_key.revoked'") == 1
    assert "the password was reset" in credential_mails(node, "keys@acme.test")[-1]


# -- L9: shapes of invited addresses and organization names --------------------------------
@pytest.mark.parametrize("email", ["a@x.test, b@x.test", "a@x.test\nBcc: b@x.test", "Name <a@x.test>",
                                   "a@x.test;b@x.test", "x" * 250 + "@x.test", ""])
async def test_invitation_email_must_be_one_address(node, org, email):
    r = await node.op("POST", f"/organizations/{org['organization_id']}/invitations", {"email": email, "role": "member"})
    assert r.status_code == 422
    e = (await r.get_json())["error"]
    assert e["code"] == "request.validation_failed" and e["message"] == INVALID_EMAIL
    assert node.store.scalar("SELECT count(*) FROM invitations") == 0


@pytest.mark.parametrize("name, message", [
    ("Acme\nINFO forged line", "name cannot contain line breaks or control characters."),
    ("Acme\x1b[31m", "name cannot contain line breaks or control characters."),
    ("Acme\u202egnp.exe", "name cannot contain line breaks or control characters."),
    ("   ", "name must be 1 to 200 characters."),
    ("x" * 201, "name must be 1 to 200 characters."),
])
async def test_organization_name_shape(node, name, message):
    r = await node.op("POST", "/organizations", {"name": name, "owner_email": "o@acme.test"})
    assert r.status_code == 422
    e = (await r.get_json())["error"]
    assert e["code"] == "request.validation_failed" and e["message"] == message
    assert node.store.scalar("SELECT count(*) FROM organizations") == 0


async def test_sign_up_refuses_control_characters_in_the_name(node):
    r = await sign_up(node.client, "ctl@acme.test", PW, "Acme\x00Corp")
    assert r.status_code == 422 and CONTROL_NAME in await r.get_data(as_text=True)


async def test_no_invitation_link_in_the_log_with_smtp(mail_node, smtp, caplog):
    """With SMTP set the invitation link reaches the invited mailbox and nothing else: not
    the log (the mail's, the request log of the page it opens), not a page."""
    import logging

    from smtp_server import text_part

    caplog.set_level(logging.DEBUG)
    org = await mail_node.create_org()
    inv = await invite_api(mail_node, org["organization_id"], "logged@acme.test")
    [mail] = await smtp.wait_for("logged@acme.test")
    assert f"http://testserver/invitations/accept?token={inv['token']}" in text_part(mail)
    assert (await mail_node.client.get(f"/invitations/accept?token={inv['token']}")).status_code == 200
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name != "mail.log")  # mail.log: the test's SMTP server
    assert inv["token"] not in ours and "invitations/accept?token" not in ours


def test_admin_accept_invite_is_the_operator_route():
    """`genservice admin accept-invite TOKEN` is the operator's accept: a membership, never a
    credential (test_c1_takeover_through_the_api_is_refused)."""
    from service.cli import build_parser

    args = build_parser().parse_args(["admin", "accept-invite", "inv_x"])
    assert args.handler(args) == ("POST", "/invitations/accept", {"token": "inv_x"})


async def test_held_sign_up_passwords_go_once_their_link_is_dead(node, mock_clock):
    await sign_up(node.client, "late@hijack.test", PW, "Never Confirmed")
    assert node.store.scalar("SELECT count(*) FROM signup_passwords") == 1
    node.clock.advance(7 * 86400 + 1)
    await sign_up(node.app.test_client(), "next@hijack.test", PW, "Next One")
    assert [r["email"] for r in node.store.all("SELECT email FROM signup_passwords")] == ["next@hijack.test"]
