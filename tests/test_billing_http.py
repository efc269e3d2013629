"""Billing routes and the operator's billing routes, with exact bodies (spec "Billing";
operations.md "Operator API", "Test mode"). The mock clock makes every timestamp exact."""

from __future__ import annotations

import json

import pytest

from service.actors.balance.messages import Capture, Grant, PlaceHold, Release
from service.clock import iso
from service.money import UC
from tests.conftest import START, start_node

T0 = iso(START)
DAY = 86400.0
SIGNUP_EXPIRY = iso(START + 30 * DAY)


async def body(r):
    return r.status_code, await r.get_json()


def error(status_body, status, code, message, details=None):
    st, b = status_body
    rid = b["error"].pop("request_id")
    assert isinstance(rid, str) and rid
    want = {"code": code, "message": message}
    if details is not None:
        want["details"] = details
    assert (st, b) == (status, {"error": want})


class Org:
    def __init__(self, node, data):
        self.node = node
        self.id = data["organization_id"]
        self.key = data["api_key"]
        self.project = data["default_project_id"]

    async def get(self, path, key=None):
        return await body(await self.node.call("GET", path, key or self.key))

    async def ask(self, msg):
        return await self.node.parts.balances.ask(self.id, msg)

    def signup_lot(self):
        return self.node.store.one("SELECT id FROM credit_lots WHERE grant_id = ?", (f"signup:{self.id}",))["id"]


@pytest.fixture
async def org(node):
    return Org(node, await node.create_org())


# -- balance ------------------------------------------------------------------------------------
async def test_balance_after_signup(node, org, autojump_clock):
    assert await org.get("/v1/billing/balance") == (200, {"data": {
        "organization_id": org.id, "available": "200.00", "held": "0.00",
        "by_source": [{"source": "signup", "remaining": "200.00"}],
        "next_expiry": SIGNUP_EXPIRY, "next_expiry_amount": "200.00",
        "lots": [{"id": org.signup_lot(), "source": "signup", "amount": "200.00", "remaining": "200.00",
                  "expires_at": SIGNUP_EXPIRY, "reason": "Signup credit", "created_at": T0}],
    }})


async def test_balance_lots_in_spend_order_with_holds(node, org, autojump_clock):
    promo = await org.ask(Grant("p", 10_500_000, "promo", START + 5 * DAY, "welcome"))
    forever = await org.ask(Grant("f", 25 * UC, "topup", None, None))
    await org.ask(PlaceHold("h1", 3 * UC))            # all from the promo lot (expires first)
    signup = org.signup_lot()
    st, b = await org.get("/v1/billing/balance")
    assert (st, b) == (200, {"data": {
        "organization_id": org.id, "available": "232.50", "held": "3.00",
        "by_source": [{"source": "promo", "remaining": "10.50"}, {"source": "signup", "remaining": "200.00"},
                      {"source": "topup", "remaining": "25.00"}],
        "next_expiry": iso(START + 5 * DAY), "next_expiry_amount": "10.50",
        "lots": [
            {"id": promo["id"], "source": "promo", "amount": "10.50", "remaining": "10.50",
             "expires_at": iso(START + 5 * DAY), "reason": "welcome", "created_at": T0},
            {"id": signup, "source": "signup", "amount": "200.00", "remaining": "200.00",
             "expires_at": SIGNUP_EXPIRY, "reason": "Signup credit", "created_at": T0},
            {"id": forever["id"], "source": "topup", "amount": "25.00", "remaining": "25.00",
             "expires_at": None, "reason": None, "created_at": T0},
        ],
    }})
    await org.ask(Capture("h1", 2 * UC))
    st, b = await org.get("/v1/billing/balance")
    assert (b["data"]["available"], b["data"]["held"], b["data"]["lots"][0]["remaining"]) == ("233.50", "0.00",
                                                                                              "8.50")
    # computed at read time: once the promo lot's time has come it is gone from the balance
    node.clock.advance(5 * DAY)
    st, b = await org.get("/v1/billing/balance")
    assert (b["data"]["available"], [lot["source"] for lot in b["data"]["lots"]]) == ("225.00", ["signup", "topup"])
    assert (b["data"]["next_expiry"], b["data"]["next_expiry_amount"]) == (SIGNUP_EXPIRY, "200.00")


async def test_balance_of_unapproved_org_is_401_and_empty_org_is_zero(node, autojump_clock):
    data = await node.create_org(approved=False, email="x@x.test")
    st, b = await body(await node.call("GET", "/v1/billing/balance", data["api_key"]))
    assert (st, b) == (401, {"status": False, "error": "Unauthorized"})
    await node.op("POST", f"/organizations/{data['organization_id']}/approve")
    st, b = await body(await node.call("GET", "/v1/billing/balance", data["api_key"]))
    assert b["data"]["available"] == "200.00"


async def test_billing_routes_need_a_key_and_permissions(node, org, autojump_clock):
    for path in ("/v1/billing/balance", "/v1/billing/ledger", "/v1/billing/holds", "/v1/billing/usage",
                 "/v1/billing/settings"):
        assert await body(await node.call("GET", path, None)) == (401, {"status": False, "error": "Unauthorized"})
    ro = await node.add_member(org.id, "read_only")
    member = await node.add_member(org.id, "member")
    assert (await org.get("/v1/billing/balance", ro["api_key"]))[0] == 200
    for who in (ro, member):
        r = await node.call("PUT", "/v1/billing/settings", who["api_key"], json={"low_balance_threshold": 5})
        assert await body(r) == (403, {"status": False, "error": "Forbidden"})
    admin = await node.add_member(org.id, "admin")
    r = await node.call("PUT", "/v1/billing/settings", admin["api_key"], json={"low_balance_threshold": 5})
    assert r.status_code == 200


# -- ledger -------------------------------------------------------------------------------------
async def test_ledger_entries_kinds_and_signs(node, org, autojump_clock):
    signup = org.signup_lot()
    await org.ask(PlaceHold("h1", 30 * UC, job_id="j1", project_id=org.project, description="image"))
    await org.ask(Capture("h1", 12 * UC))
    await org.ask(PlaceHold("h2", 5 * UC, job_id="j2", project_id=org.project))
    await org.ask(Release("h2"))
    st, b = await org.get("/v1/billing/ledger")
    assert st == 200 and b["total"] == 5
    ids = [e.pop("id") for e in b["data"]]
    assert len(set(ids)) == 5
    common = {"created_at": T0, "source": "signup", "grant_id": signup, "project_id": org.project,
              "workflow_run_id": None}
    assert b["data"] == [
        {**common, "kind": "release", "amount": "5.00", "job_id": "j2", "description": "Hold released",
         "hold_id": "h2"},
        {**common, "kind": "hold", "amount": "-5.00", "job_id": "j2", "description": None, "hold_id": "h2"},
        {**common, "kind": "capture", "amount": "18.00", "job_id": "j1",
         "description": "Charged 12.00 of 30.00 held", "hold_id": "h1"},
        {**common, "kind": "hold", "amount": "-30.00", "job_id": "j1", "description": "image", "hold_id": "h1"},
        {**common, "kind": "grant", "amount": "200.00", "project_id": None, "job_id": None,
         "description": "Signup credit", "hold_id": None},
    ]
    # Σ ledger = available
    total = sum(int(e["amount"].replace(".", "")) for e in b["data"])
    assert total == 18800  # cents
    assert (await org.get("/v1/billing/balance"))[1]["data"]["available"] == "188.00"


async def test_ledger_filters_paging_and_bad_parameters(node, org, autojump_clock):
    await org.ask(PlaceHold("h1", UC, project_id=org.project))
    node.clock.advance(DAY)
    await org.ask(PlaceHold("h2", UC, project_id="other-project"))
    await org.ask(Grant("g", UC))
    t1 = iso(START + DAY)
    st, b = await org.get(f"/v1/billing/ledger?project_id={org.project}")
    assert (b["total"], [e["hold_id"] for e in b["data"]]) == (1, ["h1"])
    st, b = await org.get(f"/v1/billing/ledger?since={t1}")
    assert (b["total"], [e["kind"] for e in b["data"]]) == (2, ["grant", "hold"])
    st, b = await org.get("/v1/billing/ledger?until=2026-09-22T14:13:20%2B00:00")
    assert (b["total"], [e["kind"] for e in b["data"]]) == (2, ["hold", "grant"])
    st, b = await org.get("/v1/billing/ledger?limit=2&offset=1")
    assert (b["total"], [e["kind"] for e in b["data"]]) == (4, ["hold", "hold"])
    st, b = await org.get("/v1/billing/ledger?limit=0")
    assert len(b["data"]) == 1
    st, b = await org.get("/v1/billing/ledger?limit=100000&offset=-3")
    assert len(b["data"]) == 4
    error(await org.get("/v1/billing/ledger?since=yesterday"), 400, "request.bad_request",
          "since must be an ISO 8601 timestamp with an offset.", {"since": "yesterday"})
    error(await org.get("/v1/billing/ledger?until=2026-09-22T00:00:00"), 400, "request.bad_request",
          "until must be an ISO 8601 timestamp with an offset.", {"until": "2026-09-22T00:00:00"})
    error(await org.get("/v1/billing/ledger?project_id=nope"), 400, "request.bad_request",
          "project_id must be a UUID.", {"project_id": "nope"})
    st, b = await org.get("/v1/billing/ledger?limit=ten")
    assert (st, b["error"]["code"]) == (400, "request.bad_request")


async def test_ledger_limit_clamps_to_500(node, org, autojump_clock):
    for i in range(260):
        await org.ask(PlaceHold(f"h{i}", 1))
        await org.ask(Release(f"h{i}"))
    st, b = await org.get("/v1/billing/ledger")
    assert (b["total"], len(b["data"])) == (521, 100)
    st, b = await org.get("/v1/billing/ledger?limit=9999")
    assert len(b["data"]) == 500


async def test_ledger_shows_expiries_at_once_after_clock_advance(node, org, autojump_clock):
    r = await node.op("POST", "/test/clock", {"advance_seconds": 30 * DAY})
    assert await body(r) == (200, {"data": {"now": SIGNUP_EXPIRY}})
    st, b = await org.get("/v1/billing/ledger")
    assert [(e["kind"], e["amount"], e["created_at"], e["project_id"]) for e in b["data"]] == [
        ("expiry", "-200.00", SIGNUP_EXPIRY, None), ("grant", "200.00", T0, None)]
    st, b = await org.get("/v1/billing/balance")
    assert b["data"] == {"organization_id": org.id, "available": "0.00", "held": "0.00", "by_source": [],
                         "next_expiry": None, "next_expiry_amount": None, "lots": []}


# -- holds ----------------------------------------------------------------------------------------
async def test_holds_list(node, org, autojump_clock):
    await org.ask(PlaceHold("h1", 2 * UC, job_id="j1", project_id=org.project))
    node.clock.advance(1)
    await org.ask(PlaceHold("h2", 3 * UC, job_id="j2", workflow_run_id="r1", project_id=org.project))
    node.clock.advance(1)
    await org.ask(Capture("h1", 1 * UC))
    await org.ask(PlaceHold("h3", 1 * UC))
    await org.ask(Release("h3"))
    t1, t2 = iso(START + 1), iso(START + 2)
    h1 = {"id": "h1", "job_id": "j1", "workflow_run_id": None, "project_id": org.project, "status": "captured",
          "amount": "2.00", "captured": "1.00", "created_at": T0, "settled_at": t2}
    h2 = {"id": "h2", "job_id": "j2", "workflow_run_id": "r1", "project_id": org.project, "status": "held",
          "amount": "3.00", "captured": None, "created_at": t1, "settled_at": None}
    h3 = {"id": "h3", "job_id": None, "workflow_run_id": None, "project_id": None, "status": "released",
          "amount": "1.00", "captured": None, "created_at": t2, "settled_at": t2}
    assert await org.get("/v1/billing/holds") == (200, {"data": [h3, h2, h1]})
    assert await org.get("/v1/billing/holds?status=held") == (200, {"data": [h2]})
    assert await org.get("/v1/billing/holds?status=captured") == (200, {"data": [h1]})
    assert await org.get("/v1/billing/holds?status=released&limit=0") == (200, {"data": [h3]})
    assert await org.get("/v1/billing/holds?limit=2") == (200, {"data": [h3, h2]})
    error(await org.get("/v1/billing/holds?status=open"), 400, "request.bad_request",
          "status must be one of held, captured, released.", {"status": "open"})


async def test_402_through_the_actor_creates_nothing(node, org, autojump_clock):
    from service.errors import InsufficientCredits
    with pytest.raises(InsufficientCredits) as e:
        await org.ask(PlaceHold("big", 200 * UC + 10_000, job_id="j"))
    assert e.value.details == {"required": "200.01", "available": "200.00"}
    assert await org.get("/v1/billing/holds") == (200, {"data": []})
    st, b = await org.get("/v1/billing/ledger")
    assert b["total"] == 1


# -- usage ----------------------------------------------------------------------------------------
async def test_usage_per_project_per_day_completed_jobs_only(node, org, autojump_clock):
    await org.ask(PlaceHold("a", 2 * UC, job_id="ja", project_id="p1"))
    await org.ask(PlaceHold("b", 3 * UC, job_id="jb", project_id="p1"))
    await org.ask(PlaceHold("c", 4 * UC, job_id="jc", project_id="p2"))
    await org.ask(PlaceHold("d", 5 * UC, job_id="jd", project_id="p1"))
    await org.ask(PlaceHold("e", 6 * UC, project_id="p1"))     # no job: not usage
    await org.ask(Capture("a", 150_0000))
    await org.ask(Capture("c"))
    await org.ask(Release("d"))                                # failed job: not usage
    await org.ask(Capture("e"))
    node.clock.advance(DAY)
    await org.ask(Capture("b"))
    day0, day1 = T0[:10], iso(START + DAY)[:10]
    assert await org.get("/v1/billing/usage") == (200, {"data": [
        {"project_id": "p1", "day": day1, "credits": "3.00", "jobs": 1},
        {"project_id": "p1", "day": day0, "credits": "1.50", "jobs": 1},
        {"project_id": "p2", "day": day0, "credits": "4.00", "jobs": 1},
    ]})
    assert await org.get(f"/v1/billing/usage?since={iso(START + 1)}") == (200, {"data": [
        {"project_id": "p1", "day": day1, "credits": "3.00", "jobs": 1}]})
    error(await org.get("/v1/billing/usage?since=soon"), 400, "request.bad_request",
          "since must be an ISO 8601 timestamp with an offset.", {"since": "soon"})


# -- settings -------------------------------------------------------------------------------------
async def put(org, value, raw=None):
    if raw is not None:
        r = await org.node.call("PUT", "/v1/billing/settings", org.key, data=raw,
                                headers={"Content-Type": "application/json"})
    else:
        r = await org.node.call("PUT", "/v1/billing/settings", org.key, json=value)
    return await body(r)


async def test_settings_get_put_and_warning(node, org, autojump_clock):
    assert await org.get("/v1/billing/settings") == (200, {"data": {"low_balance_threshold": None,
                                                                    "low_balance_notified_at": None}})
    assert await put(org, {"low_balance_threshold": 50}) == (200, {"data": {
        "low_balance_threshold": "50.00", "low_balance_notified_at": None}})
    assert await put(org, {"low_balance_threshold": "12.5"}) == (200, {"data": {
        "low_balance_threshold": "12.50", "low_balance_notified_at": None}})
    # a JSON number is read exactly, never through a float
    assert await put(org, None, raw=b'{"low_balance_threshold": 0.29}') == (200, {"data": {
        "low_balance_threshold": "0.29", "low_balance_notified_at": None}})
    assert await put(org, {"low_balance_threshold": None}) == (200, {"data": {
        "low_balance_threshold": None, "low_balance_notified_at": None}})
    # above the balance: fires at once
    node.clock.advance(5)
    assert await put(org, {"low_balance_threshold": "250"}) == (200, {"data": {
        "low_balance_threshold": "250.00", "low_balance_notified_at": iso(START + 5)}})
    assert await org.get("/v1/billing/settings") == (200, {"data": {
        "low_balance_threshold": "250.00", "low_balance_notified_at": iso(START + 5)}})
    events = node.store.all("SELECT data, created_at FROM events WHERE event = 'billing.credits_low'")
    assert [(json.loads(e["data"]), e["created_at"]) for e in events] == [
        ({"available": "200.00", "threshold": "250.00", "organization_id": org.id}, iso(START + 5))]
    emails = node.store.all("SELECT to_address, subject, created_at FROM emails WHERE organization_id = ?",
                            (org.id,))
    assert emails == [{"to_address": "owner@acme.test", "subject": "Your credit balance is low",
                       "created_at": iso(START + 5)}]
    # PUT again re-arms and checks again
    node.clock.advance(5)
    assert (await put(org, {"low_balance_threshold": "250"}))[1]["data"]["low_balance_notified_at"] == iso(START + 10)
    assert node.store.scalar("SELECT COUNT(*) FROM events WHERE event = 'billing.credits_low'") == 2


async def test_settings_refusals(node, org, autojump_clock):
    error(await put(org, {"low_balance_threshold": -1}), 422, "request.validation_failed",
          "low_balance_threshold cannot be negative.", {"field": "low_balance_threshold"})
    error(await put(org, {"low_balance_threshold": "-0.01"}), 422, "request.validation_failed",
          "low_balance_threshold cannot be negative.", {"field": "low_balance_threshold"})
    error(await put(org, {"low_balance_threshold": "lots"}), 422, "request.validation_failed",
          "low_balance_threshold must be a number of credits.", {"field": "low_balance_threshold"})
    error(await put(org, {"low_balance_threshold": "NaN"}), 422, "request.validation_failed",
          "low_balance_threshold must be a number of credits.", {"field": "low_balance_threshold"})
    error(await put(org, {"low_balance_threshold": "1.234"}), 422, "request.validation_failed",
          "low_balance_threshold takes at most two decimal places.", {"field": "low_balance_threshold"})
    error(await put(org, {"low_balance_threshold": "1e30"}), 422, "request.validation_failed",
          "low_balance_threshold is too large.", {"field": "low_balance_threshold"})
    error(await put(org, {}), 400, "request.validation_failed", "The request failed validation.",
          {"errors": [{"message": "Field required", "key": "low_balance_threshold", "source": "body"}]})
    st, b = await put(org, {"low_balance_threshold": True})
    assert (st, b["error"]["code"]) == (400, "request.validation_failed")
    error(await put(org, {"low_balance_threshold": 5, "extra": 1}), 400, "request.validation_failed",
          "The request failed validation.",
          {"errors": [{"message": "Object contains unknown field", "key": "extra", "source": "body"}]})
    assert await org.get("/v1/billing/settings") == (200, {"data": {"low_balance_threshold": None,
                                                                    "low_balance_notified_at": None}})


# -- operator -------------------------------------------------------------------------------------
async def test_operator_grant(node, org, autojump_clock):
    r = await node.op("POST", f"/organizations/{org.id}/grants",
                      {"credits": "12.34", "expires_at": "2026-12-01T00:00:00+01:00", "reason": "sorry"})
    st, b = await body(r)
    lot_id = b["data"].pop("id")
    assert (st, b) == (201, {"data": {"source": "promo", "amount": "12.34", "remaining": "12.34",
                                      "expires_at": "2026-11-30T23:00:00.000000Z", "reason": "sorry",
                                      "created_at": T0}})
    r = await node.op("POST", f"/organizations/{org.id}/grants", {"credits": "5", "source": "goodwill"})
    st, b = await body(r)
    assert (st, b["data"]["source"], b["data"]["expires_at"], b["data"]["reason"]) == (201, "goodwill", None, None)
    st, bal = await org.get("/v1/billing/balance")
    assert bal["data"]["available"] == "217.34"
    assert [lot["id"] for lot in bal["data"]["lots"]][:2] == [org.signup_lot(), lot_id]  # signup expires first
    st, led = await org.get("/v1/billing/ledger")
    assert [(e["kind"], e["amount"], e["source"], e["description"]) for e in led["data"][:2]] == [
        ("grant", "5.00", "goodwill", "goodwill credits"), ("grant", "12.34", "promo", "sorry")]


async def test_operator_grant_refusals(node, org, autojump_clock):
    path = f"/organizations/{org.id}/grants"
    msg = "credits must be a decimal number of credits above zero with at most two places."
    for bad in ("abc", "0", "-1", "1.001", "NaN", "1e20"):
        error(await body(await node.op("POST", path, {"credits": bad})), 422, "request.validation_failed", msg,
              {"credits": bad})
    error(await body(await node.op("POST", path, {"credits": "1", "expires_at": "tomorrow"})), 422,
          "request.validation_failed", "expires_at must be an ISO 8601 timestamp with an offset.",
          {"expires_at": "tomorrow"})
    error(await body(await node.op("POST", path, {"credits": "1", "source": "Bad Source"})), 422,
          "request.validation_failed", "source must be 1 to 64 lowercase letters, digits, '_' or '-'.",
          {"source": "Bad Source"})
    error(await body(await node.op("POST", "/organizations/00000000-0000-0000-0000-000000000000/grants",
                                   {"credits": "1"})), 404, "request.not_found", "Organization not found.")
    st, b = await body(await node.op("POST", path, {}))
    assert (st, b["error"]["code"]) == (400, "request.validation_failed")
    r = await node.client.post("/operator/v1" + path, json={"credits": "1"}, headers={"Authorization": "Bearer x"})
    assert await body(r) == (401, {"status": False, "error": "Unauthorized"})
    st, bal = await org.get("/v1/billing/balance")
    assert bal["data"]["available"] == "200.00"


async def test_operator_grant_reason_is_bounded_as_in_the_console(node, org, autojump_clock):
    path = f"/organizations/{org.id}/grants"
    error(await body(await node.op("POST", path, {"credits": "1", "reason": "x" * 501})), 422,
          "request.validation_failed", "reason must be at most 500 characters; got 501.",
          {"field": "reason", "max_length": 500, "length": 501})
    st, b = await body(await node.op("POST", path, {"credits": "1", "reason": "y" * 500}))
    assert (st, b["data"]["reason"]) == (201, "y" * 500)
    st, bal = await org.get("/v1/billing/balance")
    assert bal["data"]["available"] == "201.00"  # only the 500-character grant


async def test_test_clock(node, org, autojump_clock):
    assert await body(await node.op("POST", "/test/clock", {"advance_seconds": 90})) == (
        200, {"data": {"now": iso(START + 90)}})
    assert node.clock.now() == START + 90
    error(await body(await node.op("POST", "/test/clock", {"advance_seconds": -1})), 422,
          "request.validation_failed", "advance_seconds must be a number from 0 to 3155760000 (100 years).",
          {"advance_seconds": -1})
    r = await node.client.post("/operator/v1/test/clock", json={"advance_seconds": 1},
                               headers={"Authorization": "Bearer wrong"})
    assert await body(r) == (401, {"status": False, "error": "Unauthorized"})


async def test_test_clock_is_404_outside_test_mode(nursery, tmp_path, autojump_clock):
    prod = await start_node(nursery, tmp_path, test_mode=False)
    try:
        unknown = await body(await prod.op("POST", "/test/no-such-route", {"advance_seconds": 1}))
        clock = await body(await prod.op("POST", "/test/clock", {"advance_seconds": 1}))
        anon = await body(await prod.client.post("/operator/v1/test/clock", json={"advance_seconds": 1}))
        for got in (clock, anon):
            error(got, 404, "request.not_found", "The requested resource was not found.")
        error(unknown, 404, "request.not_found", "The requested resource was not found.")
        assert prod.clock.now() == START
    finally:
        prod.store.close()
