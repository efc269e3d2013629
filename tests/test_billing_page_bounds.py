"""The billing page and its CSV against hostile input: probe L11 (`/billing?offset=<huge>`
was a 500) and L13 (project names went into usage.csv unescaped: spreadsheet formulas)."""

from __future__ import annotations

import csv
import io

import pytest

from service.http.routes.dash_billing import spreadsheet_text
from test_generation_support import submit, wait_status
from tests.test_dashboard_http import HTML, logged_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")


@pytest.mark.parametrize("offset", ["9" * 30, str(2**63), str(2**64 + 1), "99999999999999999999", "-5", "0",
                                    "", "1000000"])
async def test_any_whole_offset_answers_a_page(node, offset):
    await logged_in(node)
    r = await node.client.get(f"/billing?offset={offset}", headers=HTML)
    html = await r.get_data(as_text=True)
    assert r.status_code == 200, html[:300]
    assert "1–1 of 1." in html  # the one entry (the signup grant): an offset past the end shows the last page


@pytest.mark.parametrize("offset", ["abc", "1e9", "9" * 41, "1.5", "0x10", "%ff"])
async def test_an_offset_that_is_not_a_whole_number_is_the_400_page(node, offset):
    await logged_in(node)
    r = await node.client.get(f"/billing?offset={offset}", headers=HTML)
    html = await r.get_data(as_text=True)
    assert r.status_code == 400
    assert "<h1>Bad page address</h1>" in html and "The ledger offset must be a whole number." in html


@pytest.mark.parametrize("text, cell", [
    ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"), ("+1+1", "'+1+1"), ("-2+3", "'-2+3"),
    ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"), ("Plain", "Plain"), ("a=b", "a=b"), ("", ""),
])
def test_formula_cells_are_made_text(text, cell):
    assert spreadsheet_text(text) == cell


async def test_usage_csv_escapes_project_names(node):
    org = await logged_in(node)
    key = org["api_key"]
    r = await node.call("POST", "/v1/projects", key, json={"name": "=HYPERLINK(\"http://evil.test\",\"x\")"})
    assert r.status_code in (200, 201), await r.get_data(as_text=True)
    project = (await r.get_json())["data"]
    rid = (await submit(node, key, {"prompt": "a fox", "project_id": project["id"]}))["request_id"]
    assert (await wait_status(node, key, rid))["status"] == "completed"
    r = await node.client.get("/billing/usage.csv")
    assert r.status_code == 200
    rows = list(csv.reader(io.StringIO(await r.get_data(as_text=True))))
    assert rows[0] == ["day", "project_id", "project", "jobs", "credits"]
    mine = [row for row in rows[1:] if row[1] == project["id"]]
    assert len(mine) == 1 and mine[0][2] == "'=HYPERLINK(\"http://evil.test\",\"x\")"


HOSTILE = ["9" * 400, "-" + "9" * 30, "%ff%fe", "%ed%a0%80", "1e999", "nan", "' OR 1=1 --", "<script>", "%00"]


async def test_no_page_answers_500_to_hostile_query_values(node):
    """The sweep of every dashboard page's query parameters (offset, cursor, source, topup,
    capability, model, inputs, next, token) with hostile values: a page, a redirect or a 4xx."""
    await logged_in(node)
    paths = ["/billing?offset={v}", "/billing?topup={v}&checkout={v}", "/history?cursor={v}",
             "/history?source={v}", "/history?cursor={v}&source=api",
             "/studio?capability={v}&model={v}&prompt={v}", "/studio/form?capability={v}&resolution={v}",
             "/products/text-to-clip?in_prompt={v}", "/products/{v}", "/products/runs/{v}", "/studio/jobs/{v}",
             "/support/{v}", "/webhooks/{v}", "/assets?offset={v}&limit={v}", "/keys?offset={v}",
             "/members?offset={v}", "/login?next={v}", "/invitations/accept?token={v}", "/confirm?token={v}",
             "/reset-password?token={v}"]
    failures = []
    for template in paths:
        for value in HOSTILE:
            path = template.replace("{v}", value)
            r = await node.client.get(path, headers=HTML)
            if r.status_code >= 500:
                failures.append((path[:80], r.status_code))
    assert failures == []
