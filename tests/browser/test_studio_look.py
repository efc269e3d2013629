"""The visual system in a real browser: every dashboard page in dark mode (the system setting,
emulated) stays axe-clean with the dark tokens applied; the light tokens by default; the
operator sign-in page and the public pages use the same stylesheet."""

from __future__ import annotations

import pytest

from tests.browser.support import check_page, login_new_org
from tests.browser.studio_shots import SIZES, doc_shot

DARK_BG = "rgb(18, 21, 25)"
LIGHT_BG = "rgb(255, 255, 255)"


def background(page) -> str:
    return page.evaluate("() => getComputedStyle(document.body).backgroundColor")


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_light_by_default_and_every_page_axe_clean_in_dark(page, node, size):
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    org = login_new_org(page, node)
    node.api("POST", "/v1/generation/capabilities/image.generate", org["api_key"], json={"prompt": "a fox"})
    page.goto("/studio")
    assert background(page) == LIGHT_BG
    page.emulate_media(color_scheme="dark")
    for path, name in [("/studio", "studio"), ("/history", "history"), ("/billing", "billing"), ("/keys", "keys"),
                       ("/products", "products"), ("/products/text-to-clip", "product"), ("/assets", "assets"),
                       ("/members", "members"), ("/projects", "projects"), ("/support", "support")]:
        page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))  # check_page's shots reset it
        page.goto(path)
        assert background(page) == DARK_BG, path
        check_page(page, f"dark-{name}-{size}")
    page.goto("/studio")
    doc_shot(page, "studio-dark", widths=(size,))


def test_public_and_operator_sign_in_pages_share_the_tokens(page, node):
    page.emulate_media(color_scheme="dark")
    for path in ("/", "/operator/login", "/login"):
        page.goto(path)
        assert background(page) == DARK_BG, path
        accent = page.evaluate("() => getComputedStyle(document.documentElement).getPropertyValue('--accent').trim()")
        assert accent == "#74b3ff", path
