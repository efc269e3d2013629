"""Helpers of the HTML page tests: the CSRF token of a page, posting a form like a browser."""

from __future__ import annotations

import re

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf(html: str) -> str:
    m = _CSRF.search(html)
    assert m, "page has no CSRF field"
    return m.group(1)


async def page(client, path: str):
    r = await client.get(path)
    return r, await r.get_data(as_text=True)


async def post_form(client, path: str, form: dict, *, token_from: str = "/login", headers=None):
    """POST `form` with the CSRF token of the page at `token_from` (read first, as a browser would)."""
    _, html = await page(client, token_from)
    return await client.post(path, form={"csrf_token": csrf(html), **form}, headers=headers or {})
