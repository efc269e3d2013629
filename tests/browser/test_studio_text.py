"""A text output in Studio's output pane, in a real browser at 1280x800 and 390x844: a node of
its own whose catalog adds a `text.llm` model served by a real llama-cpp-python server (the
tiny GGUF the tests write); pick it, Generate, and the reply shows in place (the test asserts
the page never navigated) and is the job's text file, as the API serves it; "Use the API"
offers the OpenAI SDK's chat call. Screenshots: docs/screenshots/studio-text-*.png."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from engine_support import LlamaServer
from playwright.sync_api import expect

from tests.browser.studio_shots import SIZES, doc_shot
from tests.browser.support import check_page, login_new_org, start_node

DEFAULT_CATALOG = Path(__file__).resolve().parents[2] / "service" / "catalog" / "default.toml"
pytestmark = pytest.mark.llama  # its own llama-cpp-python server: runs last (tests/conftest.py)


def llm_model(url: str) -> str:
    return f"""
[[models]]
id = "tiny-chat"
capability = "text.llm"
backend = "openai"
description = "A tiny local chat model (llama.cpp), for trying Studio's text output."
resolutions = ["default"]
concurrency = 1
prices = [{{ resolution = "default", credits = "1.50" }}]
[models.engine]
url = "{url}"
model = "tiny"
max_tokens = 24
temperature = 0.0
"""


@pytest.fixture(scope="module")
def llm_node(tmp_path_factory, oidc_issuer, tls_ca, smtp):
    tmp = tmp_path_factory.mktemp("studio-text-node")
    llama = LlamaServer(tmp_path_factory.mktemp("studio-llama")).start()
    try:
        tls_ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
        catalog = tmp / "catalog.toml"
        catalog.write_text(DEFAULT_CATALOG.read_text() + llm_model(llama.url))
        env = {f"GENSERVICE_{k.upper()}": str(v) for k, v in smtp.settings().items()}
        env["GENSERVICE_CATALOG_FILE"] = str(catalog)
        with start_node(tmp, oidc_issuer, tmp / "ca.pem", env) as n:
            yield n
    finally:
        llama.stop()


@pytest.fixture
def text_page(browser, llm_node):
    context = browser.new_context(base_url=llm_node.url)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_a_text_reply_shows_in_the_pane_without_leaving_the_page(text_page, llm_node, size):
    page = text_page
    w, h = SIZES[size]
    page.set_viewport_size({"width": w, "height": h})
    org = login_new_org(page, llm_node)
    page.goto("/studio")
    page.get_by_label("Capability").select_option("text.llm")  # htmx swaps the form in
    expect(page.get_by_label("Model")).to_have_value("tiny-chat")
    expect(page.locator("#model-card")).to_contain_text("A tiny local chat model")
    expect(page.locator("#model-card table.prices")).to_contain_text("1.50 credits")
    expect(page.locator("#price")).to_contain_text("1.50 credits")
    page.evaluate("window.__same_page = true")  # survives only if the page never navigates
    page.get_by_label("Prompt").fill("Tell me about tides.")
    page.get_by_role("button", name="Generate").click()
    pane = page.locator("#pane-body")
    expect(pane.locator("[data-status]")).to_have_text("completed", timeout=60_000)
    text = pane.get_by_label("Output text 1")
    expect(text).to_be_visible()
    shown = text.inner_text()
    assert shown.strip(), "the reply shown is empty"
    assert page.evaluate("window.__same_page === true") and "/studio/jobs/" not in page.url
    assert re.search(r"/studio$", page.url)
    # what the pane shows is the job's text output, as the API serves it
    job_id = pane.locator("[data-job]").get_attribute("data-job")
    key = org["api_key"]
    st = llm_node.api("GET", f"/v1/generation/requests/{job_id}/status", key).json()
    [out] = st["outputs"]
    assert out["content_type"] == "text/plain; charset=utf-8"
    assert (st["model"], st["capability"], st["source"]) == ("tiny-chat", "text.llm", "studio")
    body = llm_node.api("GET", out["url"], key, follow_redirects=True)  # the API's link redirects to a signed one
    assert body.status_code == 200
    assert shown == body.text
    expect(pane.get_by_role("link", name="Download output 1")).to_have_attribute("href", re.compile(r"^/files/.*sig="))
    # "Use the API" beside it: the OpenAI SDK's chat call, since /openai/v1 serves the model
    api = pane.locator("section.api")
    api.get_by_role("tab", name="OpenAI SDK").click()
    expect(api.locator("pre[id$='-openai']")).to_contain_text("client.chat.completions.create(model='tiny-chat'")
    api.get_by_role("tab", name="curl").click()
    check_page(page, f"studio-text-{size}")
    doc_shot(page, "studio-text", widths=(size,), element="#pane-body .output-text")
