"""Object-level authorization of the dashboard, generated from the app's route table: every
page and form with an id in its path, opened by a member of organization A with an id of
organization B, answers like an id that does not exist (404) and leaves B's rows unchanged.
A dashboard route whose path parameter is not mapped below fails the test."""

from __future__ import annotations

import re

import pytest

from tests.pages import csrf, page
from tests.test_bola_matrix import resources
from tests.test_dashboard_http import logged_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")

GLOBAL = {"slug", "name", "package", "key"}  # catalog and static names, not an organization's objects
WATCHED = ["api_keys", "projects", "webhooks", "support_tickets", "support_replies", "invitations", "users",
           "studio_hidden", "spend_limits"]
PAGE_MODULES = ("service.http.routes.dash_",)


def dash_routes(node) -> list[tuple[str, str]]:
    out = []
    for rule in node.app.url_map.iter_rules():
        module = node.app.view_functions[rule.endpoint].__module__
        if module.startswith(PAGE_MODULES) and re.search(r"<", rule.rule):
            out += [(m, rule.rule) for m in sorted(rule.methods & {"GET", "POST"})]
    return out


def snapshot(node) -> dict:
    return {t: node.store.all(f"SELECT * FROM {t} ORDER BY rowid") for t in WATCHED}


async def test_another_organizations_ids_are_not_found_from_the_dashboard(node):
    b = await node.create_org(name="Beta", email="owner@beta.test")
    ids = await resources(node, b)
    ids["user_id"] = (await node.add_member(b["organization_id"], "member", "m@beta.test"))["user_id"]
    r = await node.op("POST", f"/organizations/{b['organization_id']}/invitations",
                      {"email": "new@beta.test", "role": "member"})
    ids["invitation_id"] = (await r.get_json())["data"]["invitation_id"]
    await logged_in(node)  # organization A's owner: every permission
    _, html = await page(node.client, "/keys")
    token = csrf(html)
    before = snapshot(node)
    tried = 0
    for method, rule in dash_routes(node):
        names = re.findall(r"<(?:[a-z]+:)?([a-z_]+)>", rule)
        if set(names) <= GLOBAL:
            continue
        assert set(names) - GLOBAL <= ids.keys(), f"map the parameters of {rule}"
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", lambda m: ids[m.group(1)], rule)
        form = {"csrf_token": token, "form_token": f"t{tried}", "role": "admin", "limit": "5", "body": "hi",
                "events": "api_key.created"}
        r = await (node.client.get(path, headers={"Accept": "text/html"}) if method == "GET" else
                   node.client.post(path, form=form, headers={"Accept": "text/html"}))
        text = await r.get_data(as_text=True)
        assert r.status_code == 404, (method, rule, r.status_code, text[:300])
        assert r.headers["Content-Type"].startswith("text/html"), (method, rule, text[:300])
        tried += 1
    assert tried >= 15
    assert snapshot(node) == before
