"""A role-bound key, once its creator's role changes, acts with no permission that either
its binding or its creator's current role lacks. read_only and member are not nested
(read_only reads webhooks and roles, member writes generation): capping one by the other
must not hand the key the other's permissions."""

from __future__ import annotations

import pytest

from service.roles import ROLE_IDS

FORBIDDEN_FLAT = {"status": False, "error": "Forbidden"}
CANCEL = "/v1/generation/requests/00000000-0000-4000-8000-000000000000/cancel"


async def bound_key_of_demoted_admin(node, bound: str, demoted_to: str) -> str:
    org = await node.create_org()
    admin = await node.add_member(org["organization_id"], "admin", "admin@acme.test")
    r = await node.call("POST", "/v1/api-keys", admin["api_key"], json={"name": "bound", "role_id": ROLE_IDS[bound]})
    assert r.status_code == 201, await r.get_data(as_text=True)
    key = (await r.get_json())["data"]["key"]
    r = await node.op("PATCH", f"/organizations/{org['organization_id']}/members/{admin['user_id']}",
                      {"role": demoted_to})
    assert r.status_code == 200, await r.get_data(as_text=True)
    return key


@pytest.mark.parametrize("bound, demoted_to, gained", [
    ("read_only", "member", ("POST", CANCEL)),          # generation:write: spends credits
    ("member", "read_only", ("GET", "/v1/webhooks")),   # webhooks:read
    ("member", "read_only", ("GET", f"/v1/roles/{ROLE_IDS['owner']}/users")),  # roles:read
])
async def test_a_bound_key_never_gains_what_its_binding_lacks(node, bound, demoted_to, gained):
    key = await bound_key_of_demoted_admin(node, bound, demoted_to)
    method, path = gained
    r = await node.call(method, path, key, **({"json": {}} if method == "POST" else {}))
    assert (r.status_code, await r.get_json()) == (403, FORBIDDEN_FLAT)
    assert (await node.call("GET", "/v1/projects", key)).status_code == 200  # what both allow stays


async def test_nested_caps_are_unchanged(node):
    """A key bound to admin whose creator is now member acts as member (and no wider)."""
    key = await bound_key_of_demoted_admin(node, "admin", "member")
    r = await node.call("POST", "/v1/projects", key, json={"name": "x"})
    assert (r.status_code, await r.get_json()) == (403, FORBIDDEN_FLAT)
    r = await node.call("POST", CANCEL, key, json={})
    assert r.status_code not in (401, 403)
