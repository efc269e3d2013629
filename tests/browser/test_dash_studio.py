"""Studio in a real browser: log in -> submit -> live status over server-sent events -> the
output shows -> the job is in History (source studio) and in the API's runs feed."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.support import check_page, login_new_org


def test_studio_submit_follows_the_job_live_and_lands_in_history(page, node):
    org = login_new_org(page, node)
    page.goto("/studio")
    expect(page.locator("#price")).to_contain_text("1.00 credits")
    page.get_by_label("Resolution").select_option("2k")
    expect(page.locator("#price")).to_contain_text("2.00 credits")  # the price follows the tier (htmx)
    check_page(page, "studio")
    page.get_by_label("Prompt").fill("a lighthouse at dusk [[delay:2]]")
    page.evaluate("window.__same_page = true")  # survives only if the page never reloads
    page.get_by_role("button", name="Generate").click()  # the output pane follows the job in place
    job_id = page.locator("#pane-body [data-job]").get_attribute("data-job")
    assert page.url.endswith("/studio")
    expect(page.locator("[data-status]")).to_have_text(re.compile("queued|rendering"))
    expect(page.locator("[data-status]")).to_have_text("completed", timeout=20_000)
    expect(page.get_by_role("img", name=re.compile("Output 1"))).to_be_visible()
    assert page.evaluate("window.__same_page") is True
    src = page.get_by_role("img", name=re.compile("Output 1")).get_attribute("src")
    assert src.startswith("/files/") and "sig=" in src  # a signed link, no key
    page.wait_for_function("() => { const i = document.querySelector('.outputs img'); return i.complete && i.naturalWidth > 0; }")
    check_page(page, "studio-job")
    page.goto(f"/studio/jobs/{job_id}")
    expect(page.get_by_role("img", name=re.compile("Output 1"))).to_be_visible()
    assert "aak_" not in page.content()
    storage = page.evaluate("() => JSON.stringify(localStorage) + JSON.stringify(sessionStorage)")
    assert "aak_" not in storage and "gs_session" not in storage  # htmx keeps only the current path there

    page.get_by_role("link", name="Use these settings again").click()
    expect(page.get_by_label("Prompt")).to_have_value("a lighthouse at dusk [[delay:2]]")
    expect(page.get_by_label("Resolution")).to_have_value("2k")
    expect(page.locator("#price")).to_contain_text("2.00 credits")

    page.goto("/history?source=studio")
    expect(page.locator(f"[data-id='{job_id}']")).to_contain_text("studio")
    r = node.api("GET", "/v1/runs", org["api_key"], params={"source": "studio"})
    assert r.status_code == 200
    assert [(i["id"], i["source"], i["status"]) for i in r.json()["data"]["items"]] == [(job_id, "studio", "completed")]


def test_history_follows_the_project_stream(page, node):
    org = login_new_org(page, node)
    page.goto("/history")
    expect(page.locator("#feed[data-following='1']")).to_have_count(1)
    page.evaluate("window.__same_page = true")
    r = node.api("POST", "/v1/generation/capabilities/image.generate", org["api_key"], json={"prompt": "a fox"})
    job_id = r.json()["request_id"]
    row = page.locator(f"[data-id='{job_id}']")
    expect(row).to_contain_text("api", timeout=20_000)
    expect(row).to_contain_text("completed", timeout=20_000)
    expect(row.locator("img")).to_have_count(1)
    assert page.evaluate("window.__same_page") is True
