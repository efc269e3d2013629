"""Cookie flags of the sign-in pages behind an https base URL: every Set-Cookie, the ones that
clear a cookie included (logout, the end of a provider sign-in), is Secure, HttpOnly and
SameSite=Lax; a clearing cookie without Secure is what scanners and some proxies refuse, and
it differs from the cookie it replaces."""

from __future__ import annotations

import pytest

from tests.conftest import start_node, stop_node
from tests.pages import csrf, page
from tests.test_dashboard_http import logged_in
from tests.test_oidc_login import KEY, authorize, oidc_node, set_claims  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("cheap_hashes")


def flags_of(resp, name: str) -> str:
    cookies = [c for c in resp.headers.getlist("Set-Cookie") if c.startswith(name + "=")]
    assert cookies, f"no Set-Cookie for {name}"
    return cookies[0]


async def test_logout_clears_the_session_cookie_with_the_same_flags(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, base_url="https://genservice.example")
    try:
        await logged_in(n)
        _, html = await page(n.client, "/keys")
        r = await n.client.post("/logout", form={"csrf_token": csrf(html)})
        assert r.status_code == 303 and r.headers["Location"] == "/login"
        cookie = flags_of(r, "gs_session")
        assert "Max-Age=0" in cookie or "expires=Thu, 01 Jan 1970" in cookie, cookie
        for flag in ("Secure", "HttpOnly", "SameSite=Lax", "Path=/"):
            assert flag in cookie, (flag, cookie)
    finally:
        await stop_node(n)


async def test_a_provider_sign_in_clears_its_flow_cookie_with_the_same_flags(oidc_node):  # noqa: F811 (the fixture)
    n = oidc_node
    await set_claims(n.issuer, "cookie-flags", email="flags@new.test", email_verified=True)
    _, html = await page(n.client, "/login")
    r = await n.client.post(f"/login/oidc/{KEY}", form={"csrf_token": csrf(html)}, scheme="https")
    assert r.status_code == 303
    assert "Secure" in flags_of(r, "gs_oidc")
    r = await n.client.get(await authorize(r.headers["Location"], "cookie-flags"), scheme="https")
    assert r.status_code == 303, await r.get_data(as_text=True)
    assert "Secure" in flags_of(r, "gs_session")
    cleared = flags_of(r, "gs_oidc")
    assert "Max-Age=0" in cleared, cleared
    for flag in ("Secure", "HttpOnly", "SameSite=Lax", "Path=/"):
        assert flag in cleared, (flag, cleared)
