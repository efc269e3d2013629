"""The operator console without a browser (Quart test client): who gets in (the token, listed
people), refusals (signed out, not an operator, wrong token, throttled, forged form, expired
session), the audit log, and every page answering."""

from __future__ import annotations

import pytest

from service import passwords
from service.actors.sessions import SetPassword
from service.console import IDLE
from tests.conftest import OPERATOR, start_node, stop_node
from tests.pages import csrf, page

PW = "correct horse battery"
FORGED = "This form was not sent from this site, or the page was open too long."
PAGES = ("/operator", "/operator/organizations", "/operator/support", "/operator/engines", "/operator/jobs",
         "/operator/catalog", "/operator/mail", "/operator/audit")

pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def sign_in(client, token: str = OPERATOR):
    _, html = await page(client, "/operator/login")
    return await client.post("/operator/login", form={"csrf_token": csrf(html), "token": token, "next": "/operator"})


async def console_form(client, path: str, form: dict, token_from: str = "/operator"):
    """POST `form` with the CSRF token of the console page at `token_from`."""
    _, html = await page(client, token_from)
    return await client.post(path, form={"csrf_token": csrf(html), **form})


async def person_login(node, email: str, *, org_email: str | None = None) -> dict:
    org = await node.create_org(name="People", email=org_email or email)
    await node.parts.sessions.ask("sessions", SetPassword(email, await passwords.hash_password(PW),
                                                          org["owner_user_id"], org["organization_id"]))
    _, html = await page(node.client, "/login")
    r = await node.client.post("/login", form={"csrf_token": csrf(html), "email": email, "password": PW})
    assert r.status_code == 303
    return org


async def audit_rows(node) -> list[dict]:
    """The console's entries (the operator API's, from fixtures, are tested on their own)."""
    return node.store.all("SELECT who, action, target, detail, address FROM operator_audit "
                          "WHERE who != 'operator API' ORDER BY seq")


async def test_signed_out_every_console_page_redirects_to_the_sign_in_page(node):
    for path in PAGES + ("/operator/organizations/x",):
        r = await node.client.get(path)
        assert r.status_code == 303, path
        assert r.headers["Location"] == "/operator/login?next=" + path
    r = await node.client.get("/operator/login")
    html = await r.get_data(as_text=True)
    assert r.status_code == 200
    assert '<label for="operator-token">Operator token</label>' in html and ">Sign in</button>" in html


async def test_the_token_signs_in_and_every_page_answers(node):
    r = await sign_in(node.client)
    assert r.status_code == 303 and r.headers["Location"] == "/operator"
    cookie = r.headers["Set-Cookie"]
    assert "gs_operator=" in cookie and "HttpOnly" in cookie and "Path=/operator" in cookie
    assert "SameSite=Strict" in cookie
    for path in PAGES:
        r = await node.client.get(path)
        html = await r.get_data(as_text=True)
        assert r.status_code == 200, path
        assert html.count("<h1>") == 1 and "style=" not in html and "<script>" not in html, path
    assert [(a["who"], a["action"]) for a in await audit_rows(node)] == [("operator token", "sign_in")]
    # signed in, the sign-in page sends the operator on
    r = await node.client.get("/operator/login")
    assert r.status_code == 303 and r.headers["Location"] == "/operator"


async def test_a_wrong_token_is_refused_audited_and_throttled(node):
    r = await sign_in(node.client, "not-the-token")
    assert r.status_code == 401
    assert "That is not the operator token." in await r.get_data(as_text=True)
    assert "gs_operator" not in r.headers.get("Set-Cookie", "")
    assert (await node.client.get("/operator")).status_code == 303
    for _ in range(4):
        assert (await sign_in(node.client, "still-wrong")).status_code == 401
    r = await sign_in(node.client)  # the right token too: the address has used its attempts
    assert r.status_code == 429 and r.headers["Retry-After"] == "60"
    assert "Too many sign-in attempts. Wait 60 seconds and try again." in await r.get_data(as_text=True)
    rows = await audit_rows(node)
    assert [a["action"] for a in rows] == ["sign_in_refused"] * 5 and rows[0]["who"] == "unknown"
    assert all("not-the-token" not in str(a) for a in rows)
    node.clock.advance(60)
    assert (await sign_in(node.client)).status_code == 303


async def test_a_person_who_is_not_an_operator_is_refused(node):
    await person_login(node, "someone@acme.test")
    for path in ("/operator", "/operator/catalog"):
        r = await node.client.get(path)
        assert r.status_code == 403
        assert "This account is not an operator of this node." in await r.get_data(as_text=True)


async def test_a_listed_person_is_an_operator_through_their_own_login(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, operator_emails="Boss@Acme.test, other@x.test")
    try:
        await person_login(n, "boss@acme.test")
        r = await n.client.get("/operator")
        html = await r.get_data(as_text=True)
        assert r.status_code == 200 and "boss@acme.test" in html
        # the organization's own CSRF token does not sign a console form
        _, dash = await page(n.client, "/account")
        r = await n.client.post("/operator/catalog/reload", form={"csrf_token": csrf(dash)})
        assert r.status_code == 403 and FORGED in await r.get_data(as_text=True)
        r = await console_form(n.client, "/operator/logout", {})
        assert r.status_code == 303
        assert [(a["who"], a["action"]) for a in await audit_rows(n)] == [("boss@acme.test", "sign_out")]
        assert (await n.client.get("/operator")).status_code == 303  # their login ended too
    finally:
        await stop_node(n)


async def test_forms_from_another_site_or_without_a_token_are_refused(node):
    org = await node.create_org(name="Pending", email="p@acme.test", approved=False)
    await sign_in(node.client)
    _, html = await page(node.client, "/operator/organizations")
    token = csrf(html)
    path = f"/operator/organizations/{org['organization_id']}/approve"
    r = await node.client.post(path, form={"csrf_token": token}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and FORGED in await r.get_data(as_text=True)
    r = await node.client.post(path, form={})
    assert r.status_code == 403
    r = await node.client.post(path, form={"csrf_token": "forged"})
    assert r.status_code == 403
    assert node.store.scalar("SELECT approved_at FROM organizations WHERE id = ?", (org["organization_id"],)) is None


async def test_a_console_session_ends_after_an_idle_hour_and_at_sign_out(node):
    await sign_in(node.client)
    assert (await node.client.get("/operator")).status_code == 200
    node.clock.advance(IDLE + 1)
    r = await node.client.get("/operator/jobs")
    assert r.status_code == 303 and r.headers["Location"] == "/operator/login?next=/operator/jobs"
    await sign_in(node.client)
    r = await console_form(node.client, "/operator/logout", {})
    assert r.status_code == 303 and r.headers["Location"] == "/operator/login"
    assert node.store.scalar("SELECT COUNT(*) FROM operator_sessions WHERE expires_at > ?",
                             (node.clock.now(),)) == 0
    assert (await node.client.get("/operator")).status_code == 303


async def test_the_audit_page_lists_actions_newest_first(node):
    await sign_in(node.client)
    org = await node.create_org(name="Audited", email="a@acme.test")
    await console_form(node.client, f"/operator/organizations/{org['organization_id']}/grants",
                       {"credits": "5", "reason": "welcome back"})
    _, html = await page(node.client, "/operator/audit")
    assert html.index("credits.grant") < html.index("sign_in")
    assert "5.00 credits" in html and "welcome back" in html


async def test_changes_through_the_operator_api_are_audited_reads_are_not(node):
    org = await node.create_org(name="Via API", email="api@acme.test")
    oid = org["organization_id"]
    await node.op("POST", f"/organizations/{oid}/grants", {"credits": "3"})
    await node.op("GET", "/organizations")
    r = await node.op("POST", "/organizations/nope/grants", {"credits": "3"})
    assert r.status_code == 404
    rows = node.store.all("SELECT who, action, target, detail FROM operator_audit ORDER BY seq")
    assert [(a["who"], a["action"], a["target"], a["detail"]) for a in rows] == [
        ("operator API", "POST /operator/v1/organizations", "/operator/v1/organizations", "201"),
        ("operator API", "POST /operator/v1/organizations/<org_id>/grants", f"/operator/v1/organizations/{oid}/grants",
         "201")]
