"""API keys and Billing pages in a real browser: a key made in the page works against the
API and stops working once revoked in the page; a top-up through the test payment provider
returns to /billing with the credits shown."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import expect

from tests.browser.support import check_page, login_new_org


def test_key_created_in_the_page_works_and_is_revoked_in_the_page(page, node):
    login_new_org(page, node)
    page.goto("/keys")
    check_page(page, "keys")
    page.get_by_label("Name").fill("ci deploy")
    page.get_by_label("Role (optional)").select_option("member")
    page.get_by_role("button", name="Create key").click()
    key = page.locator("#new-key").inner_text().strip()
    assert key.startswith("aak_")
    check_page(page, "keys-created")
    r = node.api("GET", "/v1/projects", key)
    assert r.status_code == 200 and r.json()["data"][0]["is_default"] is True
    page.goto("/keys")
    assert key not in page.content()  # shown once only
    row = page.locator("tr", has_text="ci deploy")
    expect(row).to_contain_text("member")
    page.get_by_role("button", name="Pause ci deploy").click()
    expect(page.locator("tr", has_text="ci deploy")).to_contain_text("paused")
    assert node.api("GET", "/v1/projects", key).status_code == 401
    page.get_by_role("button", name="Resume ci deploy").click()
    assert node.api("GET", "/v1/projects", key).status_code == 200
    page.get_by_role("button", name="Revoke ci deploy").click()
    expect(page.locator("tr", has_text="ci deploy")).to_have_count(0)
    r = node.api("GET", "/v1/projects", key)
    assert r.status_code == 401 and r.json() == {"status": False, "error": "Unauthorized"}


def test_key_form_refuses_a_past_expiry_with_the_api_message(page, node):
    login_new_org(page, node)
    page.goto("/keys")
    page.get_by_label("Name").fill("old")
    page.get_by_label("Expires (optional)").fill("2001-01-01")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("alert")).to_have_text("expires_at must be in the future.")


def test_top_up_through_the_test_provider_returns_to_billing_with_the_credits(page, node):
    org = login_new_org(page, node, credits=None)
    page.goto("/billing")
    before = page.locator("#available").inner_text()
    check_page(page, "billing")
    page.get_by_role("spinbutton", name=re.compile("^Credits")).fill("500")
    page.get_by_role("button", name="Continue to checkout").click()
    page.wait_for_url(re.compile(r"/checkout/test/[0-9a-f-]{36}$"))
    topup_id = page.url.rsplit("/", 1)[1]
    expect(page.get_by_role("heading", name="Test checkout")).to_be_visible()
    r = node.op("POST", f"/topups/{topup_id}/pay")
    assert r.status_code == 200, r.text
    page.goto(f"/billing?topup={topup_id}&checkout=success")  # the provider's success_url
    expect(page.get_by_role("status").first).to_contain_text("Top-up paid: 500.00 credits were added.")
    after = page.locator("#available").inner_text()
    assert float(after.split()[0]) == float(before.split()[0]) + 500
    expect(page.locator(f"[data-topup='{topup_id}']")).to_contain_text("paid")
    bal = node.api("GET", "/v1/billing/balance", org["api_key"]).json()["data"]
    assert f"{bal['available']} credits" == after


def test_usage_chart_table_and_csv_follow_a_completed_job(page, node):
    org = login_new_org(page, node)
    r = node.api("POST", "/v1/generation/capabilities/image.generate", org["api_key"], json={"prompt": "a fox"})
    assert r.status_code == 202
    job_id = r.json()["request_id"]
    node.wait_job(org["api_key"], job_id)
    page.goto("/billing")
    expect(page.locator("table", has_text="Usage per project per day")).to_contain_text("Default")
    assert page.locator("svg.chart rect").count() == 1
    with page.expect_download() as dl:
        page.get_by_role("link", name="Download usage as CSV").click()
    text = Path(dl.value.path()).read_text()
    assert text.splitlines()[0] == "day,project_id,project,jobs,credits"
    assert text.splitlines()[1].endswith(",Default,1,1.00")
