"""A key may create only keys no broader than its own effective role (spec: a caller cannot
grant more access than held). The whole matrix: keys bound to each role, by an owner and by
an admin, asking for each binding and for none. An unbound key acts with its creator's own
role, so a bound key may create one only when that role is within its binding."""

from __future__ import annotations

import pytest

from service.roles import ROLE_IDS, allows, within

ROLES = ("owner", "admin", "member", "read_only")
FORBIDDEN_FLAT = {"status": False, "error": "Forbidden"}
MESSAGE = "You cannot create a key with a broader role than your own."


def strip(body: dict) -> dict:
    body["error"].pop("request_id", None)
    return body


@pytest.mark.parametrize("creator", ["owner", "admin"])
async def test_every_bound_key_times_every_requested_binding(node, creator):
    org = await node.create_org()
    creator_key = org["api_key"] if creator == "owner" else \
        (await node.add_member(org["organization_id"], "admin"))["api_key"]
    checked = 0
    for bound in ROLES:
        if not within(bound, creator):
            continue  # the creator cannot make this key (tested in test_accounts_http)
        r = await node.call("POST", "/v1/api-keys", creator_key, json={"name": f"b-{bound}",
                                                                        "role_id": ROLE_IDS[bound]})
        assert r.status_code == 201, await r.get_data(as_text=True)
        key = (await r.get_json())["data"]["key"]
        for wanted in (*ROLES, None):
            body = {"name": f"{bound}->{wanted}"} | ({"role_id": ROLE_IDS[wanted]} if wanted else {})
            r = await node.call("POST", "/v1/api-keys", key, json=body)
            acts_as = wanted or creator  # an unbound key acts with its creator's role
            if not allows(bound, "api_keys:create"):
                assert (r.status_code, await r.get_json()) == (403, FORBIDDEN_FLAT), (bound, wanted)
            elif within(acts_as, bound):
                assert r.status_code == 201, (bound, wanted, await r.get_data(as_text=True))
                made = (await r.get_json())["data"]
                assert made["role_id"] == (ROLE_IDS[wanted] if wanted else None)
            else:
                assert r.status_code == 403, (bound, wanted)
                assert strip(await r.get_json()) == {"error": {
                    "code": "auth.forbidden", "message": MESSAGE,
                    "details": {"role_id": ROLE_IDS[wanted] if wanted else None}}}
            checked += 1
    assert checked == (20 if creator == "owner" else 15)


async def test_the_escalation_found_from_outside_is_closed(node):
    """admin-bound key (made by the owner) -> unbound key -> owner-bound key: refused at step 2."""
    org = await node.create_org()
    r = await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": "adm", "role_id": ROLE_IDS["admin"]})
    admin_bound = (await r.get_json())["data"]["key"]
    r = await node.call("POST", "/v1/api-keys", admin_bound, json={"name": "free"})
    assert r.status_code == 403
    names = [k["name"] for k in (await (await node.call("GET", "/v1/api-keys", org["api_key"])).get_json())["data"]]
    assert "free" not in names
