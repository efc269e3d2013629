"""The front door: `/` as a page for a browser and a JSON index for an API client, the API
reference at `/docs` with its vendored viewer, the favicon, and HTML error pages for browsers
only (the API keeps its JSON envelope)."""

from __future__ import annotations

import pytest

from tests.conftest import start_node, stop_node

HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


async def test_a_browser_gets_the_front_page(node):
    r = await node.client.get("/", headers=HTML)
    html = await r.get_data(as_text=True)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    assert 'href="/signup"' in html and 'href="/login"' in html and 'href="/docs"' in html
    assert "<strong>proc-image</strong>" in html and "<strong>camera-move</strong>" in html
    # only the procedural built-in serves images: the page says so and where to connect one
    assert "not a diffusion model" in html and "docs/engines.md" in html


async def test_an_api_client_gets_a_json_index(node):
    for headers in ({}, {"Accept": "*/*"}, {"Accept": "application/json"}):
        r = await node.client.get("/", headers=headers)
        assert r.status_code == 200
        body = await r.get_json()
        assert body["openapi"] == "/v1/openapi.json" and body["docs"] == "/docs" and body["api"] == "/v1"


async def test_closed_signup_shows_no_signup_link(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, signup="closed")
    try:
        html = await (await n.client.get("/", headers=HTML)).get_data(as_text=True)
        assert 'href="/signup"' not in html and "Sign-up is by invitation" in html
    finally:
        await stop_node(n)


ENGINE_CATALOG = """
[[models]]
id = "proc-image"
capability = "image.generate"
backend = "procedural_image"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "1.00" }]

[[models]]
id = "sdxl"
capability = "image.generate"
backend = "cog"
description = "SDXL on Cog"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "2.00" }]

[models.engine]
urls = ["http://127.0.0.1:9"]
"""


async def test_an_engine_model_is_listed_first_and_the_builtin_warning_goes(nursery, tmp_path):
    (tmp_path / "catalog.toml").write_text(ENGINE_CATALOG)
    n = await start_node(nursery, tmp_path, test_mode=True, catalog_file=str(tmp_path / "catalog.toml"))
    try:
        html = await (await n.client.get("/", headers=HTML)).get_data(as_text=True)
        assert html.index("<strong>sdxl</strong>") < html.index("<strong>proc-image</strong>")
        assert "not a diffusion model" not in html
    finally:
        await stop_node(n)


async def test_the_api_reference_page_loads_the_vendored_viewer(node):
    r = await node.client.get("/docs", headers=HTML)
    html = await r.get_data(as_text=True)
    assert r.status_code == 200 and 'data-url="/v1/openapi.json"' in html
    vendor = "/static/vendor/swagger-ui-5.35.0/"
    for src in (vendor + "swagger-ui-bundle.js", vendor + "swagger-ui.css", "/static/docs-1.js"):
        assert src in html
        r = await node.client.get(src)
        assert r.status_code == 200 and r.headers["Cache-Control"] == "public, max-age=86400"
    assert "//cdn" not in html and "unpkg" not in html


@pytest.mark.parametrize("path", [
    "/static/vendor/swagger-ui-5.35.0/LICENSE", "/static/vendor/..%2f..%2froutes/front.py",
    "/static/vendor/.hidden/x.js", "/static/vendor/swagger-ui-5.35.0/nothing.js", "/static/vendor/x/y/z.js",
])
async def test_vendor_paths_outside_the_files_are_404(node, path):
    r = await node.client.get(path)
    assert r.status_code == 404


async def test_favicon(node):
    r = await node.client.get("/favicon.ico")
    assert r.status_code == 200 and r.headers["Content-Type"] == "image/x-icon"
    assert (await r.get_data())[:4] == b"\x00\x00\x01\x00"


async def test_a_browser_gets_an_html_page_for_a_crash_and_an_api_client_the_envelope(node):
    async def boom():
        raise RuntimeError("boom")

    node.app.add_url_rule("/crash-for-test", "crash_for_test", boom)
    node.app.add_url_rule("/v1/crash-for-test", "v1_crash_for_test", boom)
    r = await node.client.get("/crash-for-test", headers=HTML)
    html = await r.get_data(as_text=True)
    assert r.status_code == 500 and "<h1>Something went wrong</h1>" in html and "boom" not in html
    r = await node.client.get("/v1/crash-for-test", headers=HTML)
    body = await r.get_json()
    assert r.status_code == 500 and body["error"]["code"] == "request.internal_error"
    assert body["error"]["message"] == "Something went wrong on our side."


async def test_the_404_page_leads_somewhere(node):
    r = await node.client.get("/no-such-page", headers=HTML)
    html = await r.get_data(as_text=True)
    assert r.status_code == 404 and 'href="/"' in html and 'href="/login"' in html


def test_times_show_minutes_in_utc_for_the_page_script_to_localise():
    from service.http.pages import when

    assert str(when("2026-11-26T13:50:10.826123Z")) == (
        '<time datetime="2026-11-26T13:50:10.826123Z">2026-11-26 13:50 UTC</time>')
    assert str(when(None)) == "—" and str(when("", "never")) == "never"
    assert str(when('2026-11-26T13:50:10Z"><script>')).count("<script>") == 0
