"""Top-ups over HTTP with the built-in test provider (spec "Billing": quote, list, create;
Top-up state table; operations.md: /operator/v1/topups/{id}/pay and the payment-provider
test switch). The balance actor is replaced by `FakeBalances`, which records every Grant
and is idempotent on grant_id like the real one; `test_topups_flow.py` runs the same flow
against the real balance actor and ledger."""

from __future__ import annotations

import re
import uuid

import pytest
import trio

from conftest import OPERATOR, START, Node, run_parts
from service.actors.balance.actor import signup_grant
from service.actors.balance.messages import Grant
from service.clock import Clock, iso, parse_iso
from service.config import Settings
from service.errors import ActorGone
from service.http.app import create_app
from service.node import build
from service.storage.db import Store
from service.storage.migrate import apply_all
from conftest import err, j
from waiting import wait_until

UNAUTHORIZED = {"status": False, "error": "Unauthorized"}
FORBIDDEN = {"status": False, "error": "Forbidden"}
RANGE = "A top-up must be between 100 and 100000 credits."
CHECKOUT_FAILED = "The payment provider could not start checkout; nothing was charged. Try again shortly."
NOT_FOUND = {"code": "request.not_found", "message": "The requested resource was not found."}
YEAR = 365 * 86400
ISO_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class FakeBalances:
    """Stands in for `services.balances`: answers Grant like the balance actor (one lot per
    grant_id), records every top-up grant in `calls`, and can be told to fail the next ones."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.lots: dict[tuple[str, str], dict] = {}
        self.fail = 0

    async def ask(self, key, msg, timeout: float = 10.0):
        await trio.sleep(0)  # a checkpoint, so concurrent callers really interleave
        assert isinstance(msg, Grant)
        if msg.source == "topup":  # the signup lot of an approved organization is not counted
            self.calls.append((key, msg))
            if self.fail:
                self.fail -= 1
                raise ActorGone("balance actor is down")
        lot = self.lots.get((key, msg.grant_id))
        if lot is None:
            lot = {"id": str(uuid.uuid4()), "source": msg.source, "amount_uc": msg.amount_uc,
                   "expires_at": msg.expires_at, "reason": msg.reason}
            self.lots[(key, msg.grant_id)] = lot
        return lot

    async def on_approved(self, org_id: str) -> None:
        """As the facade's (service/actors/facades.py): the signup lot, through `ask`."""
        await self.ask(org_id, signup_grant(org_id, 0.0))

    def grants(self) -> list[tuple[str, Grant]]:
        return list(self.calls)

    def topup_lots(self) -> list[dict]:
        return [lot for lot in self.lots.values() if lot["source"] == "topup"]


async def start(nursery, tmp_path, *, balances=None, **overrides) -> Node:
    """Like conftest.start_node, but the fake balance registry is in place before recovery."""
    settings = Settings(data_dir=tmp_path, operator_token=OPERATOR, base_url="http://testserver", **overrides)
    apply_all(settings.db_path)
    store = Store(settings.db_path, inline=True)
    services = build(settings, store, Clock(start=START))
    if balances is not None:
        services.balances = balances
    node = Node(services, create_app(services))
    node.scope, node.stopped = await run_parts(nursery, services)
    node.balances = balances
    return node


async def close(node: Node) -> None:
    """Stop the node's actors, then close its storage: an actor that woke after the store
    closed would read a closed database."""
    node.scope.cancel()
    await node.stopped.wait()
    node.store.close()


@pytest.fixture
async def tnode(nursery, tmp_path):
    n = await start(nursery, tmp_path, balances=FakeBalances(), test_mode=True)
    yield n
    await n.parts.aclose()
    await close(n)


async def create(node, key, credits=500, **extra):
    return await node.call("POST", "/v1/billing/topups", key, json={"credits": credits, **extra})


async def created(node, key, credits=500, **extra) -> dict:
    r = await create(node, key, credits, **extra)
    assert r.status_code == 201, await r.get_data(as_text=True)
    return (await j(r))["data"]


async def pay(node, topup_id):
    return await node.op("POST", f"/topups/{topup_id}/pay")


def row(node, topup_id) -> dict:
    return node.store.one("SELECT * FROM topups WHERE id = ?", (topup_id,))


# -- quote -------------------------------------------------------------------------------
async def test_quote_exact_body(tnode):
    org = await tnode.create_org()
    r = await tnode.call("GET", "/v1/billing/topups/quote", org["api_key"])
    assert r.status_code == 200
    assert await j(r) == {"data": {"usd_per_credit": "0.01", "min_credits": 100, "max_credits": 100000,
                                   "expiry_days": 365, "currency": "usd"}}


async def test_quote_price_and_currency_come_from_settings(nursery, tmp_path):
    n = await start(nursery, tmp_path, balances=FakeBalances(), test_mode=True,
                    usd_per_credit="0.0125", currency="EUR")
    org = await n.create_org()
    assert (await j(await n.call("GET", "/v1/billing/topups/quote", org["api_key"])))["data"] == {
        "usd_per_credit": "0.0125", "min_credits": 100, "max_credits": 100000, "expiry_days": 365,
        "currency": "eur"}
    # 101 * 0.0125 * 100 = 126.25 cents -> 126 (half up); 100 * 0.0125 * 100 = 125 exactly
    assert (await created(n, org["api_key"], 101))["topup"]["amount_cents"] == 126
    assert (await created(n, org["api_key"], 100))["topup"]["amount_cents"] == 125
    t = (await created(n, org["api_key"], 100))["topup"]
    assert t["currency"] == "eur"
    await close(n)


@pytest.mark.parametrize("price", ["0", "-1", "abc", "NaN"])
def test_a_bad_price_setting_fails_the_start(tmp_path, price):
    from service.payments.pricing import quote_from
    with pytest.raises(ValueError):
        quote_from(price, "usd")


# -- create ------------------------------------------------------------------------------
async def test_create_exact_body_and_checkout_page(tnode):
    org = await tnode.create_org()
    r = await create(tnode, org["api_key"], 500)
    assert r.status_code == 201
    body = await j(r)
    t = body["data"]["topup"]
    uuid.UUID(t["id"])
    assert body == {"data": {
        "topup": {"id": t["id"], "created_at": iso(parse_iso(t["created_at"])), "credits": "500.00",
                  "amount_cents": 500, "currency": "usd", "status": "pending", "paid_at": None},
        "checkout_url": f"http://testserver/checkout/test/{t['id']}",
    }}
    assert ISO_RE.match(t["created_at"]) and START <= parse_iso(t["created_at"]) <= tnode.clock.now()  # service time
    stored = row(tnode, t["id"])
    assert stored["success_url"] == f"http://testserver/billing?topup={t['id']}&checkout=success"
    assert stored["cancel_url"] == f"http://testserver/billing?topup={t['id']}&checkout=cancel"
    assert stored["provider"] == "test" and stored["lot_id"] is None
    assert tnode.balances.calls == []  # nothing is granted before payment

    page = await tnode.client.get(f"/checkout/test/{t['id']}")  # no auth
    assert page.status_code == 200
    assert page.headers["Content-Type"].startswith("text/html")
    text = await page.get_data(as_text=True)
    assert "500.00 credits" in text and "5.00 USD" in text and t["id"] in text and "pending" in text
    r = await tnode.client.get(f"/checkout/test/{uuid.uuid4()}")
    assert r.status_code == 404 and err(await j(r)) == NOT_FOUND


async def test_create_keeps_given_urls(tnode):
    org = await tnode.create_org()
    t = (await created(tnode, org["api_key"], 100, success_url="https://app.example/ok",
                       cancel_url="http://app.example/back?x=1"))["topup"]
    stored = row(tnode, t["id"])
    assert (stored["success_url"], stored["cancel_url"]) == ("https://app.example/ok", "http://app.example/back?x=1")


@pytest.mark.parametrize("credits, status", [(99, 422), (100, 201), (100000, 201), (100001, 422),
                                             (0, 422), (-5, 422)])
async def test_credit_limits(tnode, credits, status):
    org = await tnode.create_org()
    r = await create(tnode, org["api_key"], credits)
    assert r.status_code == status
    if status == 422:
        assert err(await j(r)) == {"code": "request.validation_failed", "message": RANGE,
                                   "details": {"credits": credits, "min": 100, "max": 100000}}
        assert tnode.store.all("SELECT id FROM topups") == []
    else:
        t = (await j(r))["data"]["topup"]
        assert t["credits"] == f"{credits}.00" and t["amount_cents"] == credits


@pytest.mark.parametrize("payload, key", [
    ({}, "credits"),
    ({"credits": "500"}, "credits"),
    ({"credits": 500.5}, "credits"),
    ({"credits": True}, "credits"),
    ({"credits": None}, "credits"),
    ({"credits": 500, "currency": "eur"}, "currency"),
    ({"credits": 500, "success_url": 5}, "success_url"),
])
async def test_body_schema_errors_are_400(tnode, payload, key):
    org = await tnode.create_org()
    r = await tnode.call("POST", "/v1/billing/topups", org["api_key"], json=payload)
    assert r.status_code == 400
    e = err(await j(r))
    assert e["code"] == "request.validation_failed"
    assert [x["key"] for x in e["details"]["errors"]] == [key]
    assert all(x["source"] == "body" for x in e["details"]["errors"])
    if key == "currency":
        assert e["details"]["errors"][0]["message"] == "Object contains unknown field"


async def test_invalid_json_is_400_bad_request(tnode):
    org = await tnode.create_org()
    r = await tnode.call("POST", "/v1/billing/topups", org["api_key"], data=b"{credits",
                         headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and err(await j(r))["code"] == "request.bad_request"


@pytest.mark.parametrize("field, value", [("success_url", "/relative"), ("success_url", "ftp://x.example/"),
                                          ("cancel_url", "https://"), ("cancel_url", "javascript:alert(1)"),
                                          ("success_url", "https://x.example/" + "a" * 2100),
                                          ("success_url", "http://["), ("cancel_url", "https://[::1/x")])
async def test_bad_return_urls_are_422(tnode, field, value):
    org = await tnode.create_org()
    r = await create(tnode, org["api_key"], 500, **{field: value})
    assert r.status_code == 422
    assert err(await j(r)) == {"code": "request.validation_failed",
                               "message": f"{field} must be an absolute http or https URL.",
                               "details": {"field": field}}


@pytest.mark.parametrize("role, read, write", [("owner", 200, 201), ("admin", 200, 201),
                                               ("member", 200, 403), ("read_only", 200, 403)])
async def test_permissions(tnode, role, read, write):
    org = await tnode.create_org()
    key = org["api_key"] if role == "owner" else (await tnode.add_member(org["organization_id"], role))["api_key"]
    assert (await tnode.call("GET", "/v1/billing/topups/quote", key)).status_code == read
    assert (await tnode.call("GET", "/v1/billing/topups", key)).status_code == read
    r = await create(tnode, key)
    assert r.status_code == write
    if write == 403:
        assert await j(r) == FORBIDDEN
    for method, path in [("GET", "/v1/billing/topups/quote"), ("GET", "/v1/billing/topups"),
                         ("POST", "/v1/billing/topups")]:
        r = await tnode.call(method, path, None, json={"credits": 500} if method == "POST" else None)
        assert r.status_code == 401 and await j(r) == UNAUTHORIZED


# -- list and get ------------------------------------------------------------------------
async def test_list_newest_first_with_every_status_and_limit(tnode):
    org = await tnode.create_org()
    key = org["api_key"]
    a = (await created(tnode, key, 100))["topup"]
    b = (await created(tnode, key, 200))["topup"]
    await op_switch(tnode, True)
    assert (await create(tnode, key, 300)).status_code == 503
    await op_switch(tnode, False)
    d = (await created(tnode, key, 400))["topup"]
    assert (await pay(tnode, b["id"])).status_code == 200

    data = (await j(await tnode.call("GET", "/v1/billing/topups", key)))["data"]
    assert [t["credits"] for t in data] == ["400.00", "300.00", "200.00", "100.00"]
    assert [t["status"] for t in data] == ["pending", "expired", "paid", "pending"]
    assert data[0] == d and data[3] == a
    assert set(data[2]) == {"id", "created_at", "credits", "amount_cents", "currency", "status", "paid_at"}
    assert ISO_RE.match(data[2]["paid_at"]) and data[1]["paid_at"] is None

    r = await tnode.call("GET", "/v1/billing/topups?limit=2", key)
    assert [t["credits"] for t in (await j(r))["data"]] == ["400.00", "300.00"]
    r = await tnode.call("GET", "/v1/billing/topups?limit=0", key)  # clamped to 1
    assert [t["credits"] for t in (await j(r))["data"]] == ["400.00"]
    r = await tnode.call("GET", "/v1/billing/topups?limit=100000", key)  # clamped to 200
    assert len((await j(r))["data"]) == 4
    r = await tnode.call("GET", "/v1/billing/topups?limit=abc", key)
    assert r.status_code == 400 and err(await j(r))["code"] == "request.bad_request"
    r = await tnode.call("GET", "/v1/billing/topups?page=2", key)
    assert r.status_code == 400 and err(await j(r))["code"] == "request.bad_request"

    r = await tnode.call("GET", f"/v1/billing/topups/{b['id']}", key)
    assert r.status_code == 200 and (await j(r))["data"] == data[2]


async def test_organizations_see_only_their_own_topups(tnode):
    one = await tnode.create_org("One", "one@x.test")
    two = await tnode.create_org("Two", "two@x.test")
    t = (await created(tnode, one["api_key"]))["topup"]
    assert (await j(await tnode.call("GET", "/v1/billing/topups", two["api_key"])))["data"] == []
    r = await tnode.call("GET", f"/v1/billing/topups/{t['id']}", two["api_key"])
    assert r.status_code == 404
    assert err(await j(r)) == {"code": "request.not_found", "message": "Top-up not found."}


# -- the test provider's confirmation ----------------------------------------------------
async def test_pay_once_adds_one_topup_lot(tnode):
    org = await tnode.create_org()
    t = (await created(tnode, org["api_key"], 1500))["topup"]
    r = await pay(tnode, t["id"])
    assert r.status_code == 200
    paid = (await j(r))["data"]
    assert paid == {**t, "status": "paid", "paid_at": paid["paid_at"]}
    assert ISO_RE.match(paid["paid_at"])
    [(key, grant)] = tnode.balances.grants()
    assert key == org["organization_id"]
    assert grant == Grant(grant_id=t["id"], amount_uc=1500 * 1_000_000, source="topup",
                          expires_at=parse_iso(paid["paid_at"]) + YEAR, reason="Top-up of 1500.00 credits")
    lot = tnode.balances.lots[(org["organization_id"], t["id"])]
    assert row(tnode, t["id"])["lot_id"] == lot["id"]
    listed = (await j(await tnode.call("GET", "/v1/billing/topups", org["api_key"])))["data"]
    assert listed == [paid]


async def test_pay_twice_adds_one_lot(tnode):
    org = await tnode.create_org()
    t = (await created(tnode, org["api_key"]))["topup"]
    first = await j(await pay(tnode, t["id"]))
    r = await pay(tnode, t["id"])
    assert r.status_code == 200 and await j(r) == first
    assert len(tnode.balances.grants()) == 1


async def test_concurrent_pays_add_one_lot(tnode):
    org = await tnode.create_org()
    t = (await created(tnode, org["api_key"]))["topup"]
    answers = []

    async def one():
        r = await pay(tnode, t["id"])
        answers.append((r.status_code, await j(r)))

    async with trio.open_nursery() as n:
        for _ in range(8):
            n.start_soon(one)
    assert len(answers) == 8
    assert all(a == answers[0] for a in answers) and answers[0][0] == 200
    assert answers[0][1]["data"]["status"] == "paid"
    assert len(tnode.balances.grants()) == 1
    assert len(tnode.balances.topup_lots()) == 1


async def test_pay_unknown_and_unauthorized(tnode):
    r = await pay(tnode, str(uuid.uuid4()))
    assert r.status_code == 404
    assert err(await j(r)) == {"code": "request.not_found", "message": "Top-up not found."}
    org = await tnode.create_org()
    t = (await created(tnode, org["api_key"]))["topup"]
    r = await tnode.client.post(f"/operator/v1/topups/{t['id']}/pay", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and await j(r) == UNAUTHORIZED
    r = await tnode.call("POST", f"/operator/v1/topups/{t['id']}/pay", org["api_key"])  # an API key is not the token
    assert r.status_code == 401
    assert row(tnode, t["id"])["status"] == "pending" and tnode.balances.calls == []


async def test_a_grant_cut_short_is_completed_by_the_next_pay(tnode):
    org = await tnode.create_org()
    t = (await created(tnode, org["api_key"]))["topup"]
    tnode.balances.fail = 1
    r = await pay(tnode, t["id"])
    assert r.status_code == 503 and err(await j(r))["code"] == "request.service_unavailable"
    stored = row(tnode, t["id"])
    assert stored["status"] == "paid" and stored["lot_id"] is None
    r = await pay(tnode, t["id"])
    assert r.status_code == 200 and (await j(r))["data"]["paid_at"] == stored["paid_at"]
    assert row(tnode, t["id"])["lot_id"] is not None
    assert len(tnode.balances.topup_lots()) == 1 and len(tnode.balances.grants()) == 2  # the same grant_id twice
    assert {g.grant_id for _, g in tnode.balances.grants()} == {t["id"]}
    assert {g.expires_at for _, g in tnode.balances.grants()} == {parse_iso(stored["paid_at"]) + YEAR}


async def test_a_grant_cut_short_is_retried_by_the_actor(tnode):
    org = await tnode.create_org()
    t = (await created(tnode, org["api_key"]))["topup"]
    tnode.balances.fail = 2
    assert (await pay(tnode, t["id"])).status_code == 503
    tnode.clock.advance(6)  # first retry after 5 s: fails again (backoff 10 s)
    await wait_until(lambda: len(tnode.balances.calls) >= 2, 5)
    assert row(tnode, t["id"])["lot_id"] is None
    tnode.clock.advance(11)
    await wait_until(lambda: row(tnode, t["id"])["lot_id"] is not None, 5)
    assert len(tnode.balances.topup_lots()) == 1 and len(tnode.balances.calls) == 3


async def test_restart_completes_paid_topups_without_a_lot(nursery, tmp_path):
    fb = FakeBalances()
    data = tmp_path
    n1 = await start(nursery, data, balances=fb, test_mode=True)
    org = await n1.create_org()
    t = (await created(n1, org["api_key"]))["topup"]
    fb.fail = 100  # the balance actor stays down until the "restart"
    assert (await pay(n1, t["id"])).status_code == 503
    assert row(n1, t["id"])["lot_id"] is None
    await n1.parts.aclose()

    fb2 = FakeBalances()
    n2 = await start(nursery, data, balances=fb2, test_mode=True)  # recovery runs in start
    # a hang guard for a busy machine, not a timing rule
    await wait_until(lambda: row(n2, t["id"])["lot_id"] is not None, 30)
    assert [g.grant_id for _, g in fb2.grants()] == [t["id"]]
    await close(n1)
    await close(n2)


# -- fail_checkout -----------------------------------------------------------------------
async def op_switch(node, on: bool):
    r = await node.op("POST", "/test/payment-provider", {"fail_checkout": on})
    assert r.status_code == 200, await r.get_data(as_text=True)
    assert await j(r) == {"data": {"provider": "test", "fail_checkout": on}}


async def test_fail_checkout_is_503_and_records_an_expired_topup(tnode):
    org = await tnode.create_org()
    key = org["api_key"]
    await op_switch(tnode, True)
    r = await create(tnode, key, 700)
    assert r.status_code == 503
    e = err(await j(r))
    [stored] = tnode.store.all("SELECT * FROM topups")
    assert e == {"code": "request.service_unavailable", "message": CHECKOUT_FAILED,
                 "details": {"topup_id": stored["id"]}}
    assert stored["status"] == "expired" and stored["checkout_url"] is None and stored["failure"]
    listed = (await j(await tnode.call("GET", "/v1/billing/topups", key)))["data"]
    assert listed == [{"id": stored["id"], "created_at": stored["created_at"], "credits": "700.00",
                       "amount_cents": 700, "currency": "usd", "status": "expired", "paid_at": None}]
    # nothing charged, and an expired top-up cannot be paid
    r = await pay(tnode, stored["id"])
    assert r.status_code == 409
    assert err(await j(r)) == {"code": "request.conflict", "message": "The top-up has expired and can no longer be paid.",
                               "details": {"topup_id": stored["id"], "status": "expired"}}
    assert tnode.balances.calls == []
    # the next checkouts keep failing until the switch is off
    assert (await create(tnode, key, 100)).status_code == 503
    await op_switch(tnode, False)
    assert (await create(tnode, key, 100)).status_code == 201


async def test_switch_body_and_auth(tnode):
    r = await tnode.op("POST", "/test/payment-provider", {})
    assert r.status_code == 400 and err(await j(r))["code"] == "request.validation_failed"
    r = await tnode.op("POST", "/test/payment-provider", {"fail_checkout": "yes"})
    assert r.status_code == 400
    r = await tnode.client.post("/operator/v1/test/payment-provider", json={"fail_checkout": True})
    assert r.status_code == 401 and await j(r) == UNAUTHORIZED
    assert tnode.parts.payments.fail_checkout is False


# -- outside test mode -------------------------------------------------------------------
async def test_no_provider_outside_test_mode(nursery, tmp_path):
    n = await start(nursery, tmp_path, balances=FakeBalances(), test_mode=False)
    assert n.parts.payments is None
    org = await n.create_org()
    r = await create(n, org["api_key"], 500)
    assert r.status_code == 503
    assert err(await j(r)) == {"code": "billing.not_configured",
                               "message": "Top-ups are not available on this node: no payment provider is configured."}
    assert n.store.all("SELECT id FROM topups") == []
    # out-of-range input is still a 422 first
    assert (await create(n, org["api_key"], 5)).status_code == 422
    # the quote and list still answer
    assert (await n.call("GET", "/v1/billing/topups/quote", org["api_key"])).status_code == 200
    assert (await j(await n.call("GET", "/v1/billing/topups", org["api_key"])))["data"] == []
    # test routes are 404 with the request.not_found envelope (with or without the token)
    for headers in (n.op_headers(), {}):
        r = await n.client.post("/operator/v1/test/payment-provider", json={"fail_checkout": True},
                                headers=headers)
        assert r.status_code == 404 and err(await j(r)) == NOT_FOUND
    r = await n.client.get(f"/checkout/test/{uuid.uuid4()}")
    assert r.status_code == 404 and err(await j(r)) == NOT_FOUND
    r = await n.client.post("/webhooks/stripe", data=b"{}")
    assert r.status_code == 404 and err(await j(r)) == NOT_FOUND
    # the operator's confirmation route exists outside test mode (unknown id: 404)
    r = await pay(n, str(uuid.uuid4()))
    assert r.status_code == 404 and err(await j(r))["message"] == "Top-up not found."
    await close(n)


async def test_routes_in_openapi(tnode):
    doc = await j(await tnode.client.get("/v1/openapi.json"))
    paths = doc["paths"]
    assert {"get"} <= set(paths["/v1/billing/topups/quote"])
    assert {"get", "post"} <= set(paths["/v1/billing/topups"])
    assert paths["/v1/billing/topups"]["post"]["requestBody"]["required"] is True
    assert not [p for p in paths if p.startswith(("/operator", "/webhooks", "/checkout"))]
