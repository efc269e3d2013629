"""In a real browser: a password reset from the mail's link in a fresh browser (it failed in
every browser: the reset page's `Referrer-Policy: no-referrer` made Chromium post its form
with `Origin: null`, which the CSRF check refuses), and the Content-Security-Policy: every
page carries it and none breaks it (no inline script or style left)."""

from __future__ import annotations

import re
import uuid

from playwright.sync_api import expect

from tests.browser.support import login_new_org
from tests.browser.test_dash_signup import mail_link

NEW_PASSWORD = "a fresh and long passphrase"
WATCH = """window.__csp = [];
document.addEventListener('securitypolicyviolation',
  e => window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline')));"""


def watched(context):
    """A page of `context` that records CSP violations (event and console)."""
    context.add_init_script(WATCH)
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    return page


def no_violation(page, where: str) -> None:
    page.wait_for_load_state("load")
    found = page.evaluate("window.__csp || []") + [t for t in page.console_errors if "Content Security Policy" in t]
    assert found == [], f"{where}: {found}"


def test_reset_from_the_mail_link_in_a_fresh_browser_then_log_in(browser, node, smtp):
    org = node.new_org()
    email = f"owner-{org['tag']}@example.test"  # made by the operator: no password yet
    asking = browser.new_context(base_url=node.url)
    try:
        page = watched(asking)
        page.goto("/forgot-password")
        page.get_by_label("Email").fill(email)
        page.get_by_role("button", name="Send reset link").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Check your email")
        no_violation(page, "forgot-password")
    finally:
        asking.close()
    link = mail_link(smtp, email, node.url + "/reset-password?token=")

    fresh = browser.new_context(base_url=node.url)  # the mail opened elsewhere: no cookie of this site
    try:
        page = watched(fresh)
        answer = page.goto(link)
        assert answer.headers["referrer-policy"] == "same-origin"
        expect(page.get_by_role("heading", level=1)).to_have_text("Choose a new password")
        no_violation(page, "reset-password")
        with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/reset-password")) as posted:
            page.get_by_label("New password").fill(NEW_PASSWORD)
            page.get_by_role("button", name="Set password").click()
        assert posted.value.headers.get("origin") == node.url  # not "null"
        page.wait_for_url(re.compile(r"/studio$"))
        expect(page.get_by_role("heading", level=1)).not_to_have_text("Request refused")
    finally:
        fresh.close()

    later = browser.new_context(base_url=node.url)
    try:
        page = later.new_page()
        page.goto("/login")
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(NEW_PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(re.compile(r"/studio$"))
        expect(page.locator("body")).to_contain_text(email)
    finally:
        later.close()


def test_every_page_has_a_csp_and_breaks_none(browser, node):
    context = browser.new_context(base_url=node.url)
    try:
        page = watched(context)
        for path in ("/login", "/signup", "/forgot-password", "/reset-password?token=nope", "/no/such/page"):
            answer = page.goto(path)
            assert "script-src 'self'" in answer.headers["content-security-policy"], path
            no_violation(page, path)
        org = login_new_org(page, node)
        r = node.api("POST", "/v1/generation/capabilities/image.generate", org["api_key"], json={"prompt": "a fox"})
        assert r.status_code == 202
        node.api("POST", "/v1/support/tickets", org["api_key"], json={"subject_line": "Hi", "body": "A question"})
        for path in ("/studio", "/products", "/products/text-to-clip", "/history", "/assets", "/keys", "/billing",
                     "/members", "/webhooks", "/support", "/settings", "/projects", "/account"):
            answer = page.goto(path)
            assert answer.status == 200, path
            assert answer.headers["content-security-policy"].startswith("default-src 'self'"), path
            no_violation(page, path)
        page.goto("/studio")  # a live page: the price swapped in by htmx, a job followed over its stream
        page.get_by_label("Resolution").select_option("2k")
        expect(page.locator("#price")).to_contain_text("2.00 credits")
        page.get_by_label("Prompt").fill(f"a lighthouse {uuid.uuid4().hex[:6]} [[delay:1]]")
        page.get_by_role("button", name="Generate").click()  # the output pane follows the job in place
        expect(page.locator("#pane-body [data-status]")).to_have_text("completed", timeout=20_000)
        expect(page.get_by_role("img", name=re.compile("Output 1"))).to_be_visible()
        no_violation(page, "studio job, followed to the end")
    finally:
        context.close()
