"""Who sees what, in a real browser: a read_only person sees no write controls and a forged
post is refused; sign-in through the OpenID Connect provider (a subprocess) lands on the
page asked for; logging out ends the session."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect

from tests.browser.support import login_new_org

WRITE_BUTTONS = ("Generate", "Create key", "Send invitation", "Create webhook", "Continue to checkout",
                 "Save threshold", "Create project", "Upload", "Save name")
FORGED = "This form was not sent from this site, or the page was open too long."


def test_read_only_sees_no_write_controls_and_forged_posts_are_refused(page, node):
    login_new_org(page, node, role="read_only")
    for path in ("/studio", "/keys", "/members", "/webhooks", "/billing", "/projects", "/assets",
                 "/products/text-to-clip"):
        page.goto(path)
        for name in WRITE_BUTTONS:
            expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
        expect(page.locator("form[method=post]:not([action='/logout']):not([action='/projects/switch'])"
                            ":not([action='/support'])")).to_have_count(0)
    expect(page.get_by_role("link", name="Settings")).to_have_count(0)
    page.goto("/keys")
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    # a valid token, but the role lacks the permission: the 403 page, nothing created
    r = page.request.post("/keys", form={"csrf_token": token, "name": "sneaky"})
    assert r.status == 403 and "Your role (read_only) does not allow this." in r.text()
    r = page.request.post("/studio", form={"csrf_token": token, "prompt": "x"})
    assert r.status == 403
    # no token, a token of another session, or another site's origin: refused as forged
    r = page.request.post("/support", form={"subject_line": "s", "body": "b"})
    assert r.status == 403 and FORGED in r.text()
    r = page.request.post("/support", form={"csrf_token": token, "subject_line": "s", "body": "b"},
                          headers={"Origin": "https://evil.example"})
    assert r.status == 403 and FORGED in r.text()
    page.goto("/keys")
    expect(page.get_by_role("main")).not_to_contain_text("sneaky")


def test_a_post_without_a_session_goes_to_the_login_page(browser, node):
    ctx = browser.new_context(base_url=node.url)
    try:
        r = ctx.request.post("/studio", form={"csrf_token": "forged", "prompt": "x"}, max_redirects=0)
        assert r.status == 303 and r.headers["location"] == "/login?next=/studio"
    finally:
        ctx.close()


def set_claims(issuer: str, sub: str, **claims) -> None:
    r = httpx.put(f"{issuer}/users/{sub}", json=claims)
    assert r.status_code == 204


def authorize(page, sub: str) -> None:
    """The provider's own form: the subject, then Authorize."""
    page.locator("input[name=sub]").fill(sub)
    page.get_by_role("button", name="Authorize").click()


def test_sign_in_through_the_identity_provider(page, node, oidc_issuer):
    org = node.new_org()
    email = f"oidc-{org['tag']}@example.test"
    token = node.invite(org["organization_id"], email, "member")
    sub = f"sub-{org['tag']}"
    set_claims(oidc_issuer, sub, email=email, email_verified=True)
    page.goto(f"/invitations/accept?token={token}")
    page.get_by_role("button", name="Sign in with TestID").click()
    authorize(page, sub)
    page.wait_for_url(re.compile(r"/studio$"))
    page.goto("/studio")
    expect(page.locator("header .menu summary")).to_have_text(email)
    page.locator("header .menu summary").click()
    page.get_by_role("button", name="Log out").click()
    page.goto("/history?source=studio")
    page.wait_for_url(re.compile(r"/login\?next="))
    page.get_by_role("button", name="Sign in with TestID").click()
    authorize(page, sub)
    page.wait_for_url(re.compile(r"/history\?source=studio$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("History")
