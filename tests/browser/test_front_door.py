"""A newcomer's first hour in a real browser, the parts past sign-in: the front page and the
API reference at desktop and phone widths, a bad upload in Studio that stays in Studio, a
reload after creating a key that creates nothing, and a top-up paid on the test checkout."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.support import ARTEFACTS, WIDTHS, check_page, login_new_org, shoot


def fits_the_width(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def test_front_page_and_api_reference(page, node):
    page.goto("/")
    expect(page.get_by_role("heading", name="genservice", exact=True)).to_be_visible()
    expect(page.locator("main").get_by_role("link", name="Sign up")).to_be_visible()
    expect(page.get_by_text("not a diffusion model")).to_be_visible()
    check_page(page, "front")
    for w, h in WIDTHS.values():
        page.set_viewport_size({"width": w, "height": h})
        assert fits_the_width(page), f"the front page is wider than {w} px"
    page.set_viewport_size({"width": 1280, "height": 900})
    page.get_by_role("link", name="API reference").first.click()
    page.wait_for_url(re.compile(r"/docs$"))
    # swagger-ui (vendored) renders the node's own document: its operations show
    expect(page.locator(".opblock").first).to_be_visible()
    expect(page.locator(".opblock-summary-path", has_text="/v1/generation/capabilities").first).to_be_visible()
    shoot(page, "docs")
    page.screenshot(path=str(ARTEFACTS / "docs-top-desktop.png"))  # the first screen, for docs/
    page.goto("/no/such/page")
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    expect(page.get_by_role("link", name="Front page")).to_be_visible()


def test_studio_upload_keys_and_top_up_without_a_dead_end(page, node, tmp_path):
    login_new_org(page, node)
    page.goto("/studio?capability=video.generate")
    expect(page.get_by_label(re.compile("^Input: start_frame"))).to_have_attribute("required", "")
    page.get_by_label("Prompt").fill("a slow pan over the hills")
    txt = tmp_path / "notes.txt"
    txt.write_text("just some text")
    page.get_by_label(re.compile("^File for this project")).set_input_files(str(txt))
    page.get_by_role("button", name="Upload").click()
    page.wait_for_url(re.compile(r"/studio\?"))
    expect(page.locator("#upload-error")).to_contain_text("Unsupported content type")
    expect(page.get_by_label("Prompt")).to_have_value("a slow pan over the hills")
    assert "csrf_token" not in page.url

    page.goto("/keys")
    page.get_by_label("Name").fill("first key")
    page.get_by_role("button", name="Create key").click()
    expect(page.locator("#new-key")).to_contain_text("aak_")
    page.reload()  # F5 after creating: the GET again, nothing created, the key no more shown
    expect(page.locator("#new-key")).to_have_count(0)
    expect(page.get_by_role("cell", name="first key", exact=True)).to_have_count(1)

    page.goto("/billing")
    before = float(page.locator("#available").inner_text().split()[0])
    page.get_by_role("spinbutton", name=re.compile("^Credits")).fill("500")
    page.get_by_role("button", name="Continue to checkout").click()
    page.wait_for_url(re.compile(r"/checkout/test/[0-9a-f-]{36}$"))
    check_page(page, "test-checkout")
    page.get_by_role("button", name="Pay (test)").click()
    page.wait_for_url(re.compile(r"/billing\?topup=.*checkout=success"))
    expect(page.get_by_role("status").first).to_contain_text("Top-up paid: 500.00 credits were added.")
    assert float(page.locator("#available").inner_text().split()[0]) == before + 500


def test_history_reflows_on_a_phone_with_times_in_the_readers_zone(browser, node):
    context = browser.new_context(base_url=node.url, timezone_id="Asia/Tokyo",
                                  viewport={"width": WIDTHS["phone"][0], "height": WIDTHS["phone"][1]})
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        org = login_new_org(page, node)
        for _ in range(2):
            r = node.api("POST", "/v1/generation/capabilities/image.generate", org["api_key"],
                         json={"prompt": "a red fox in the snow at dawn"})
            assert r.status_code == 202
        page.goto("/history")
        expect(page.locator("tr[data-id]")).to_have_count(2)
        # the feed re-renders its rows as the jobs move on: measure the rows once both are done
        expect(page.locator("tr[data-id] td.status-completed")).to_have_count(2, timeout=60_000)
        assert fits_the_width(page), "History is wider than a phone"
        # one evaluate measures every Created cell at once: a swap of the feed between finding a
        # cell and measuring it (Playwright's bounding_box) would see a detached node
        right = page.evaluate("""() => Math.max(...[...document.querySelectorAll(
            'tr[data-id] td[data-label=Created]')].map(c => c.getBoundingClientRect().right))""")
        assert 0 < right <= WIDTHS["phone"][0], "Created falls off the screen"
        created = page.locator("tr[data-id] td[data-label=Created] time").first
        expect(created).to_have_attribute("data-local", "1")
        assert "UTC" not in created.inner_text() and created.get_attribute("title").endswith(" UTC")
        page.goto("/products")
        assert fits_the_width(page), "Products is wider than a phone"
    finally:
        context.close()
