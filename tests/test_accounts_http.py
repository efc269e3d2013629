"""Organizations, members, roles, API keys and projects over HTTP (spec "Authentication",
"API keys", "Roles", "Projects"; operations.md operator API)."""

import hashlib
import json
import re

import pytest

from service.roles import ROLE_IDS
from conftest import j

UNAUTHORIZED = {"status": False, "error": "Unauthorized"}
FORBIDDEN = {"status": False, "error": "Forbidden"}


def strip(b):
    b["error"].pop("request_id")
    return b


def events(node, org_id, name=None):
    rows = node.store.all("SELECT event, data FROM events WHERE organization_id = ? ORDER BY seq", (org_id,))
    return [(r["event"], json.loads(r["data"])) for r in rows if name is None or r["event"] == name]


# -- authentication ----------------------------------------------------------------------
async def test_every_401_cause_has_the_flat_body(node):
    org = await node.create_org()
    key = org["api_key"]
    assert (await node.call("GET", "/v1/projects", key)).status_code == 200
    cases = {
        "no header": None,
        "unknown": "aak_" + "0" * 48,
        "not a key": "hello",
    }
    for _, k in cases.items():
        r = await node.call("GET", "/v1/projects", k)
        assert r.status_code == 401 and await j(r) == UNAUTHORIZED

    # paused
    created = await j(await node.call("POST", "/v1/api-keys", key, json={"name": "p"}))
    k2 = created["data"]["key"]
    await node.call("PATCH", f"/v1/api-keys/{created['data']['id']}", key, json={"is_active": False})
    r = await node.call("GET", "/v1/projects", k2)
    assert r.status_code == 401 and await j(r) == UNAUTHORIZED
    # resumed
    await node.call("PATCH", f"/v1/api-keys/{created['data']['id']}", key, json={"is_active": True})
    assert (await node.call("GET", "/v1/projects", k2)).status_code == 200
    # revoked
    assert (await node.call("DELETE", f"/v1/api-keys/{created['data']['id']}", key)).status_code == 204
    r = await node.call("GET", "/v1/projects", k2)
    assert r.status_code == 401 and await j(r) == UNAUTHORIZED


async def test_expired_key_is_401_at_expiry(node, autojump_clock):
    org = await node.create_org()
    now = node.clock.now()
    from service.clock import iso
    r = await node.call("POST", "/v1/api-keys", org["api_key"],
                        json={"name": "short", "expires_at": iso(now + 60).replace("Z", "+00:00")})
    assert r.status_code == 201
    k = (await j(r))["data"]["key"]
    assert (await node.call("GET", "/v1/projects", k)).status_code == 200
    node.clock.advance(59)
    assert (await node.call("GET", "/v1/projects", k)).status_code == 200
    node.clock.advance(1)
    r = await node.call("GET", "/v1/projects", k)
    assert r.status_code == 401 and await j(r) == UNAUTHORIZED


async def test_unapproved_org_keys_401_until_approval(node):
    org = await node.create_org(approved=False)
    r = await node.call("GET", "/v1/projects", org["api_key"])
    assert r.status_code == 401 and await j(r) == UNAUTHORIZED
    r = await node.op("POST", f"/organizations/{org['organization_id']}/approve")
    assert r.status_code == 200
    data = (await j(r))["data"]
    assert data["organization_id"] == org["organization_id"] and data["approved_at"]
    assert (await node.call("GET", "/v1/projects", org["api_key"])).status_code == 200


async def test_removed_member_keys_401_next_request(node):
    org = await node.create_org()
    m = await node.add_member(org["organization_id"], "member")
    assert (await node.call("GET", "/v1/projects", m["api_key"])).status_code == 200
    r = await node.op("DELETE", f"/organizations/{org['organization_id']}/members/{m['user_id']}")
    assert r.status_code == 204
    r = await node.call("GET", "/v1/projects", m["api_key"])
    assert r.status_code == 401 and await j(r) == UNAUTHORIZED


async def test_operator_token_required(node):
    r = await node.client.post("/operator/v1/organizations", json={"name": "x", "owner_email": "a@b"},
                               headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and await j(r) == UNAUTHORIZED


async def test_keys_stored_as_digests_only(node):
    org = await node.create_org()
    key = org["api_key"]
    assert re.fullmatch(r"aak_[0-9a-f]{48}", key)
    rows = node.store.all("SELECT key_prefix, key_hash FROM api_keys")
    assert {"key_prefix": key[:12], "key_hash": hashlib.sha256(key.encode()).digest()} in rows
    raw = b"".join(p.read_bytes() for p in node.parts.settings.data_dir.glob("genservice.db*"))
    assert key.encode() not in raw


# -- permissions -------------------------------------------------------------------------
@pytest.mark.parametrize("role, status", [("owner", 201), ("admin", 201), ("member", 403), ("read_only", 403)])
async def test_projects_write_permission(node, role, status):
    org = await node.create_org()
    key = org["api_key"] if role == "owner" else (await node.add_member(org["organization_id"], role))["api_key"]
    r = await node.call("POST", "/v1/projects", key, json={"name": f"P {role}"})
    assert r.status_code == status
    if status == 403:
        assert await j(r) == FORBIDDEN


@pytest.mark.parametrize("role, status", [("owner", 200), ("admin", 200), ("member", 403), ("read_only", 200)])
async def test_roles_read_permission(node, role, status):
    org = await node.create_org()
    key = org["api_key"] if role == "owner" else (await node.add_member(org["organization_id"], role))["api_key"]
    r = await node.call("GET", f"/v1/roles/{ROLE_IDS['admin']}", key)
    assert r.status_code == status
    r = await node.call("GET", "/v1/roles", key)  # any valid key
    assert r.status_code == 200


async def test_bound_key_acts_with_its_role(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/api-keys", org["api_key"],
                        json={"name": "ro", "role_id": ROLE_IDS["read_only"]})
    assert r.status_code == 201
    ro = (await j(r))["data"]
    assert ro["role_id"] == ROLE_IDS["read_only"]
    assert (await node.call("GET", "/v1/projects", ro["key"])).status_code == 200
    r = await node.call("POST", "/v1/projects", ro["key"], json={"name": "nope"})
    assert r.status_code == 403 and await j(r) == FORBIDDEN


async def test_admin_cannot_bind_owner_role(node):
    org = await node.create_org()
    admin = await node.add_member(org["organization_id"], "admin")
    r = await node.call("POST", "/v1/api-keys", admin["api_key"],
                        json={"name": "up", "role_id": ROLE_IDS["owner"]})
    assert r.status_code == 403
    assert strip(await j(r)) == {"error": {"code": "auth.forbidden",
                                           "message": "You cannot create a key with a broader role than your own.",
                                           "details": {"role_id": ROLE_IDS["owner"]}}}
    # nothing was created
    keys = (await j(await node.call("GET", "/v1/api-keys", admin["api_key"])))["data"]
    assert "up" not in [k["name"] for k in keys]
    # an owner may
    r = await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": "o", "role_id": ROLE_IDS["owner"]})
    assert r.status_code == 201


# -- roles -------------------------------------------------------------------------------
async def test_roles_list_and_users(node):
    org = await node.create_org()
    await node.add_member(org["organization_id"], "member", "m@acme.test")
    data = (await j(await node.call("GET", "/v1/roles", org["api_key"])))["data"]
    assert [r["name"] for r in data] == ["owner", "admin", "member", "read_only"]
    assert data[3]["id"] == ROLE_IDS["read_only"] and "roles:read" in data[3]["permissions"]
    assert "roles:read" not in data[2]["permissions"]
    users = (await j(await node.call("GET", f"/v1/roles/{ROLE_IDS['member']}/users", org["api_key"])))["data"]
    assert [u["email"] for u in users] == ["m@acme.test"]
    r = await node.call("GET", "/v1/roles/00000000-0000-0000-0000-000000000000", org["api_key"])
    assert r.status_code == 404
    assert strip(await j(r)) == {"error": {"code": "role.not_found", "message": "Role not found."}}


# -- API keys ----------------------------------------------------------------------------
async def test_api_key_lifecycle_and_events(node):
    org = await node.create_org()
    key = org["api_key"]
    r = await node.call("POST", "/v1/api-keys", key, json={"name": "ci"})
    assert r.status_code == 201
    k = (await j(r))["data"]
    assert set(k) == {"id", "name", "key_prefix", "user_id", "role_id", "expires_at", "is_active",
                      "created_at", "last_used_at", "key", "spend_limit", "spent"}  # operations.md "Spend limits"
    assert k["key_prefix"] == k["key"][:12] and k["role_id"] is None and k["expires_at"] is None
    got = (await j(await node.call("GET", f"/v1/api-keys/{k['id']}", key)))["data"]
    assert "key" not in got and got["name"] == "ci"
    r = await node.call("PATCH", f"/v1/api-keys/{k['id']}", key, json={"name": "ci-2"})
    assert (await j(r))["data"]["name"] == "ci-2"
    assert (await node.call("DELETE", f"/v1/api-keys/{k['id']}", key)).status_code == 204
    assert (await node.call("DELETE", f"/v1/api-keys/{k['id']}", key)).status_code == 204
    r = await node.call("GET", f"/v1/api-keys/{k['id']}", key)
    assert r.status_code == 404
    assert strip(await j(r)) == {"error": {"code": "api_key.not_found", "message": "API key not found."}}
    created = events(node, org["organization_id"], "api_key.created")[-1][1]
    revoked = events(node, org["organization_id"], "api_key.revoked")
    assert len(revoked) == 1
    expected = {"key_id": k["id"], "name": "ci", "key_prefix": k["key_prefix"], "user_id": k["user_id"],
                "role_id": None, "expires_at": None, "organization_id": org["organization_id"]}
    assert created == expected
    assert revoked[0][1] == expected | {"name": "ci-2"}
    assert all(k["key"] not in json.dumps(e) for _, e in events(node, org["organization_id"]))


async def test_pausing_sends_no_event(node):
    org = await node.create_org()
    k = (await j(await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": "x"})))["data"]
    await node.call("PATCH", f"/v1/api-keys/{k['id']}", org["api_key"], json={"is_active": False})
    assert events(node, org["organization_id"], "api_key.revoked") == []


async def test_unknown_key_ids(node):
    org = await node.create_org()
    for method in ("GET", "PATCH", "DELETE"):
        kw = {"json": {"name": "x"}} if method == "PATCH" else {}
        r = await node.call(method, "/v1/api-keys/nope", org["api_key"], **kw)
        assert r.status_code == 404 and (await j(r))["error"]["code"] == "api_key.not_found"


async def test_key_expires_at_needs_offset(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/api-keys", org["api_key"],
                        json={"name": "x", "expires_at": "2030-01-01T00:00:00"})
    assert r.status_code == 422
    assert strip(await j(r))["error"]["message"] == "expires_at must be an ISO 8601 timestamp with an offset."


async def test_other_orgs_key_is_404(node):
    a = await node.create_org()
    b = await node.create_org("Other", "o@other.test")
    kb = (await j(await node.call("GET", "/v1/api-keys", b["api_key"])))["data"][0]
    r = await node.call("GET", f"/v1/api-keys/{kb['id']}", a["api_key"])
    assert r.status_code == 404
    r2 = await node.call("GET", "/v1/api-keys/00000000-0000-0000-0000-000000000000", a["api_key"])
    assert strip(await j(r)) == strip(await j(r2))


# -- projects ----------------------------------------------------------------------------
async def test_project_create_slug_rules(node):
    org = await node.create_org()
    key = org["api_key"]
    r = await node.call("POST", "/v1/projects", key, json={"name": "My Film!"})
    assert r.status_code == 201
    p = (await j(r))["data"]
    assert p["slug"] == "my-film" and p["is_default"] is False and p["description"] is None
    assert p["updated_at"] is None and p["archived_at"] is None and p["created_by"] == org["owner_user_id"]
    r = await node.call("POST", "/v1/projects", key, json={"name": "My Film"})
    assert (await j(r))["data"]["slug"] == "my-film-2"
    r = await node.call("POST", "/v1/projects", key, json={"name": "Dup", "slug": "my-film"})
    assert r.status_code == 409
    assert strip(await j(r)) == {"error": {"code": "request.conflict", "message": "The slug is already taken.",
                                           "details": {"slug": "my-film"}}}
    for bad in ["-a", "a-", "A", "a_b", "", "a" * 65, "ab\n"]:  # "ab\\n": `$` also matches before a final newline
        r = await node.call("POST", "/v1/projects", key, json={"name": "x", "slug": bad})
        assert r.status_code == 422, bad
        assert (await j(r))["error"]["code"] == "request.validation_failed"
    r = await node.call("POST", "/v1/projects", key, json={"name": "x", "slug": "a" * 64})
    assert r.status_code == 201
    r = await node.call("POST", "/v1/projects", key, json={"name": "  "})
    assert r.status_code == 422
    assert strip(await j(r)) == {"error": {"code": "request.validation_failed", "message": "name is required.",
                                           "details": {"field": "name"}}}
    r = await node.call("POST", "/v1/projects", key, json={})
    assert r.status_code == 422 and (await j(r))["error"]["message"] == "name is required."


async def test_project_get_by_id_or_slug_and_list(node):
    org = await node.create_org()
    key = org["api_key"]
    p = (await j(await node.call("POST", "/v1/projects", key, json={"name": "Alpha"})))["data"]
    by_slug = (await j(await node.call("GET", "/v1/projects/alpha", key)))["data"]
    by_id = (await j(await node.call("GET", f"/v1/projects/{p['id']}", key)))["data"]
    assert by_slug == by_id == p
    listed = (await j(await node.call("GET", "/v1/projects", key)))["data"]
    assert [x["slug"] for x in listed] == ["alpha", "default"]
    default = listed[1]
    assert default["name"] == "Default" and default["is_default"] is True
    assert default["id"] == org["default_project_id"]
    r = await node.call("GET", "/v1/projects/missing", key)
    assert r.status_code == 404 and (await j(r))["error"]["code"] == "request.not_found"


async def test_project_patch_and_archive(node):
    org = await node.create_org()
    key = org["api_key"]
    p = (await j(await node.call("POST", "/v1/projects", key, json={"name": "Alpha"})))["data"]
    r = await node.call("PATCH", f"/v1/projects/{p['id']}", key,
                        json={"name": "Beta", "slug": "beta", "description": "d"})
    assert r.status_code == 200
    q = (await j(r))["data"]
    assert (q["name"], q["slug"], q["description"]) == ("Beta", "beta", "d") and q["updated_at"]
    r = await node.call("PATCH", f"/v1/projects/{p['id']}", key, json={"slug": "default"})
    assert r.status_code == 409 and (await j(r))["error"]["details"] == {"slug": "default"}
    r = await node.call("POST", f"/v1/projects/{p['id']}/archive", key)
    assert r.status_code == 200
    a = (await j(r))["data"]
    assert a["is_archived"] is True and a["archived_at"]
    again = (await j(await node.call("POST", f"/v1/projects/{p['id']}/archive", key)))["data"]
    assert again == a
    r = await node.call("PATCH", f"/v1/projects/{p['id']}", key, json={"name": "x"})
    assert r.status_code == 409
    assert strip(await j(r)) == {"error": {"code": "request.conflict", "message": "The project is archived.",
                                           "details": {"project_id": p["id"]}}}
    r = await node.call("POST", f"/v1/projects/{org['default_project_id']}/archive", key)
    assert r.status_code == 409
    assert strip(await j(r)) == {"error": {"code": "request.conflict",
                                           "message": "The default project cannot be archived.",
                                           "details": {"project_id": org["default_project_id"]}}}


# -- operator: members -------------------------------------------------------------------
async def test_member_events(node):
    org = await node.create_org()
    oid = org["organization_id"]
    m = await node.add_member(oid, "member", "m@acme.test")
    r = await node.op("PATCH", f"/organizations/{oid}/members/{m['user_id']}", {"role": "admin"})
    assert r.status_code == 200
    r = await node.op("DELETE", f"/organizations/{oid}/members/{m['user_id']}")
    assert r.status_code == 204
    got = [(e, d) for e, d in events(node, oid) if e.startswith("member.")]
    base = {"member_id": m["user_id"], "member_email": "m@acme.test", "organization_id": oid}
    assert got == [("member.joined", base | {"role": "member"}),
                   ("member.role_changed", base | {"role": "admin"}),
                   ("member.removed", base | {"role": "admin"})]


async def test_operator_rejects_unknown_role(node):
    org = await node.create_org()
    r = await node.op("POST", f"/organizations/{org['organization_id']}/members", {"email": "x@y", "role": "god"})
    assert r.status_code == 422
    assert (await j(r))["error"]["message"] == "role must be one of owner, admin, member, read_only."
