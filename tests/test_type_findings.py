"""The paths mypy's `--check-untyped-defs` pointed at (tests/test_types.py), each shown to
behave: a page's session is the one `page()` checked, and an answer no route matched is
neither checked against a documented shape nor a 500."""

from __future__ import annotations

import pytest
from quart import g

from service.http.browser import page_session


async def test_a_page_handler_without_a_session_never_runs(node):
    """`/account` and its forms read `page_session()`: without a live session `page()`
    sends the visitor to the login page before the handler runs."""
    r = await node.client.get("/account")
    assert r.status_code == 303 and r.headers["Location"].startswith("/login")


async def test_page_session_outside_a_page_is_a_programming_error(node):
    async with node.app.test_request_context("/account"):
        with pytest.raises(RuntimeError, match="behind @page"):
            page_session()
        assert g.get("page_session") is None


async def test_an_unmatched_path_in_test_mode_answers_404_not_500(node):
    """Test mode checks every `/v1` answer against its documented shape by route template; a
    request no route matched has none, and is answered and counted as unmatched."""
    r = await node.client.get("/v1/no-such-path")
    assert r.status_code == 404
    body = await r.get_json()
    assert body["error"]["code"] == "request.not_found"
    assert node.parts.metrics.requests.labels("unmatched", "GET", "404")._value.get() == 1
