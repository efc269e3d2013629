"""Adversarial review of support tickets (docs/security-limits.md, "Support review"):
reading and replying need the same permission on the API and the pages, another
organization's ticket is not found either way, the subject line is one line (it becomes a
mail's Subject header), the operator's reply path keeps its bounds, and markup in a ticket
is text in pages and mails."""

from __future__ import annotations

import html
import json

import pytest

from service import roles
from service.http.routes import dash_support, support
from test_support import FORBIDDEN, events, open_ticket, reply, set_state, support_reply
from tests.pages import csrf, page
from tests.test_dashboard_http import logged_in
from conftest import err, j



def without_users_read(monkeypatch) -> None:
    """A role table where read_only lacks users:read (the four fixed roles all hold it, so
    only this shows which routes ask for it)."""
    monkeypatch.setitem(roles.TABLE, "users:read", {"owner", "admin", "member"})


# -- permissions: replying answers the whole ticket, so it needs what reading needs -------------
def test_reading_and_replying_declare_the_same_permission():
    assert support.reply.permission == support.get_ticket.permission == "users:read"
    assert dash_support.reply.permission == dash_support.ticket.permission == "users:read"


async def test_a_key_that_cannot_read_a_ticket_cannot_reply_to_it(node, monkeypatch):
    org = await node.create_org()
    viewer = await node.add_member(org["organization_id"], "read_only", "viewer@acme.test")
    t = await open_ticket(node, org["api_key"])
    without_users_read(monkeypatch)
    r = await node.call("GET", f"/v1/support/tickets/{t['id']}", viewer["api_key"])
    assert r.status_code == 403 and await j(r) == FORBIDDEN
    r = await reply(node, viewer["api_key"], t["id"], "Let me in.")
    assert r.status_code == 403 and await j(r) == FORBIDDEN
    assert node.store.all("SELECT id FROM support_replies") == []


async def test_a_session_that_cannot_read_a_ticket_cannot_reply_to_it_from_the_page(node, monkeypatch):
    org = await logged_in(node, role="read_only")
    t = await open_ticket(node, org["api_key"])
    _, html_text = await page(node.client, "/support")
    without_users_read(monkeypatch)
    r = await node.client.post(f"/support/{t['id']}/replies",
                               form={"csrf_token": csrf(html_text), "form_token": "f1", "body": "Let me in."})
    assert r.status_code == 403
    assert "Your role (read_only) does not allow this." in await r.get_data(as_text=True)
    assert node.store.all("SELECT id FROM support_replies") == []


# -- another organization's ticket ---------------------------------------------------------------
async def test_another_organizations_ticket_is_not_found_to_read_or_reply(node):
    a = await node.create_org()
    b = await node.create_org(name="Beta", email="owner@beta.test")
    t = await open_ticket(node, a["api_key"])
    await support_reply(node, t["id"])  # awaiting_customer: a reply would reopen it
    before = events(node, a["organization_id"])
    r = await node.call("GET", f"/v1/support/tickets/{t['id']}", b["api_key"])
    assert r.status_code == 404 and err(await j(r)) == {"code": "request.not_found", "message": "Ticket not found."}
    r = await reply(node, b["api_key"], t["id"], "Hijack.")
    assert r.status_code == 404 and err(await j(r)) == {"code": "request.not_found", "message": "Ticket not found."}
    assert events(node, a["organization_id"]) == before
    assert events(node, b["organization_id"]) == []
    assert [r["author_kind"] for r in node.store.all("SELECT author_kind FROM support_replies")] == ["support"]
    r = await node.call("GET", "/v1/support/tickets", b["api_key"])
    assert (await j(r))["data"] == []


# -- state: a reply from the page reopens a ticket waiting on the customer ------------------------
async def test_a_reply_from_the_page_reopens_and_emits_state_changed(node):
    org = await logged_in(node)
    t = await open_ticket(node, org["api_key"])
    await support_reply(node, t["id"])
    _, html_text = await page(node.client, f"/support/{t['id']}")
    r = await node.client.post(f"/support/{t['id']}/replies",
                               form={"csrf_token": csrf(html_text), "form_token": "f1", "body": "Still broken."})
    assert r.status_code == 303 and r.headers["Location"] == f"/support/{t['id']}"
    assert events(node, org["organization_id"])[-1] == ("support.ticket.state_changed", {
        "ticket_id": t["id"], "ticket_number": 1, "subject_line": "Renders fail", "state": "open",
        "previous_state": "awaiting_customer", "organization_id": org["organization_id"]})


# -- bounds --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("subject", "kept"), [
    ("Renders\r\nBcc: all@acme.test", "Renders Bcc: all@acme.test"), ("Renders\nfail", "Renders fail"),
    ("Renders\rfail", "Renders fail"), ("Renders\u2028fail", "Renders fail"), ("Renders\x0bfail", "Renders fail"),
    ("Tab\there", "Tab\there"), ("Caf\u00e9\u00a0Menu", "Caf\u00e9\u00a0Menu"),
])
async def test_a_subject_line_is_kept_on_one_line(node, subject, kept):
    """It becomes the Subject header of the support-reply mail, where a line break fails the
    mail for good: its breaks become spaces (a subject the schema allows is never refused)."""
    org = await node.create_org()
    r = await node.call("POST", "/v1/support/tickets", org["api_key"], json={"subject_line": subject, "body": "x"})
    assert r.status_code == 201
    assert (await j(r))["data"]["subject_line"] == kept


async def test_a_subject_line_with_a_newline_is_kept_on_one_line_from_the_page(node):
    await logged_in(node)
    _, html_text = await page(node.client, "/support")
    r = await node.client.post("/support", form={"csrf_token": csrf(html_text), "form_token": "f1",
                                                 "subject_line": "Hi\r\nBcc: x@y.test", "body": "x",
                                                 "type": "question", "priority": "P3"})
    assert r.status_code == 303
    assert node.store.all("SELECT subject_line FROM support_tickets") == [{"subject_line": "Hi Bcc: x@y.test"}]


async def test_unicode_and_long_subject_lines_at_the_bound(node):
    org = await node.create_org()
    t = await open_ticket(node, org["api_key"], subject_line="\u00e9\u4e2d\U0001f600" * 66 + "ab")
    assert len(t["subject_line"]) == 200
    r = await node.call("POST", "/v1/support/tickets", org["api_key"],
                        json={"subject_line": "x" * 201, "body": "x"})
    assert r.status_code in (400, 422)


@pytest.mark.parametrize("payload, message, details", [
    ({"body": "   "}, "body is required.", {"field": "body"}),
    ({"body": "x" * 20_001}, "body is longer than 20000 characters.", {"field": "body", "max": 20000}),
    ({"body": "ok", "author": "a" * 201}, "author is longer than 200 characters.", {"field": "author", "max": 200}),
    ({"body": "ok", "author": " "}, "author is required.", {"field": "author"}),
])
async def test_operator_reply_bounds(node, payload, message, details):
    org = await node.create_org()
    t = await open_ticket(node, org["api_key"])
    r = await node.op("POST", f"/support/tickets/{t['id']}/replies", payload)
    assert r.status_code == 422
    assert err(await j(r)) == {"code": "request.validation_failed", "message": message, "details": details}
    assert node.store.all("SELECT id FROM support_replies") == []


async def test_operator_reply_to_an_unknown_or_closed_ticket(node):
    org = await node.create_org()
    r = await node.op("POST", "/support/tickets/nope/replies", {"body": "hi"})
    assert r.status_code == 404 and err(await j(r)) == {"code": "request.not_found", "message": "Ticket not found."}
    t = await open_ticket(node, org["api_key"])
    await set_state(node, t["id"], "closed")
    r = await node.op("POST", f"/support/tickets/{t['id']}/replies", {"body": "hi"})
    assert r.status_code == 409
    assert err(await j(r)) == {"code": "request.conflict", "message": "The ticket is closed.",
                               "details": {"ticket_id": t["id"], "state": "closed"}}


# -- markup is text ------------------------------------------------------------------------------
EVIL = '<script>alert(1)</script><img src=x onerror=alert(2)> [x](javascript:alert(3)) **b**'


async def test_markup_in_tickets_is_escaped_in_pages_and_mails(node):
    org = await logged_in(node)
    t = await open_ticket(node, org["api_key"], subject_line="<b>Subject</b>", body=EVIL)
    assert (await reply(node, org["api_key"], t["id"], EVIL)).status_code == 201
    await support_reply(node, t["id"], EVIL, author="<i>Dana</i>")
    _, text = await page(node.client, f"/support/{t['id']}")
    assert "<script>" not in text and "<img" not in text and "<b>Subject</b>" not in text
    assert html.escape(EVIL, quote=False) in text or html.escape(EVIL) in text
    _, listing = await page(node.client, "/support")
    assert "<b>Subject</b>" not in listing
    [mail] = node.store.all("SELECT subject, body, html FROM emails WHERE kind = 'support_reply'")
    assert "<script>" not in mail["html"] and "<i>Dana</i>" not in mail["html"]
    assert "&lt;script&gt;" in mail["html"]
    r = await node.op("GET", f"/support/tickets/{t['id']}")
    assert (await j(r))["data"]["body"] == EVIL  # stored and answered as sent: JSON is not HTML
    assert json.dumps(EVIL)[1:-1] in json.dumps((await j(r))["data"])
