"""Members and webhooks pages in a real browser: an invitation accepted by a second person in
a second browser context; a webhook created and tested from the page against a receiver."""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect
from waiting import wait_until_sync
from smtp_server import link_in

from tests.browser.support import Receiver, accept_invitation, check_page, login_new_org


def mailed_invitation(smtp, email: str, base: str) -> str:
    """The invitation link from the mail (the page never shows it: issue 22, C1)."""
    wait_until_sync(lambda: smtp.messages(email), 20, every=0.05)
    return link_in(smtp.messages(email)[-1], base + "/invitations/accept?token=")


def test_invitation_made_in_the_page_is_accepted_in_a_second_browser(page, browser, node, smtp):
    org = login_new_org(page, node, role="admin")
    page.goto("/members")
    check_page(page, "members")
    # an admin cannot make an owner: the page does not offer it, and a forged choice is refused
    assert "owner" not in page.get_by_label("Role", exact=True).inner_text()
    email = f"second-{org['tag']}@example.test"
    page.get_by_label("Email").fill(email)
    page.get_by_label("Role", exact=True).select_option("member")
    page.get_by_role("button", name="Send invitation").click()
    expect(page.locator("#invite-sent")).to_contain_text(f"Invitation sent to {email}")
    assert "/invitations/accept" not in page.content()
    link = mailed_invitation(smtp, email, node.url)
    other = browser.new_context(base_url=node.url)
    try:
        second = other.new_page()
        accept_invitation(second, link.split("token=")[1])
        second.goto("/members")
        expect(second.locator(f"[data-member='{email}']")).to_contain_text("member")
        expect(second.get_by_role("button", name="Send invitation")).to_have_count(0)  # members cannot invite
    finally:
        other.close()
    page.goto("/members")
    expect(page.locator(f"[data-member='{email}']")).to_contain_text("member")


def test_admin_cannot_make_an_owner_even_with_a_forged_choice(page, node):
    org = login_new_org(page, node, role="admin")
    page.goto("/members")
    page.get_by_label("Email").fill(f"boss-{org['tag']}@example.test")
    page.locator("#invite-role").evaluate("s => { s.options[0].value = 'owner'; s.selectedIndex = 0; }")
    page.get_by_role("button", name="Send invitation").click()
    expect(page.get_by_role("alert")).to_have_text("You cannot grant a broader role than your own.")
    owner = page.locator("tr", has_text="owner-").first
    expect(owner.get_by_role("button", name=re.compile("Remove"))).to_have_count(1)
    owner.get_by_role("button", name=re.compile("Remove")).click()
    expect(page.get_by_role("alert")).to_have_text("Only an owner can change or remove an owner.")


def test_webhook_created_and_tested_from_the_page(page, node, tls_ca):
    login_new_org(page, node)
    with Receiver(tls_ca) as receiver:
        page.goto("/webhooks")
        check_page(page, "webhooks")
        page.get_by_label("URL (https)").fill(receiver.url)
        page.get_by_label("member.joined").check()
        page.get_by_role("button", name="Create webhook").click()
        secret = page.locator("#new-secret").inner_text().strip()
        assert secret
        page.get_by_role("link", name="Open the webhook").click()
        assert secret not in page.content()
        page.get_by_role("button", name="Send a test").click()
        expect(page.locator("#test-result")).to_contain_text("Test delivered: HTTP 204")
        assert len(receiver.received) == 1
        assert json.loads(receiver.received[0]["body"])["event"] == "webhook.test"
        expect(page.locator("#deliveries")).to_contain_text("webhook.test")
        check_page(page, "webhook")
        page.get_by_label("api_key.created").check()
        page.get_by_role("button", name="Save events").click()
        expect(page.get_by_label("api_key.created")).to_be_checked()
        page.get_by_role("button", name="Pause").click()
        expect(page.locator("#hook-state")).to_have_text("paused")
