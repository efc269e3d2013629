"""Billing in words people read: a job is one ledger line "charged 1.00 credits" (its hold and
capture stay in the API's ledger), amounts carry their unit, times show in the reader's time
zone with UTC on hover."""

from __future__ import annotations


import pytest
from playwright.sync_api import expect

from tests.browser.studio_shots import SIZES, doc_shot
from tests.browser.support import check_page, login_new_org


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_a_job_is_one_line_charged_with_its_unit_and_local_times(page, node, size):
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    org = login_new_org(page, node)
    key = org["api_key"]
    job = node.api("POST", "/v1/generation/capabilities/image.generate", key, json={"prompt": "a fox"}).json()["request_id"]
    node.wait_job(key, job)
    kinds = [e["kind"] for e in node.api("GET", "/v1/billing/ledger", key).json()["data"] if e["job_id"] == job]
    assert sorted(kinds) == ["capture", "hold"]  # the API keeps both entries
    page.goto("/billing")
    line = page.locator(f"tr[data-ledger='{job}']")
    expect(line).to_have_count(1)
    expect(line).to_contain_text("Job charged 1.00 credits")
    expect(line).to_contain_text("−1.00 credits")
    expect(page.locator("#available")).to_contain_text("credits")
    stamp = line.locator("time")
    expect(stamp).to_have_attribute("data-local", "1")
    assert stamp.get_attribute("title").endswith(" UTC")
    check_page(page, f"billing-lines-{size}")
    doc_shot(page, "billing-ledger", widths=(size,), element="#ledger")
