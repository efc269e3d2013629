"""Support tickets: customer routes, operator routes, the TICKET machine's moves and the
support.* events (spec "Support ticket" states, "Events" data fields)."""

from __future__ import annotations

import json

import pytest

from test_webhooks_receiver import receiver, running_node
from conftest import err, j

FORBIDDEN = {"status": False, "error": "Forbidden"}
UNAUTHORIZED = {"status": False, "error": "Unauthorized"}
TICKET_FIELDS = {"id", "organization_id", "number", "subject_line", "type", "priority", "state", "body",
                 "opened_by", "opened_by_email", "created_at", "updated_at"}
OPENED = {"ticket_id", "ticket_number", "subject_line", "type", "priority", "state", "organization_id"}
REPLIED = {"ticket_id", "ticket_number", "subject_line", "author", "body", "recipient_email", "organization_id"}
CHANGED = {"ticket_id", "ticket_number", "subject_line", "state", "previous_state", "organization_id"}


def events(node, org_id, prefix="support."):
    rows = node.store.all("SELECT event, data FROM events WHERE organization_id = ? ORDER BY seq", (org_id,))
    return [(r["event"], json.loads(r["data"])) for r in rows if r["event"].startswith(prefix)]


async def open_ticket(node, key, **over):
    payload = {"subject_line": "Renders fail", "type": "bug", "priority": "P2", "body": "Since noon."} | over
    r = await node.call("POST", "/v1/support/tickets", key, json=payload)
    assert r.status_code == 201, await r.get_data(as_text=True)
    return (await j(r))["data"]


async def reply(node, key, ticket_id, body="More detail."):
    return await node.call("POST", f"/v1/support/tickets/{ticket_id}/replies", key, json={"body": body})


async def support_reply(node, ticket_id, body="Fixed now.", author="Dana (Support)"):
    return await node.op("POST", f"/support/tickets/{ticket_id}/replies", {"body": body, "author": author})


async def set_state(node, ticket_id, state):
    return await node.op("POST", f"/support/tickets/{ticket_id}/state", {"state": state})


# -- opening ----------------------------------------------------------------------------------------
async def test_open_answers_the_ticket_and_emits_opened(node):
    org = await node.create_org()
    t = await open_ticket(node, org["api_key"])
    assert set(t) == TICKET_FIELDS | {"replies"}
    assert (t["number"], t["state"], t["subject_line"], t["type"], t["priority"], t["body"]) == (
        1, "open", "Renders fail", "bug", "P2", "Since noon.")
    assert t["opened_by"] == org["owner_user_id"] and t["opened_by_email"] == "owner@acme.test"
    assert t["organization_id"] == org["organization_id"] and t["replies"] == []
    assert events(node, org["organization_id"]) == [("support.ticket.opened", {
        "ticket_id": t["id"], "ticket_number": 1, "subject_line": "Renders fail", "type": "bug",
        "priority": "P2", "state": "open", "organization_id": org["organization_id"]})]


async def test_ticket_numbers_count_per_organization(node):
    a = await node.create_org("A", "a@a.test")
    b = await node.create_org("B", "b@b.test")
    assert [(await open_ticket(node, a["api_key"]))["number"] for _ in range(3)] == [1, 2, 3]
    assert (await open_ticket(node, b["api_key"]))["number"] == 1


async def test_type_and_priority_default_to_question_and_p3(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/support/tickets", org["api_key"], json={"subject_line": "Hi", "body": "?"})
    t = (await j(r))["data"]
    assert (r.status_code, t["type"], t["priority"]) == (201, "question", "P3")


@pytest.mark.parametrize("payload,code,details", [
    ({"subject_line": "  "}, 422, {"field": "subject_line"}),
    ({"body": ""}, 422, {"field": "body"}),
    ({"type": "rant"}, 422, {"type": "rant", "allowed": ["question", "bug", "access", "billing", "account"]}),
    ({"priority": "P0"}, 422, {"priority": "P0", "allowed": ["P1", "P2", "P3", "P4"]}),
])
async def test_rule_violations_are_422(node, payload, code, details):
    org = await node.create_org()
    r = await node.call("POST", "/v1/support/tickets", org["api_key"],
                        json={"subject_line": "S", "body": "B"} | payload)
    assert r.status_code == code
    e = err(await j(r))
    assert e["code"] == "request.validation_failed" and e["details"] == details
    assert events(node, org["organization_id"]) == []


@pytest.mark.parametrize("payload,key", [
    ({"body": "B"}, "subject_line"),
    ({"subject_line": "S"}, "body"),
    ({"subject_line": "S", "body": "B", "state": "closed"}, "state"),
    ({"subject_line": 5, "body": "B"}, "subject_line"),
])
async def test_schema_violations_are_400(node, payload, key):
    org = await node.create_org()
    r = await node.call("POST", "/v1/support/tickets", org["api_key"], json=payload)
    assert r.status_code == 400
    e = err(await j(r))
    assert e["code"] == "request.validation_failed" and key in [x["key"] for x in e["details"]["errors"]]


# -- reading -------------------------------------------------------------------------------------------
async def test_list_is_newest_first_with_limit_and_state_filter(node):
    org = await node.create_org()
    key = org["api_key"]
    ids = [(await open_ticket(node, key, subject_line=f"t{i}"))["id"] for i in range(3)]
    await set_state(node, ids[0], "triaging")
    r = await node.call("GET", "/v1/support/tickets", key)
    data = (await j(r))["data"]
    assert [t["id"] for t in data] == ids[::-1] and set(data[0]) == TICKET_FIELDS
    r = await node.call("GET", "/v1/support/tickets?limit=2", key)
    assert [t["id"] for t in (await j(r))["data"]] == ids[:0:-1]
    r = await node.call("GET", "/v1/support/tickets?state=triaging", key)
    assert [t["id"] for t in (await j(r))["data"]] == [ids[0]]
    r = await node.call("GET", "/v1/support/tickets?state=lost", key)
    assert r.status_code == 400 and err(await j(r))["code"] == "request.bad_request"


async def test_get_has_replies_and_other_organizations_get_404(node):
    a = await node.create_org("A", "a@a.test")
    b = await node.create_org("B", "b@b.test")
    t = await open_ticket(node, a["api_key"])
    await reply(node, a["api_key"], t["id"], "Still broken.")
    await support_reply(node, t["id"], "Looking.")
    r = await node.call("GET", f"/v1/support/tickets/{t['id']}", a["api_key"])
    got = (await j(r))["data"]
    assert [(x["author_kind"], x["author"], x["body"]) for x in got["replies"]] == [
        ("customer", "a@a.test", "Still broken."), ("support", "Dana (Support)", "Looking.")]
    assert set(got["replies"][0]) == {"id", "author_kind", "author", "user_id", "body", "created_at"}
    assert got["replies"][0]["user_id"] == a["owner_user_id"] and got["replies"][1]["user_id"] is None
    for method, path, body in (("GET", "", None), ("POST", "/replies", {"body": "x"})):
        r = await node.call(method, f"/v1/support/tickets/{t['id']}{path}", b["api_key"], json=body)
        assert r.status_code == 404 and err(await j(r))["code"] == "request.not_found"
    assert (await j(await node.call("GET", "/v1/support/tickets", b["api_key"])))["data"] == []


# -- the TICKET machine and its events ------------------------------------------------------------------
async def test_support_reply_emits_replied_and_waits_on_the_customer(node):
    org = await node.create_org()
    org_id, key = org["organization_id"], org["api_key"]
    t = await open_ticket(node, key)
    r = await support_reply(node, t["id"], "Try again please.", "Dana")
    assert r.status_code == 201
    assert (await j(r))["data"]["state"] == "awaiting_customer"
    base = {"ticket_id": t["id"], "ticket_number": 1, "subject_line": "Renders fail", "organization_id": org_id}
    assert events(node, org_id)[1:] == [
        ("support.ticket.replied", base | {"author": "Dana", "body": "Try again please.",
                                           "recipient_email": "owner@acme.test"}),
        ("support.ticket.state_changed", base | {"state": "awaiting_customer", "previous_state": "open"}),
    ]
    # a second support reply while waiting: replied only
    await support_reply(node, t["id"], "Any news?", "Dana")
    assert [e for e, _ in events(node, org_id)[3:]] == ["support.ticket.replied"]
    # the customer answers: reopened, state_changed
    r = await reply(node, key, t["id"], "Works now.")
    assert r.status_code == 201 and (await j(r))["data"]["state"] == "open"
    assert events(node, org_id)[4:] == [
        ("support.ticket.state_changed", base | {"state": "open", "previous_state": "awaiting_customer"})]
    for name, data in events(node, org_id):
        assert set(data) == {"support.ticket.opened": OPENED, "support.ticket.replied": REPLIED,
                             "support.ticket.state_changed": CHANGED}[name]


async def test_recipient_is_whoever_opened_the_ticket(node):
    org = await node.create_org()
    m = await node.add_member(org["organization_id"], "read_only", "viewer@acme.test")
    t = await open_ticket(node, m["api_key"], type="access")
    await support_reply(node, t["id"])
    [(_, data)] = events(node, org["organization_id"], "support.ticket.replied")
    assert data["recipient_email"] == "viewer@acme.test"


async def test_customer_reply_on_an_open_ticket_changes_nothing(node):
    org = await node.create_org()
    t = await open_ticket(node, org["api_key"])
    await set_state(node, t["id"], "triaging")
    r = await reply(node, org["api_key"], t["id"])
    assert r.status_code == 201 and (await j(r))["data"]["state"] == "triaging"
    assert [e for e, _ in events(node, org["organization_id"])] == [
        "support.ticket.opened", "support.ticket.state_changed"]


async def test_customer_reply_reopens_a_resolved_ticket(node):
    org = await node.create_org()
    t = await open_ticket(node, org["api_key"])
    await set_state(node, t["id"], "resolved")
    r = await reply(node, org["api_key"], t["id"])
    assert (await j(r))["data"]["state"] == "open"
    assert events(node, org["organization_id"])[-1][1] | {} == {
        "ticket_id": t["id"], "ticket_number": 1, "subject_line": "Renders fail", "state": "open",
        "previous_state": "resolved", "organization_id": org["organization_id"]}


async def test_operator_state_moves_and_closed_is_final(node):
    org = await node.create_org()
    org_id, key = org["organization_id"], org["api_key"]
    t = await open_ticket(node, key)
    r = await set_state(node, t["id"], "triaging")
    assert r.status_code == 200 and (await j(r))["data"]["state"] == "triaging"
    r = await set_state(node, t["id"], "triaging")  # unchanged: no event
    assert r.status_code == 200
    r = await set_state(node, t["id"], "closed")
    assert (await j(r))["data"]["state"] == "closed"
    assert [(d["previous_state"], d["state"]) for _, d in events(node, org_id, "support.ticket.state_changed")] == [
        ("open", "triaging"), ("triaging", "closed")]
    before = len(events(node, org_id))
    for r in (await set_state(node, t["id"], "open"), await reply(node, key, t["id"]),
              await support_reply(node, t["id"])):
        assert r.status_code == 409
        e = err(await j(r))
        assert e == {"code": "request.conflict", "message": "The ticket is closed.",
                     "details": {"ticket_id": t["id"], "state": "closed"}}
    r = await set_state(node, t["id"], "closed")
    assert r.status_code == 200
    assert len(events(node, org_id)) == before
    r = await set_state(node, t["id"], "done")
    assert r.status_code == 422
    assert err(await j(r))["details"] == {"state": "done", "allowed": [
        "open", "triaging", "awaiting_customer", "resolved", "closed"]}


async def test_operator_routes_need_the_operator_token(node):
    org = await node.create_org()
    t = await open_ticket(node, org["api_key"])
    for method, path, body in (("GET", "", None), ("GET", f"/{t['id']}", None),
                               ("POST", f"/{t['id']}/replies", {"body": "x"}),
                               ("POST", f"/{t['id']}/state", {"state": "closed"})):
        for headers in ({}, {"Authorization": f"Bearer {org['api_key']}"}, {"Authorization": "Bearer nope"}):
            r = await node.client.open(f"/operator/v1/support/tickets{path}", method=method, json=body,
                                       headers=headers)
            assert r.status_code == 401 and await j(r) == UNAUTHORIZED
    r = await node.op("POST", "/support/tickets/00000000-0000-0000-0000-000000000000/state", {"state": "open"})
    assert r.status_code == 404


async def test_operator_lists_across_organizations(node):
    a = await node.create_org("A", "a@a.test")
    b = await node.create_org("B", "b@b.test")
    ta = await open_ticket(node, a["api_key"])
    tb = await open_ticket(node, b["api_key"], subject_line="Billing question", type="billing")
    r = await node.op("GET", "/support/tickets")
    assert [t["id"] for t in (await j(r))["data"]] == [tb["id"], ta["id"]]
    r = await node.op("GET", f"/support/tickets?organization_id={a['organization_id']}")
    assert [t["id"] for t in (await j(r))["data"]] == [ta["id"]]
    r = await node.op("GET", f"/support/tickets/{tb['id']}")
    assert (await j(r))["data"]["replies"] == []


@pytest.mark.parametrize("role", ["owner", "admin", "member", "read_only"])
async def test_every_role_can_open_read_and_reply(node, role):
    org = await node.create_org()
    key = org["api_key"] if role == "owner" else (await node.add_member(org["organization_id"], role))["api_key"]
    t = await open_ticket(node, key)
    assert (await node.call("GET", "/v1/support/tickets", key)).status_code == 200
    assert (await node.call("GET", f"/v1/support/tickets/{t['id']}", key)).status_code == 200
    assert (await reply(node, key, t["id"])).status_code == 201
    assert (await node.call("GET", "/v1/support/tickets", None)).status_code == 401


# -- delivered end to end ----------------------------------------------------------------------------------
async def test_support_events_reach_a_subscribed_webhook_signed(tmp_path):
    import hashlib
    import hmac

    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        key = org["api_key"]
        r = await node.call("POST", "/v1/webhooks", key, json={"url": rx.url("/ok"), "events": [
            "support.ticket.opened", "support.ticket.replied", "support.ticket.state_changed"]})
        secret = (await j(r))["webhook"]["secret"]
        t = await open_ticket(node, key)
        await rx.wait_for(1)
        await support_reply(node, t["id"], "Done?", "Dana")
        await rx.wait_for(3)
        await reply(node, key, t["id"], "Yes")
        hits = await rx.wait_for(4)
        for h in hits:
            assert h.headers["x-service-signature"] == "sha256=" + hmac.new(
                secret.encode(), h.body, hashlib.sha256).hexdigest()
        got = sorted((h.json["event"], h.json["data"].get("state")) for h in hits)
        assert got == [("support.ticket.opened", "open"), ("support.ticket.replied", None),
                       ("support.ticket.state_changed", "awaiting_customer"),
                       ("support.ticket.state_changed", "open")]
        assert {h.json["event"]: h.json["data"] for h in hits}["support.ticket.replied"] == {
            "ticket_id": t["id"], "ticket_number": 1, "subject_line": "Renders fail", "author": "Dana",
            "body": "Done?", "recipient_email": "owner@acme.test", "organization_id": org["organization_id"]}
