"""The operator console: paging values of odd shape, a session under a rotated operator
token, and "Sign out" for a listed person whose browser still holds a dead console cookie."""

from __future__ import annotations

import pytest

from service.console import IDLE
from service.storage.sessions import digest
from tests.conftest import OPERATOR, start_node, stop_node
from tests.pages import page
from tests.test_operator_console import console_form, person_login, sign_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def test_paging_values_of_odd_shape_answer_a_page_not_a_500(node):
    """`²` passes str.isdigit() but not int(); 30 digits overflow SQLite's INTEGER; 5000
    digits pass Python's int-from-string limit."""
    org = await node.create_org(name="Paged Co", email="p@acme.test")
    await sign_in(node.client)
    huge = "9" * 5000
    for query in ("%C2%B2", "9" * 30, huge):
        r, html = await page(node.client, "/operator/audit?before=" + query)
        assert r.status_code == 200, query
        assert ">sign_in<" in html, query  # read as no `before`: the newest entries
    for path in ("/operator/organizations", "/operator/mail", "/operator/support",
                 f"/operator/organizations/{org['organization_id']}"):
        r, html = await page(node.client, path + "?offset=%C2%B2")
        assert r.status_code == 200, path
        r = await node.client.get(path + "?offset=" + huge)
        assert r.status_code == 200, path
    _, html = await page(node.client, "/operator/organizations?offset=%C2%B2")
    assert "Paged Co" in html  # read as offset 0
    _, html = await page(node.client, "/operator/organizations?offset=" + "0" * 30 + "1")
    assert "Paged Co" not in html  # offset 1 of one organization


async def test_a_console_session_ends_when_the_operator_token_is_rotated(node):
    await sign_in(node.client)
    assert (await node.client.get("/operator")).status_code == 200
    node.parts.settings.operator_token = "rotated-operator-token"  # a restart with a new token
    r = await node.client.get("/operator/jobs")
    assert r.status_code == 303 and r.headers["Location"] == "/operator/login?next=/operator/jobs"
    assert (await sign_in(node.client, OPERATOR)).status_code == 401
    r = await sign_in(node.client, "rotated-operator-token")
    assert r.status_code == 303 and r.headers["Location"] == "/operator"
    assert (await node.client.get("/operator/jobs")).status_code == 200


async def test_sign_out_ends_a_listed_persons_login_despite_a_dead_console_cookie(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, operator_emails="boss@acme.test")
    try:
        await sign_in(n.client)
        n.clock.advance(IDLE + 1)  # the console session is over; its cookie (12 h) is still sent
        await person_login(n, "boss@acme.test")
        r, html = await page(n.client, "/operator")
        assert r.status_code == 200 and "boss@acme.test" in html
        login = next(c.value for c in n.client.cookie_jar if c.name == "gs_session")
        r = await console_form(n.client, "/operator/logout", {})
        assert r.status_code == 303 and r.headers["Location"] == "/operator/login"
        assert n.store.scalar("SELECT COUNT(*) FROM sessions WHERE token_hash = ?", (digest(login),)) == 0
        r = await n.client.get("/operator")
        assert r.status_code == 303 and r.headers["Location"] == "/operator/login?next=/operator"
        rows = n.store.all("SELECT who, action FROM operator_audit WHERE who != 'operator API' ORDER BY seq")
        assert [(a["who"], a["action"]) for a in rows] == [("operator token", "sign_in"),
                                                            ("boss@acme.test", "sign_out")]
    finally:
        await stop_node(n)
