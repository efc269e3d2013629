"""Account webhook descriptions are bounded (they are shown on every read and page)."""

from __future__ import annotations

from conftest import err, j
from service.http.routes.webhooks import DESCRIPTION_MAX

URL = "https://hooks.example.test/in"


async def test_description_bounded_on_create_and_update(node):
    org = await node.create_org()
    key = org["api_key"]
    long = "d" * (DESCRIPTION_MAX + 1)
    want = {"code": "request.validation_failed", "message": f"description must be at most {DESCRIPTION_MAX} characters.",
            "details": {"field": "description", "max_length": DESCRIPTION_MAX}}
    r = await node.call("POST", "/v1/webhooks", key, json={"url": URL, "events": ["member.invited"], "description": long})
    assert r.status_code == 422 and err(await j(r)) == want
    assert node.store.scalar("SELECT count(*) FROM webhooks") == 0
    r = await node.call("POST", "/v1/webhooks", key,
                        json={"url": URL, "events": ["member.invited"], "description": "d" * DESCRIPTION_MAX})
    assert r.status_code == 201
    hook = (await j(r))["webhook"]
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"description": long})
    assert r.status_code == 422 and err(await j(r)) == want
