"""The test clock refuses absurd advances (probe L4: `1e300` was taken, and then every `/v1`
request failed until a restart): 422 with the bound, and the node keeps answering."""

from __future__ import annotations

import pytest

from service.clock import iso
from tests.conftest import START

BOUND = "advance_seconds must be a number from 0 to 3155760000 (100 years)."
IMAGE = "/v1/generation/capabilities/image.generate"


async def still_works(node, key) -> None:
    r = await node.call("GET", "/v1/billing/balance", key)
    assert r.status_code == 200 and (await r.get_json())["data"]["available"] == "200.00"
    r = await node.call("POST", IMAGE, key, json={"prompt": "after the clock"})
    assert r.status_code == 202


@pytest.mark.parametrize("raw, shown", [
    (b'{"advance_seconds": 1e300}', 1e300),
    (b'{"advance_seconds": 1e400}', None),  # inf once parsed: shown as null
    (b'{"advance_seconds": -1}', -1),
    (b'{"advance_seconds": -0.5}', -0.5),
    (b'{"advance_seconds": 3155760001}', 3155760001),
    (b'{"advance_seconds": 1' + b'0' * 400 + b'}', None),  # too many digits to show
])
async def test_absurd_advances_are_422_and_the_node_keeps_working(node, raw, shown, autojump_clock):
    org = await node.create_org()
    r = await node.client.post("/operator/v1/test/clock", data=raw,
                               headers={**node.op_headers(), "Content-Type": "application/json"})
    assert r.status_code == 422, await r.get_data(as_text=True)
    e = (await r.get_json())["error"]
    assert (e["code"], e["message"], e["details"]) == ("request.validation_failed", BOUND,
                                                       {"advance_seconds": shown})
    assert node.clock.now() < START + 60
    await still_works(node, org["api_key"])


async def test_the_clock_stays_before_the_year_9000(node, autojump_clock):
    org = await node.create_org()
    for _ in range(2):  # a hundred years at a time is fine ...
        r = await node.op("POST", "/test/clock", {"advance_seconds": 3155760000})
        assert r.status_code == 200
    node.clock.advance(6700 * 365.25 * 86400)  # ... until the clock would leave the years it can write
    before = node.clock.now()
    r = await node.op("POST", "/test/clock", {"advance_seconds": 3155760000})
    assert r.status_code == 422
    e = (await r.get_json())["error"]
    assert (e["code"], e["message"]) == ("request.validation_failed",
                                        "advance_seconds would move the service clock past the year 9000.")
    assert node.clock.now() == before
    r = await node.op("POST", "/test/clock", {"advance_seconds": 60})
    assert r.status_code == 200 and (await r.get_json())["data"]["now"] == iso(before + 60)
    r = await node.call("GET", "/v1/billing/balance", org["api_key"])
    assert r.status_code == 200
