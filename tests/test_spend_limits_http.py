"""Spend limits over HTTP (operations.md "Spend limits"): the fields of projects and keys,
their writes and validation, the 402 `billing.spend_limit_reached` of submits and run starts
in the fixed order (balance, key, project), release giving back, the UTC month under the
test clock, the warning event and mail once per scope per period, and exactness under
concurrent holds."""

from __future__ import annotations

import json
import uuid

import pytest
import trio

from conftest import START, err, j, wait_for_run
from service.actors.balance.messages import PlaceHold, Release, Snapshot, Stop
from service.errors import SpendLimitReached
from service.money import CENT_UC as CENT
from service.money import UC, fmt, to_uc
from service.roles import ROLE_IDS

IMAGE = "/v1/generation/capabilities/image.generate"
DAY = 86400.0
OCT_1 = 1_790_812_800.0  # 2026-10-01T00:00:00Z; START is 2026-09-21


async def patch_project(node, key, project_id, body):
    r = await node.call("PATCH", f"/v1/projects/{project_id}", key, json=body)
    return r.status_code, await j(r)


async def get_project(node, key, project_id) -> dict:
    r = await node.call("GET", f"/v1/projects/{project_id}", key)
    assert r.status_code == 200
    return (await j(r))["data"]


async def submit(node, key, project_id=None):
    r = await node.call("POST", IMAGE, key, json={"prompt": "a fox", **({"project_id": project_id} if project_id
                                                                        else {})})
    return r.status_code, await j(r)


def job_count(node) -> int:
    return node.store.one("SELECT COUNT(*) AS n FROM jobs")["n"]


def hold_count(node) -> int:
    return node.store.one("SELECT COUNT(*) AS n FROM credit_holds")["n"]


async def new_key(node, owner_key, **body) -> dict:
    r = await node.call("POST", "/v1/api-keys", owner_key, json={"name": "ci", **body})
    assert r.status_code == 201, await j(r)
    return (await j(r))["data"]


# -- fields and writes ----------------------------------------------------------------------------
async def test_projects_and_keys_carry_the_fields(node, org):
    key, pid = org["api_key"], org["default_project_id"]
    p = await get_project(node, key, pid)
    assert (p["monthly_spend_limit"], p["month_spent"]) == (None, "0.00")
    assert await patch_project(node, key, pid, {"monthly_spend_limit": "12.50"}) == (200, {"data": {
        **p, "monthly_spend_limit": "12.50"}})
    r = await node.call("GET", "/v1/projects", key)
    assert [(x["id"], x["monthly_spend_limit"]) for x in (await j(r))["data"]] == [(pid, "12.50")]
    ci = await new_key(node, key, spend_limit="50")
    assert (ci["spend_limit"], ci["spent"], ci["key"].startswith("aak_")) == ("50.00", "0.00", True)
    r = await node.call("PATCH", f"/v1/api-keys/{ci['id']}", key, json={"spend_limit": None})
    assert (await j(r))["data"]["spend_limit"] is None
    r = await node.call("GET", "/v1/api-keys", key)
    assert {x["id"]: x["spend_limit"] for x in (await j(r))["data"]}[ci["id"]] is None
    status, body = await patch_project(node, key, pid, {"monthly_spend_limit": None})
    assert (status, body["data"]["monthly_spend_limit"]) == (200, None)


@pytest.mark.parametrize("value", ["-1", "1.234", "abc", "1e3", "", " 5", "5."])  # too large: test_spend_limit_range.py
async def test_a_bad_limit_is_400_naming_the_field(node, org, value):
    key, pid = org["api_key"], org["default_project_id"]
    status, body = await patch_project(node, key, pid, {"monthly_spend_limit": value})
    assert (status, err(body)) == (400, {
        "code": "request.validation_failed",
        "message": 'monthly_spend_limit must be a decimal string of credits with at most two decimals, "0" or '
                   "more, or null.",
        "details": {"field": "monthly_spend_limit", "errors": [
            {"message": "Invalid spend limit", "key": "monthly_spend_limit", "source": "body"}]}})
    r = await node.call("POST", "/v1/api-keys", key, json={"name": "ci", "spend_limit": value})
    assert r.status_code == 400 and err(await j(r))["details"]["field"] == "spend_limit"
    assert (await get_project(node, key, pid))["monthly_spend_limit"] is None


async def test_a_number_is_not_a_limit(node, org):
    status, body = await patch_project(node, org["api_key"], org["default_project_id"], {"monthly_spend_limit": 5})
    assert (status, err(body)["code"], err(body)["details"]["errors"][0]["key"]) == (
        400, "request.validation_failed", "monthly_spend_limit")


async def test_only_owners_and_admins_set_limits(node, org):
    key, pid = org["api_key"], org["default_project_id"]
    member = await new_key(node, key, role_id=ROLE_IDS["member"])
    status, _ = await patch_project(node, member["key"], pid, {"monthly_spend_limit": "1"})
    assert status == 403
    r = await node.call("PATCH", f"/v1/api-keys/{member['id']}", member["key"], json={"spend_limit": "1"})
    assert r.status_code == 403
    assert (await get_project(node, key, pid))["monthly_spend_limit"] is None


async def test_unknown_project_and_key_are_404(node, org):
    key = org["api_key"]
    status, body = await patch_project(node, key, str(uuid.uuid4()), {"monthly_spend_limit": "1"})
    assert (status, err(body)["message"]) == (404, "Project not found.")
    r = await node.call("PATCH", f"/v1/api-keys/{uuid.uuid4()}", key, json={"spend_limit": "1"})
    assert (r.status_code, err(await j(r))["code"]) == (404, "api_key.not_found")


# -- refusals ---------------------------------------------------------------------------------------
async def test_a_project_limit_refuses_the_submit_that_would_pass_it(node, org):
    key, pid = org["api_key"], org["default_project_id"]
    await patch_project(node, key, pid, {"monthly_spend_limit": "2.00"})
    for _ in range(2):
        assert (await submit(node, key))[0] == 202
    jobs, holds = job_count(node), hold_count(node)
    status, body = await submit(node, key)
    assert (status, err(body)) == (402, {
        "code": "billing.spend_limit_reached", "message": "This project's monthly spend limit is reached.",
        "details": {"scope": "project", "limit": "2.00", "spent": "2.00", "required": "1.00"}})
    assert (job_count(node), hold_count(node)) == (jobs, holds)  # nothing created, nothing held
    assert (await get_project(node, key, pid))["month_spent"] == "2.00"


async def test_a_key_limit_refuses_before_the_project_limit(node, org):
    key, pid = org["api_key"], org["default_project_id"]
    ci = await new_key(node, key, spend_limit="1")
    assert (await submit(node, ci["key"]))[0] == 202
    await patch_project(node, key, pid, {"monthly_spend_limit": "1"})
    status, body = await submit(node, ci["key"])
    assert (status, err(body)) == (402, {
        "code": "billing.spend_limit_reached", "message": "This API key's spend limit is reached.",
        "details": {"scope": "api_key", "limit": "1.00", "spent": "1.00", "required": "1.00"}})
    r = await node.call("GET", f"/v1/api-keys/{ci['id']}", key)
    assert ((await j(r))["data"]["spent"]) == "1.00"
    status, body = await submit(node, key)  # the owner's key has no limit: the project's refuses
    assert (status, err(body)["details"]["scope"]) == (402, "project")


async def test_the_balance_refuses_first(node, org):
    key, org_id, pid = org["api_key"], org["organization_id"], org["default_project_id"]
    await node.parts.balances.ask(org_id, PlaceHold(str(uuid.uuid4()), 200 * UC))  # no credits left
    await patch_project(node, key, pid, {"monthly_spend_limit": "0"})
    status, body = await submit(node, key)
    assert (status, err(body)["code"]) == (402, "billing.insufficient_credits")


async def test_a_release_gives_back_and_the_month_starts_again(node, org, autojump_clock):
    key, org_id, pid = org["api_key"], org["organization_id"], org["default_project_id"]
    await patch_project(node, key, pid, {"monthly_spend_limit": "5"})
    await node.parts.balances.ask(org_id, PlaceHold("h1", 3 * UC, project_id=pid))
    await node.parts.balances.ask(org_id, PlaceHold("h2", 2 * UC, project_id=pid))
    assert (await get_project(node, key, pid))["month_spent"] == "5.00"
    with pytest.raises(SpendLimitReached):
        await node.parts.balances.ask(org_id, PlaceHold("h3", 1, project_id=pid))
    await node.parts.balances.ask(org_id, Release("h1"))
    assert (await get_project(node, key, pid))["month_spent"] == "2.00"
    r = await node.op("POST", "/test/clock", {"advance_seconds": OCT_1 - START})
    assert r.status_code == 200
    assert (await get_project(node, key, pid))["month_spent"] == "0.00"
    await node.parts.balances.ask(org_id, Release("h2"))  # September's hold gives October nothing back
    await node.parts.balances.ask(org_id, PlaceHold("h4", 5 * UC, project_id=pid))
    assert (await get_project(node, key, pid))["month_spent"] == "5.00"


async def test_figures_and_limits_survive_a_restart_of_the_actor(node, org):
    key, org_id, pid = org["api_key"], org["organization_id"], org["default_project_id"]
    await patch_project(node, key, pid, {"monthly_spend_limit": "3"})
    await node.parts.balances.ask(org_id, PlaceHold("a", 2 * UC, project_id=pid, api_key_id="k"))
    before = await node.parts.balances.ask(org_id, Snapshot())
    await node.parts.balances.ask(org_id, Stop())
    after = await node.parts.balances.ask(org_id, Snapshot())
    assert after["spend"] == before["spend"] and after["spend"]["key_spent"] == {"k": 2 * UC}
    with pytest.raises(SpendLimitReached):
        await node.parts.balances.ask(org_id, PlaceHold("b", 2 * UC, project_id=pid))


async def test_a_run_start_counts_its_whole_estimate(node, org):
    key, pid = org["api_key"], org["default_project_id"]
    await patch_project(node, key, pid, {"monthly_spend_limit": "1"})
    runs = node.store.one("SELECT COUNT(*) AS n FROM product_runs")["n"]
    r = await node.call("POST", "/v1/workflows/products/text-to-clip/runs", key, json={"inputs": {"prompt": "x"}})
    body = err(await j(r))
    assert (r.status_code, body["code"], body["message"]) == (
        402, "billing.spend_limit_reached", "This project's monthly spend limit is reached.")
    assert body["details"]["scope"] == "project" and body["details"]["limit"] == "1.00"
    assert node.store.one("SELECT COUNT(*) AS n FROM product_runs")["n"] == runs
    ci = await new_key(node, key, spend_limit="0.50")
    await patch_project(node, key, pid, {"monthly_spend_limit": None})
    r = await node.call("POST", "/v1/workflows/products/text-to-clip/runs", ci["key"],
                        json={"inputs": {"prompt": "x"}})
    assert (r.status_code, err(await j(r))["details"]["scope"]) == (402, "api_key")


async def test_a_run_started_with_a_key_counts_its_steps_against_the_key(node, org):
    key = org["api_key"]
    ci = await new_key(node, key, spend_limit="100")
    r = await node.call("POST", "/v1/workflows/products/text-to-clip/runs", ci["key"],
                        json={"inputs": {"prompt": "x"}})
    assert r.status_code == 202, await j(r)
    run = await wait_for_run(node, ci["key"], (await j(r))["data"]["id"],
                             lambda x: x["status"] in ("completed", "failed", "canceled"))
    assert run["status"] == "completed"
    r = await node.call("GET", f"/v1/api-keys/{ci['id']}", key)
    assert (await j(r))["data"]["spent"] == run["credits"]["actual"] != "0.00"


async def test_a_step_whose_hold_the_limit_refuses_fails_the_run_with_the_reason(node, org):
    key, org_id, pid = org["api_key"], org["organization_id"], org["default_project_id"]
    r = await node.call("POST", "/v1/workflows/products/text-to-clip/estimate", key, json={"inputs": {"prompt": "x"}})
    estimate = to_uc((await j(r))["data"]["credits_estimate"])
    await patch_project(node, key, pid, {"monthly_spend_limit": fmt(estimate)})
    r = await node.call("POST", "/v1/workflows/products/text-to-clip/runs", key,
                        json={"inputs": {"prompt": "x [[delay:1]]"}})
    assert r.status_code == 202, await j(r)
    # while the still renders, one cent more of the project's month is taken elsewhere
    await node.parts.balances.ask(org_id, PlaceHold("elsewhere", CENT, project_id=pid))
    run = await wait_for_run(node, key, (await j(r))["data"]["id"],
                             lambda x: x["status"] in ("completed", "failed", "canceled"))
    spent = to_uc((await get_project(node, key, pid))["month_spent"])  # the still's price and the cent
    still = spent - CENT
    assert (run["status"], run["error"]) == ("failed", (
        f"clip: This project's monthly spend limit is reached. The step needs {fmt(estimate - still)}; "
        f"{fmt(spent)} of the {fmt(estimate)} limit is spent."))


# -- warnings ---------------------------------------------------------------------------------------
async def test_the_first_refusal_of_a_period_warns_once_by_event_and_mail(node, org, autojump_clock):
    key, org_id, pid = org["api_key"], org["organization_id"], org["default_project_id"]
    await patch_project(node, key, pid, {"monthly_spend_limit": "0"})
    for _ in range(3):
        assert (await submit(node, key))[0] == 402

    def events():
        return [json.loads(r["data"]) for r in node.store.all(
            "SELECT data FROM events WHERE event = 'billing.spend_limit_reached' ORDER BY rowid")]

    def mails():
        return node.store.all("SELECT to_address, subject FROM emails WHERE kind = 'spend_limit_reached'")

    assert events() == [{"scope": "project", "id": pid, "limit": "0.00", "spent": "0.00",
                         "organization_id": org_id}]
    assert [m["subject"] for m in mails()] == ["Spend limit reached: Default"]
    await node.op("POST", "/test/clock", {"advance_seconds": OCT_1 - START})
    assert (await submit(node, key))[0] == 402  # a new month: one more warning
    assert (await submit(node, key))[0] == 402
    assert len(events()) == 2 and len(mails()) == 2


# -- exact under concurrency ------------------------------------------------------------------------
async def test_concurrent_submits_never_pass_the_limits(node, org):
    key, org_id, pid = org["api_key"], org["organization_id"], org["default_project_id"]
    await patch_project(node, key, pid, {"monthly_spend_limit": "20"})
    results: list[str] = []

    async def one(i: int) -> None:
        try:
            await node.parts.balances.ask(org_id, PlaceHold(f"c{i}", UC, project_id=pid, api_key_id="k"))
            results.append("ok")
        except SpendLimitReached:
            results.append("refused")

    async with trio.open_nursery() as n:
        for i in range(64):
            n.start_soon(one, i)
    assert (results.count("ok"), results.count("refused")) == (20, 44)
    assert (await get_project(node, key, pid))["month_spent"] == "20.00"
