"""Spend limits in the dashboard: the Projects and API keys pages show limit, spent and a bar;
owners and admins set limits there (members see no form and are refused); Studio says what
the project has left this month next to the price."""

from __future__ import annotations

import pytest

from tests.pages import csrf, page
from tests.test_dashboard_http import logged_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def post(node, path: str, form: dict, token_from: str):
    _, html = await page(node.client, token_from)
    return await node.client.post(path, form={"csrf_token": csrf(html), **form})


async def test_owner_sets_a_project_limit_and_sees_the_bar(node):
    org = await logged_in(node)
    pid = org["default_project_id"]
    _, html = await page(node.client, "/projects")
    assert "0.00 spent" in html and "no limit" in html
    assert '<label for="limit-%s">Monthly limit for Default</label>' % pid in html
    r = await post(node, f"/projects/{pid}/limit", {"limit": "10"}, "/projects")
    assert r.status_code == 303
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", org["api_key"],
                        json={"prompt": "a fox"})
    assert r.status_code == 202
    _, html = await page(node.client, "/projects")
    assert "1.00 of 10.00" in html
    assert '<progress max="10.00" value="1.0" aria-label="Spent this month by Default">' in html
    _, html = await page(node.client, "/studio")
    assert "Price: <strong>1.00</strong> credits (1k); this project has <strong>9.00</strong> credits left " \
           "this month" in html
    r = await post(node, f"/projects/{pid}/limit", {"limit": ""}, "/projects")  # empty: no limit
    assert r.status_code == 303
    _, html = await page(node.client, "/studio")
    assert "credits left this month" not in html


async def test_a_bad_limit_on_the_page_says_why(node):
    org = await logged_in(node)
    r = await post(node, f"/projects/{org['default_project_id']}/limit", {"limit": "1.234"}, "/projects")
    html = await r.get_data(as_text=True)
    assert r.status_code == 400
    assert ('monthly_spend_limit must be a decimal string of credits with at most two decimals, '
            '&#34;0&#34; or more, or null.') in html


async def test_keys_page_creates_a_limited_key_and_changes_its_limit(node):
    await logged_in(node)
    r = await post(node, "/keys", {"name": "ci", "spend_limit": "50"}, "/keys")
    assert r.status_code == 303  # Post/Redirect/Get
    _, html = await page(node.client, "/keys")
    assert "0.00 of 50.00" in html
    key_id = node.store.one("SELECT id FROM api_keys WHERE name = 'ci'")["id"]
    r = await post(node, f"/keys/{key_id}/limit", {"limit": "75.5"}, "/keys")
    assert r.status_code == 303
    _, html = await page(node.client, "/keys")
    assert "0.00 of 75.50" in html and '<label for="limit-%s">Spend limit for ci</label>' % key_id in html
    r = await post(node, "/keys", {"name": "bad", "spend_limit": "-1"}, "/keys")
    assert r.status_code == 400
    assert node.store.one("SELECT COUNT(*) AS n FROM api_keys WHERE name = 'bad'")["n"] == 0


async def test_a_member_sees_no_limit_form_and_is_refused(node):
    org = await logged_in(node, "member")
    _, html = await page(node.client, "/projects")
    assert "Monthly limit for" not in html and "0.00 spent" in html
    r = await node.client.post(f"/projects/{org['default_project_id']}/limit", form={"csrf_token": csrf(html),
                                                                                    "limit": "1"})
    assert r.status_code == 403
