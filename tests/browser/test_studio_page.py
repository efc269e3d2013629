"""Studio II in a real browser, at 1280x800 and 390x844: Generate without leaving the page (the
test asserts the page never navigated), the pane follows the job live to its output, Cancel
from the pane, Ctrl+Enter, drag-and-drop and paste of an input with its preview, a refusal in
plain words; screenshots of each state into docs/screenshots/."""

from __future__ import annotations

import base64
import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.studio_shots import SIZES, doc_shot
from tests.browser.support import check_page, login_new_org
from tests.test_media_samples import image_bytes

DROP = """([b64, slot, how]) => {
  const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  const dt = new DataTransfer();
  dt.items.add(new File([bytes], 'frame.png', {type: 'image/png'}));
  const zone = document.querySelector(`[data-drop="${slot}"]`);
  if (how === 'paste') {
    zone.querySelector('input').focus();
    zone.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));
  } else {
    zone.dispatchEvent(new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true}));
    zone.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
  }
}"""


def mark(page) -> None:
    page.evaluate("window.__same_page = true")  # survives only if the page never navigates


def same_page(page) -> bool:
    return page.evaluate("window.__same_page === true") and "/studio/jobs/" not in page.url


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_generate_without_leaving_the_page_follows_the_job_to_its_output(page, node, size):
    w, h = SIZES[size]
    page.set_viewport_size({"width": w, "height": h})
    login_new_org(page, node)
    page.goto("/studio")
    expect(page.locator("#model-card")).to_contain_text("proc-image")
    expect(page.locator("#model-card table.prices")).to_contain_text("credits")
    expect(page.locator("#model-card .badge.ok")).to_have_text("available")
    doc_shot(page, "studio-empty", widths=(size,))
    mark(page)
    page.get_by_label("Prompt").fill("a lighthouse at dusk [[delay:2]]")
    page.get_by_label("Prompt").press("Control+Enter")  # the shortcut submits like the button
    status = page.locator("#pane-body [data-status]")
    expect(status).to_have_text(re.compile("queued|rendering"))
    doc_shot(page, "studio-rendering", widths=(size,))
    expect(status).to_have_text("completed", timeout=20_000)
    img = page.locator("#pane-body .outputs img")
    expect(img).to_be_visible()
    page.wait_for_function("() => { const i = document.querySelector('#pane-body .outputs img'); return i.complete && i.naturalWidth > 0; }")
    assert same_page(page)
    check_page(page, f"studio-done-{size}")
    doc_shot(page, "studio-done", widths=(size,))
    # a second Generate makes a second job (a fresh form token came with the first answer)
    first = page.locator("#pane-body [data-job]").get_attribute("data-job")
    page.get_by_role("button", name="Generate").click()
    expect(page.locator("#pane-body [data-job]")).not_to_have_attribute("data-job", first)
    expect(status).to_have_text("completed", timeout=20_000)
    assert same_page(page)


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_cancel_from_the_pane(page, node, size):
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    login_new_org(page, node)
    page.goto("/studio")
    mark(page)
    page.get_by_label("Prompt").fill("slow [[delay:30]]")
    page.get_by_role("button", name="Generate").click()
    status = page.locator("#pane-body [data-status]")
    expect(status).to_have_text(re.compile("queued|rendering"))
    page.locator("#pane-body").get_by_role("button", name="Cancel").click()
    expect(status).to_have_text("canceled", timeout=20_000)
    expect(page.locator("#pane-body")).to_contain_text("nothing was charged")
    assert same_page(page)
    doc_shot(page, "studio-canceled", widths=(size,))


@pytest.mark.parametrize(("how", "size"), [("drop", "desktop"), ("drop", "phone"), ("paste", "desktop")])
def test_an_input_dropped_or_pasted_is_uploaded_chosen_and_previewed(page, node, how, size):
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    login_new_org(page, node)
    page.goto("/studio?capability=video.generate")
    expect(page.get_by_label("Model")).to_have_value("camera-move")
    page.get_by_label("Prompt").fill("slow pan")
    mark(page)
    b64 = base64.b64encode(image_bytes("PNG", 320, 240)).decode()
    page.evaluate(DROP, [b64, "start_frame", how])
    expect(page.get_by_label(re.compile("^Input: start_frame"))).not_to_have_value("")
    preview = page.locator("[data-drop='start_frame'] img.preview")
    expect(preview).to_be_visible()
    page.wait_for_function("() => document.querySelector('img.preview').naturalWidth === 320")
    expect(page.get_by_label("Prompt")).to_have_value("slow pan")  # the form kept what was typed
    assert same_page(page)
    if how == "drop":
        check_page(page, f"studio-input-{size}")
        doc_shot(page, "studio-input", widths=(size,))


def test_a_file_the_slot_cannot_take_is_refused_in_plain_words(page, node):
    login_new_org(page, node)
    page.goto("/studio?capability=video.generate")
    page.locator("#file_start_frame").set_input_files(
        {"name": "notes.png", "mimeType": "image/png", "buffer": b"not an image at all"})
    expect(page.locator("#upload-error")).to_be_visible()
    expect(page.get_by_label(re.compile("^Input: start_frame"))).to_have_value("")


def test_a_refused_generate_says_why_and_what_to_do_in_the_pane(page, node):
    org = login_new_org(page, node, credits=None)
    key, held = org["api_key"], []
    while True:  # slow jobs hold the whole balance
        r = node.api("POST", "/v1/generation/capabilities/image.generate", key, json={"prompt": "hold [[delay:60]]"})
        if r.status_code == 402:
            break
        held.append(r.json()["request_id"])
    available = node.api("GET", "/v1/billing/balance", key).json()["data"]["available"]
    page.goto("/studio")
    mark(page)
    page.get_by_label("Prompt").fill("a fox")
    page.get_by_role("button", name="Generate").click()
    alert = page.locator("#pane-error")
    expect(alert).to_contain_text("Not enough credits")
    expect(alert).to_contain_text(f"Your balance is {available} credits.")
    for job_id in held:  # free the render slot for the other tests
        node.api("POST", f"/v1/generation/requests/{job_id}/cancel", key)
    expect(alert.get_by_role("link", name="Top up credits")).to_have_attribute("href", "/billing#top-up")
    assert same_page(page)
    check_page(page, "studio-refused")
    doc_shot(page, "studio-refused", widths=("desktop",))


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_use_the_api_shows_the_exact_request_and_copies_it(page, node, size):
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    org = login_new_org(page, node)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=node.url)
    page.goto("/studio")
    page.get_by_label("Resolution").select_option("2k")
    expect(page.locator("#price")).to_contain_text("2.00 credits")
    page.get_by_label("Aspect ratio").select_option("16:9")
    page.get_by_label("Prompt").fill("a red kite")
    page.get_by_role("button", name="Generate").click()
    pane = page.locator("#pane-body")
    expect(pane.locator("[data-status]")).to_have_text("completed", timeout=20_000)
    api = pane.locator("section.api")
    expect(api.get_by_role("tab")).to_have_text(["curl", "Python (httpx)", "Python (genservice_client)", "OpenAI SDK"])
    curl = api.locator("pre[id$='-curl']").inner_text()
    assert f"{node.url}/v1/generation/capabilities/image.generate" in curl and "$GENSERVICE_API_KEY" in curl
    assert "aak_" not in page.content()
    # the body in the curl snippet is the job's own request: sent as it is, it makes the same job
    body = json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0])
    assert body == {"model": "proc-image", "prompt": "a red kite", "aspect_ratio": "16:9", "resolution": "2k"}
    r = node.api("POST", "/v1/generation/capabilities/image.generate", org["api_key"], json=body)
    assert r.status_code == 202 and r.json()["credits_estimate"] == "2.00"
    api.get_by_role("tab", name="OpenAI SDK").click()
    openai = api.locator("pre[id$='-openai']")
    expect(openai).to_be_visible()
    expect(openai).to_contain_text("size='2048x1152'")
    expect(api.locator("pre[id$='-curl']")).to_be_hidden()
    api.get_by_role("tab", name="Python (httpx)").click()
    api.get_by_role("button", name="Copy Python (httpx)").click()
    copy = api.locator("button[data-copy$='-httpx']")  # by its target: its name changes to "Copied"
    expect(copy).to_have_text("Copied")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == api.locator("pre[id$='-httpx']").inner_text().strip()
    assert "import httpx" in copied and "os.environ['GENSERVICE_API_KEY']" in copied
    expect(copy).to_have_text("Copy Python (httpx)", timeout=5_000)
    doc_shot(page, "studio-api", widths=(size,), element="#pane-body section.api")


def test_generate_after_the_session_expired_goes_to_the_login_page(page, node):
    login_new_org(page, node)
    page.goto("/studio")
    page.get_by_label("Prompt").fill("late fox")
    # 12 idle hours on the node's clock (test mode): the session expires
    assert node.op("POST", "/test/clock", {"advance_seconds": 12 * 3600 + 1}).status_code == 200
    page.get_by_role("button", name="Generate").click()
    page.wait_for_url(re.compile(r"/login\?next=/studio$"))
    expect(page.locator("#pane-body")).to_have_count(0)  # the login page itself, not inside the pane
