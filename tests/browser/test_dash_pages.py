"""Every dashboard page in a real browser: one h1, labelled controls, no serious axe-core
finding, screenshots at desktop and phone widths; assets upload, product runs followed live,
support, settings, projects; the 404 and 403 pages; an expired session returns to the page."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.support import PASSWORD, check_page, login_new_org
from tests.test_media_samples import image_bytes


def test_every_page_is_accessible_and_screenshotted(page, node):
    org = login_new_org(page, node)
    key = org["api_key"]
    r = node.api("POST", "/v1/generation/capabilities/image.generate", key, json={"prompt": "a fox"})
    assert r.status_code == 202
    node.api("POST", "/v1/support/tickets", key, json={"subject_line": "Hello", "body": "A question"})
    for path, name in [("/studio", "studio"), ("/products", "products"), ("/products/text-to-clip", "product"),
                       ("/history", "history"), ("/assets", "assets"), ("/keys", "keys"), ("/billing", "billing"),
                       ("/members", "members"), ("/webhooks", "webhooks"), ("/support", "support"),
                       ("/settings", "settings"), ("/projects", "projects"), ("/account", "account")]:
        page.goto(path)
        check_page(page, name)
    page.goto("/no/such/page")
    check_page(page, "not-found")


def test_upload_then_run_a_product_with_live_steps(page, node, tmp_path):
    login_new_org(page, node)
    page.goto("/assets")
    png = tmp_path / "still.png"
    png.write_bytes(image_bytes("PNG"))
    page.get_by_label(re.compile("^File")).set_input_files(str(png))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("[data-asset]")).to_have_count(1)
    expect(page.locator("[data-asset]")).to_contain_text("image/png")
    src = page.locator("[data-asset] img").get_attribute("src")
    assert src.startswith("/files/") and "sig=" in src

    page.goto("/products")
    expect(page.locator("[data-product='voiceover']")).to_contain_text("Not available")
    expect(page.locator("[data-product='voiceover']")).to_contain_text("no model implements")
    page.goto("/products/text-to-clip")
    expect(page.get_by_label("Aspect ratio")).to_have_value("16:9")  # the default
    page.get_by_label("Prompt").fill("a harbour at dawn [[delay:1]]")
    page.get_by_role("button", name="Run Text to clip").click()
    page.wait_for_url(re.compile(r"/products/runs/[0-9a-f-]{36}$"))
    page.evaluate("window.__same_page = true")
    expect(page.locator("[data-status]")).to_have_text("completed", timeout=60_000)
    expect(page.locator("[data-step] .status-completed")).to_have_count(page.locator("[data-step]").count())
    assert page.evaluate("window.__same_page") is True
    expect(page.locator("[data-step] video").first).to_be_attached()
    check_page(page, "product-run")
    page.get_by_role("link", name="Use these inputs again").click()
    expect(page.get_by_label("Prompt")).to_have_value("a harbour at dawn [[delay:1]]")
    expect(page.get_by_label("Aspect ratio")).to_have_value("16:9")
    page.goto("/history?source=workflow")
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.locator("tbody tr")).to_contain_text("workflow")


def test_studio_insufficient_credits_shows_balance_and_top_up_link(page, node):
    org = login_new_org(page, node, credits=None)
    key = org["api_key"]
    up = node.api("POST", "/v1/generation/uploads", key, files={"file": ("s.png", image_bytes("PNG"), "image/png")})
    assert up.status_code == 201, up.text
    body = {"prompt": "hold [[delay:60]]", "resolution": "720p", "inputs": {"start_frame": [up.json()["data"]["id"]]}}
    held = []
    while True:  # slow jobs hold the whole balance
        r = node.api("POST", "/v1/generation/capabilities/video.generate", key, json=body)
        if r.status_code == 402:
            break
        assert r.status_code == 202, r.text
        held.append(r.json()["request_id"])
    available = node.api("GET", "/v1/billing/balance", key).json()["data"]["available"]
    page.goto("/studio?capability=video.generate&resolution=720p")
    page.get_by_label("Prompt").fill("waves")
    page.get_by_label(re.compile("^Input: start_frame")).select_option(index=1)
    page.get_by_role("button", name="Generate").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text(f"Your balance is {available} credits.")
    expect(alert.get_by_role("link", name="Top up credits")).to_have_attribute("href", "/billing#top-up")
    for job_id in held:  # free the model's render slot for the other tests
        assert node.api("POST", f"/v1/generation/requests/{job_id}/cancel", key).status_code == 200


def test_failed_job_shows_its_message_and_released_credits(page, node):
    login_new_org(page, node)
    page.goto("/studio")
    page.get_by_label("Prompt").fill("x [[fail:internal]]")
    page.get_by_role("button", name="Generate").click()
    expect(page.locator("[data-status]")).to_have_text("failed", timeout=20_000)
    expect(page.get_by_role("alert")).to_contain_text("Generation failed due to an internal error.")
    expect(page.get_by_role("alert")).to_contain_text("The credits held for it were released")


def test_cancel_a_queued_or_rendering_job(page, node):
    login_new_org(page, node)
    page.goto("/studio")
    page.get_by_label("Prompt").fill("slow [[delay:30]]")
    page.get_by_role("button", name="Generate").click()
    expect(page.locator("[data-status]")).to_have_text(re.compile("queued|rendering"))
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("[data-status]")).to_have_text("canceled", timeout=20_000)
    expect(page.get_by_role("main")).to_contain_text("nothing was charged")


def test_support_ticket_settings_and_projects(page, node):
    org = login_new_org(page, node)
    page.goto("/support")
    page.get_by_label("Subject").fill("Cannot find my video")
    page.get_by_label("Message").fill("Where do outputs go?")
    page.get_by_role("button", name="Open ticket").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Cannot find my video")
    page.get_by_label("Your reply").fill("Found it in Assets.")
    page.get_by_role("button", name="Send reply").click()
    expect(page.locator("#replies")).to_contain_text("Found it in Assets.")
    check_page(page, "ticket")

    page.goto("/settings")
    page.get_by_label("Organization name").fill("Renamed Studio Co")
    page.get_by_role("button", name="Save name").click()
    expect(page.locator("header .org")).to_have_text("Renamed Studio Co")
    expect(page.get_by_role("main")).to_contain_text("approved on")

    page.goto("/projects")
    page.get_by_label("Name", exact=True).fill("Campaign")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_label("Project", exact=True)).to_have_value(re.compile(".+"))
    expect(page.locator("#switch-project option:checked")).to_have_text("Campaign")
    expect(page.locator("#switch-project option").first).to_have_text("Default")
    r = node.api("GET", "/v1/projects", org["api_key"])
    assert sorted(p["name"] for p in r.json()["data"]) == ["Campaign", "Default"]
    page.get_by_role("button", name="Archive Campaign").click()
    expect(page.locator("#switch-project option")).to_have_text(["Default"])  # waits for the new page


def test_not_found_and_forbidden_pages(page, node):
    login_new_org(page, node, role="member")
    r = page.goto("/nothing-here")
    assert r.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
    r = page.goto("/studio/jobs/00000000-0000-0000-0000-000000000000")
    assert r.status == 404
    expect(page.get_by_role("alert")).to_have_text("Generation request not found.")
    r = page.goto("/settings")
    assert r.status == 403
    expect(page.get_by_role("alert")).to_have_text("Your role (member) does not allow this.")
    check_page(page, "forbidden")


def test_expired_session_returns_to_login_then_to_the_page(page, node):
    org = login_new_org(page, node)
    page.goto("/billing?offset=0")
    # 12 idle hours on the node's clock (test mode): the session expires
    r = node.op("POST", "/test/clock", {"advance_seconds": 12 * 3600 + 1})
    assert r.status_code == 200, r.text
    page.goto("/billing?offset=0")
    page.wait_for_url(re.compile(r"/login\?next="))
    page.get_by_label("Email").fill(org["email"])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/billing\?offset=0$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Billing")


def test_studio_video_from_an_uploaded_start_frame_plays(page, node, tmp_path):
    login_new_org(page, node)
    page.goto("/studio")
    page.get_by_label("Capability").select_option("video.generate")
    expect(page.get_by_label("Model")).to_have_value("camera-move")
    expect(page.locator("#price")).to_contain_text("10.00 credits")
    png = tmp_path / "frame.png"
    png.write_bytes(image_bytes("PNG", 320, 240))
    page.get_by_label(re.compile("^File for this project")).set_input_files(str(png))
    page.get_by_role("button", name="Upload").click()
    # back in Studio with the form as it was (the page script puts it in the upload's `next`)
    page.wait_for_url(re.compile(r"/studio\?capability=video.generate&model=camera-move&"))
    # the new file is already picked as the start frame
    expect(page.get_by_label(re.compile("^Input: start_frame"))).not_to_have_value("")
    page.get_by_label("Prompt").fill("slow pan")
    page.get_by_role("button", name="Generate").click()
    expect(page.locator("[data-status]")).to_have_text("completed", timeout=60_000)
    video = page.locator(".outputs video")
    expect(video).to_have_count(1)
    page.wait_for_function("() => document.querySelector('.outputs video').readyState >= 1")
    assert page.evaluate("() => document.querySelector('.outputs video').duration") > 4


def test_a_form_sent_after_the_session_expired_returns_to_its_page(page, node):
    org = login_new_org(page, node)
    page.goto("/keys")
    assert node.op("POST", "/test/clock", {"advance_seconds": 12 * 3600 + 1}).status_code == 200
    page.get_by_label("Name").fill("late")
    page.get_by_role("button", name="Create key").click()
    page.wait_for_url(re.compile(r"/login\?next=/keys$"))
    page.get_by_label("Email").fill(org["email"])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/keys$"))
    expect(page.get_by_role("main")).not_to_contain_text("late")  # nothing was created by the refused form
