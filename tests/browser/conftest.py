"""Real-browser harness: Debian's Chromium driven by Playwright's sync API (no pytest-playwright,
no `playwright install`), one `genservice serve` subprocess per test run (test mode, one
OpenID Connect provider, mail to the test SMTP server), a session `browser` and a fresh context per test."""

from __future__ import annotations

import shutil

import pytest
import trustme
from playwright.sync_api import sync_playwright

from tests.browser.support import Node, start_node


@pytest.fixture(scope="session")
def tls_ca():
    return trustme.CA()


@pytest.fixture(scope="session")
def node(tmp_path_factory, oidc_issuer, tls_ca, smtp):
    tmp = tmp_path_factory.mktemp("browser-node")
    tls_ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    mail = {f"GENSERVICE_{k.upper()}": str(v) for k, v in smtp.settings().items()}
    with start_node(tmp, oidc_issuer, tmp / "ca.pem", mail) as n:
        yield n


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, node: Node):
    context = browser.new_context(base_url=node.url)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()
