"""The Content-Security-Policy of every HTML page: scripts and styles only from this site's
files, no inline script, style element or style attribute in any template (the policy would
block them), no plugins, no framing, no <base> rewrite. The browser test
(tests/browser/test_reset_and_csp.py) checks that no page breaks it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.http.pages import CSP
from tests.test_dashboard_http import HTML, logged_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")

TEMPLATES = Path(__file__).resolve().parent.parent / "service" / "http" / "templates"
INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "inline script"),
    (re.compile(r"<style\b", re.I), "style element"),
    (re.compile(r"\sstyle\s*=", re.I), "style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "event handler attribute"),
    (re.compile(r"javascript:", re.I), "javascript: URL"),
    (re.compile(r"\shx-on", re.I), "htmx inline handler"),
]


def test_the_policy():
    directives = dict(d.strip().split(" ", 1) for d in CSP.split(";"))
    assert directives == {
        "default-src": "'self'", "script-src": "'self'", "style-src": "'self'", "img-src": "'self' data:",
        "media-src": "'self'", "connect-src": "'self'", "object-src": "'none'", "base-uri": "'none'",
        "frame-ancestors": "'none'"}
    assert "unsafe" not in CSP


def test_no_template_has_inline_script_or_style():
    found = []
    for path in sorted(TEMPLATES.glob("*.html")):
        text = path.read_text()
        found += [(path.name, what) for pattern, what in INLINE if pattern.search(text)]
    assert found == []


async def test_every_page_carries_it(node):
    for path in ("/login", "/signup", "/forgot-password", "/reset-password?token=nope", "/no/such/page"):
        r = await node.client.get(path, headers=HTML)
        assert r.headers["Content-Security-Policy"] == CSP, path
    org = await logged_in(node)
    for path in ("/studio", "/history", "/assets", "/keys", "/billing", "/members", "/webhooks", "/support",
                 "/settings", "/projects", "/account", "/products"):
        r = await node.client.get(path, headers=HTML)
        assert r.status_code == 200 and r.headers["Content-Security-Policy"] == CSP, path
    r = await node.call("POST", "/v1/billing/topups", org["api_key"], json={"credits": 500})
    assert r.status_code == 201, await r.get_data(as_text=True)
    checkout = (await r.get_json())["data"]["checkout_url"].removeprefix("http://testserver")
    r = await node.client.get(checkout)
    assert r.status_code == 200 and r.headers["Content-Security-Policy"] == CSP
    r = await node.client.get("/static/page-1.css")
    assert r.status_code == 200 and b'@import url("/static/dash-1.css")' in await r.get_data()  # the shared tokens
