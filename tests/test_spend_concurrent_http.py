"""64 submits at once through the HTTP API with a key whose spend limit covers exactly five:
exactly five are accepted, the rest get the documented 402, and `spent` is the limit to the
micro-credit (operations.md "Spend limits": "exactly under any number of concurrent
submits")."""

from __future__ import annotations

import trio

from conftest import err, j
from service.money import fmt, to_uc

IMAGE = "/v1/generation/capabilities/image.generate"


async def test_64_concurrent_submits_with_a_limited_key_take_exactly_the_limit(node, org):
    owner = org["api_key"]
    r = await node.call("POST", "/v1/api-keys", owner, json={"name": "probe", "spend_limit": "100"})
    probe = (await j(r))["data"]
    r = await node.call("POST", IMAGE, probe["key"], json={"prompt": "price probe [[delay:5]]"})
    assert r.status_code == 202, await j(r)
    r = await node.call("GET", f"/v1/api-keys/{probe['id']}", owner)
    price = to_uc((await j(r))["data"]["spent"])
    assert price > 0
    r = await node.call("POST", "/v1/api-keys", owner, json={"name": "ci", "spend_limit": fmt(5 * price)})
    ci = (await j(r))["data"]
    answers: list[tuple[int, dict]] = []

    async def one() -> None:
        r = await node.call("POST", IMAGE, ci["key"], json={"prompt": "a fox [[delay:5]]"})
        answers.append((r.status_code, await j(r)))

    async with trio.open_nursery() as n:
        for _ in range(64):
            n.start_soon(one)
    codes = sorted(s for s, _ in answers)
    assert codes.count(202) == 5 and codes.count(402) == 59
    refused = [err(b) for s, b in answers if s == 402]
    assert {(e["code"], e["message"], e["details"]["limit"]) for e in refused} == {
        ("billing.spend_limit_reached", "This API key's spend limit is reached.", fmt(5 * price))}
    r = await node.call("GET", f"/v1/api-keys/{ci['id']}", owner)
    assert (await j(r))["data"]["spent"] == fmt(5 * price)
