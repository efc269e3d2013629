"""Sign-up in a real browser: the form, the confirmation mail from the real SMTP server, the
confirm link, the waiting page until the operator approves, then a login that lands in
Studio with the new organization's name in the header."""

from __future__ import annotations

import re
import uuid

from playwright.sync_api import expect
from waiting import wait_until_sync

from tests.browser.support import PASSWORD


def mail_link(smtp, to: str, prefix: str) -> str:
    def link() -> str | None:
        words = (w for msg in smtp.messages(to) for w in msg.get_body(("plain",)).get_content().split())
        return next((w for w in words if w.startswith(prefix)), None)
    return wait_until_sync(link, 20, every=0.05)


def test_sign_up_confirm_wait_for_approval_then_use_studio(page, browser, node, smtp):
    tag = uuid.uuid4().hex[:8]
    email, name = f"new-{tag}@example.test", f"Sign-up Co {tag}"
    page.goto("/signup")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("Organization").fill(name)
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Check your email")
    link = mail_link(smtp, email, node.url + "/confirm?token=")
    mailbox = browser.new_context(base_url=node.url)  # a mail is opened where the mail is read, not in the sign-up tab
    try:
        opened = mailbox.new_page()
        opened.goto(link)
        expect(opened.get_by_role("heading", level=1)).to_have_text("Email confirmed")
    finally:
        mailbox.close()

    page.goto("/login?next=/studio")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/studio$"))
    expect(page.get_by_role("main")).to_contain_text("approval")  # the waiting page (403)

    pending = node.op("GET", "/organizations?status=pending").json()["data"]
    [org] = [o for o in pending if o["name"] == name]
    assert node.op("POST", f"/organizations/{org['organization_id']}/approve").status_code == 200
    page.goto("/studio")
    expect(page.get_by_role("heading", level=1)).to_have_text("Studio")
    expect(page.locator("header .org")).to_have_text(name)
