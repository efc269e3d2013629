"""A newcomer's first hour, end to end in a real browser, at desktop and at phone width:
the front page, sign-up, the confirmation mail opened in a fresh browser, the waiting page,
approval by the operator, a login that lands in Studio, a generation, a bad upload that
stays in Studio, an API key and a reload that makes no second one, a top-up paid on the test
checkout. Every page reached must offer a way on (no dead end).

It also writes the screenshots of the sign-in pages used in docs/first-hour.md
(tests/artefacts/auth-<page>-<width>.png; the ones in docs/screenshots/ are copies)."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import expect

from tests.browser.support import ARTEFACTS, PASSWORD, axe_violations
from tests.browser.test_dash_signup import mail_link

SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
NEW_PASSWORD = "another correct horse battery"


def ways_on(page) -> list[str]:
    """Where the page lets a person go: visible links to another page and visible buttons."""
    return page.evaluate("""() => [...document.querySelectorAll('a[href], button')]
        .filter(e => e.offsetParent !== null || e.getClientRects().length)
        .filter(e => e.tagName === 'BUTTON' || !e.getAttribute('href').startsWith('#'))
        .map(e => (e.tagName === 'A' ? e.getAttribute('href') : 'button:' + e.textContent.trim()))""")


def no_dead_end(page, name: str) -> None:
    """The page has one h1, fits the width, passes axe, and offers a way on inside main (not
    only the header's links)."""
    assert page.locator("h1").count() == 1, f"{name}: not exactly one h1"
    inside = page.locator("main a[href]:visible, main button:visible").count()
    assert inside > 0, f"{name}: a dead end, nothing to follow in the page ({ways_on(page)})"
    width = page.viewport_size["width"]
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"), \
        f"{name}: wider than {width} px"
    found = axe_violations(page)
    assert found == [], f"{name}: axe: {found}"


def shot(page, name: str, label: str) -> None:
    ARTEFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTEFACTS / f"{name}-{label}.png"), full_page=True)


@pytest.fixture(params=list(SIZES))
def width(request):
    return request.param


def context_at(browser, node, label: str):
    w, h = SIZES[label]
    ctx = browser.new_context(base_url=node.url, viewport={"width": w, "height": h})
    ctx.set_default_timeout(20_000)
    return ctx


def log_in(page, email: str, password: str = PASSWORD) -> None:
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_a_newcomers_first_hour(browser, node, smtp, width, tmp_path):
    tag = uuid.uuid4().hex[:8]
    email, name = f"first-{tag}@example.test", f"First Hour {tag}"

    # the front door, then sign-up in the first browser
    first = context_at(browser, node, width)
    try:
        page = first.new_page()
        page.goto("/")
        no_dead_end(page, "front")
        page.locator("main").get_by_role("link", name="Sign up").click()
        page.wait_for_url(re.compile(r"/signup$"))
        no_dead_end(page, "signup")
        shot(page, "auth-signup", width)
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_label("Organization").fill(name)
        page.get_by_role("button", name="Sign up").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Check your email")
        no_dead_end(page, "check your email")
    finally:
        first.close()

    # the mail is opened somewhere else: a fresh browser with no cookie of this site
    fresh = context_at(browser, node, width)
    try:
        page = fresh.new_page()
        page.goto(mail_link(smtp, email, node.url + "/confirm?token="))
        expect(page.get_by_role("heading", level=1)).to_have_text("Email confirmed")
        no_dead_end(page, "email confirmed")
        page.locator("main").get_by_role("link", name="Log in").click()
        page.wait_for_url(re.compile(r"/login"))
        no_dead_end(page, "login")
        shot(page, "auth-login", width)
        log_in(page, email)
        page.wait_for_url(re.compile(r"/studio$"))  # Studio, which waits for the approval
        expect(page.get_by_role("heading", level=1)).to_have_text("Waiting for approval")
        no_dead_end(page, "waiting")
        shot(page, "auth-waiting", width)
        page.locator("main").get_by_role("button", name="Log out").click()
        page.wait_for_url(re.compile(r"/login$"))

        pending = node.op("GET", "/organizations?status=pending").json()["data"]
        [org] = [o for o in pending if o["name"] == name]
        assert node.op("POST", f"/organizations/{org['organization_id']}/approve").status_code == 200
        welcome = mail_link(smtp, email, node.url + "/login")
        page.goto(welcome)
        log_in(page, email)
        page.wait_for_url(re.compile(r"/studio$"))
        expect(page.get_by_role("heading", level=1)).to_have_text("Studio")
        expect(page.locator("header .org")).to_have_text(name)
        no_dead_end(page, "studio")

        # a generation, followed in Studio's pane without leaving the page; its own page, reloaded,
        # submits nothing again
        page.evaluate("window.__same_page = true")  # survives only if the page never navigates
        page.get_by_label("Prompt").fill("a red fox in the snow at dawn")
        page.get_by_role("button", name="Generate").click()
        expect(page.locator("#pane-body [data-status]")).to_have_text("completed", timeout=30_000)
        assert page.evaluate("window.__same_page === true") and page.url.endswith("/studio")
        no_dead_end(page, "studio job")
        job = page.locator("#pane-body [data-job]").get_attribute("data-job")
        page.goto(f"/studio/jobs/{job}")
        expect(page.locator("[data-status]").first).to_have_text("completed")
        page.reload()
        page.goto("/history")
        expect(page.locator("tr[data-id]")).to_have_count(1)

        # a bad file: the error shows in Studio, the form is kept, no token in the address
        page.goto("/studio?capability=video.generate")  # a model that takes an input file
        page.get_by_label("Prompt").fill("a slow pan over the hills")
        txt = tmp_path / "notes.txt"
        txt.write_text("just some text")
        page.get_by_label(re.compile("^File for this project")).set_input_files(str(txt))
        page.get_by_role("button", name="Upload").click()
        page.wait_for_url(re.compile(r"/studio(\?|$)"))
        expect(page.locator("#upload-error")).to_contain_text("Unsupported content type")
        expect(page.get_by_label("Prompt")).to_have_value("a slow pan over the hills")
        assert "csrf_token" not in page.url
        no_dead_end(page, "studio upload error")

        # an API key, then F5: no second key, the secret no more shown
        page.locator("nav").get_by_role("link", name="API keys").click()
        page.get_by_label("Name").fill("my first key")
        page.get_by_role("button", name="Create key").click()
        expect(page.locator("#new-key")).to_contain_text("aak_")
        page.reload()
        expect(page.locator("#new-key")).to_have_count(0)
        # (on a phone the table is stacked: its cells are no longer table cells to assistive tech)
        assert page.evaluate("() => [...document.querySelectorAll('td')]"
                             ".filter(td => td.textContent.trim() === 'my first key').length") == 1
        no_dead_end(page, "keys")

        # a top-up in test mode: the checkout pays once, a reload of the answer adds nothing
        page.locator("nav").get_by_role("link", name="Billing").click()
        before = float(page.locator("#available").inner_text().split()[0])
        page.get_by_role("spinbutton", name=re.compile("^Credits")).fill("500")
        page.get_by_role("button", name="Continue to checkout").click()
        page.wait_for_url(re.compile(r"/checkout/test/[0-9a-f-]{36}$"))
        expect(page.get_by_text("Test payment provider.")).to_be_visible()
        no_dead_end(page, "test checkout")
        page.get_by_role("button", name="Pay (test)").click()
        page.wait_for_url(re.compile(r"/billing\?topup=.*checkout=success"))
        expect(page.get_by_role("status").first).to_contain_text("Top-up paid: 500.00 credits were added.")
        page.reload()
        assert float(page.locator("#available").inner_text().split()[0]) == before + 500
        no_dead_end(page, "billing")

        # the account page leads back into the dashboard
        page.goto("/account")
        no_dead_end(page, "account")
        page.locator("main").get_by_role("link", name="Go to Studio").click()
        page.wait_for_url(re.compile(r"/studio$"))
    finally:
        fresh.close()


def test_password_reset_pages(browser, node, smtp, width):
    """Forgot password -> the mail -> choose a new one, in a fresh browser: lands in Studio."""
    org = node.new_org()
    email = f"reset-{org['tag']}@example.test"
    token = node.invite(org["organization_id"], email, "member")
    ctx = context_at(browser, node, width)
    try:
        page = ctx.new_page()
        page.goto(f"/invitations/accept?token={token}")
        no_dead_end(page, "invitation")
        shot(page, "auth-invitation", width)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Accept invitation").click()
        page.wait_for_url(re.compile(r"/studio$"))
        expect(page.get_by_role("heading", level=1)).to_have_text("Studio")
    finally:
        ctx.close()
    ctx = context_at(browser, node, width)
    try:
        page = ctx.new_page()
        page.goto("/login")
        page.get_by_role("link", name="Forgot your password?").click()
        page.wait_for_url(re.compile(r"/forgot-password$"))
        no_dead_end(page, "forgot password")
        shot(page, "auth-forgot", width)
        page.get_by_label("Email").fill(email)
        page.get_by_role("button", name="Send reset link").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Check your email")
        page.goto(mail_link(smtp, email, node.url + "/reset-password?token="))
        expect(page.get_by_role("heading", level=1)).to_have_text("Choose a new password")
        no_dead_end(page, "reset password")
        shot(page, "auth-reset", width)
        page.get_by_label("New password").fill(NEW_PASSWORD)
        page.get_by_role("button", name="Set password").click()
        page.wait_for_url(re.compile(r"/studio$"))
        expect(page.get_by_role("heading", level=1)).to_have_text("Studio")
    finally:
        ctx.close()


def test_a_next_elsewhere_is_refused_in_the_browser(page, node):
    """A login link carrying another site's address lands in Studio, never on that site."""
    org = node.new_org()
    email = f"next-{org['tag']}@example.test"
    token = node.invite(org["organization_id"], email, "member")
    page.goto(f"/invitations/accept?token={token}")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Accept invitation").click()
    page.wait_for_url(re.compile(r"/studio$"))
    page.context.clear_cookies()
    page.goto("/login?next=https://evil.example/steal")
    log_in(page, email)
    page.wait_for_url(re.compile(r"/studio$"))
    assert page.url.startswith(node.url)
    page.context.clear_cookies()
    page.goto("/login?next=/billing")
    log_in(page, email)
    page.wait_for_url(re.compile(r"/billing$"))
