"""Function-level authorization, generated from the app's own route table.

EXPECTED is the spec's permission table (Authentication, item 5), written per route. Every
/v1 route of the app must be in it (a new route missing from the table fails), every route
must declare exactly that permission, and every role and role-bound key gets exactly the
spec's allow/deny: denied is the flat 403, allowed is never 401 or 403.
"""

import json
import re

import pytest

from service.roles import ROLE_IDS, allows
from sse_client import open_stream

STREAMS = {("GET", "/v1/events")}  # an allowed caller gets an open stream: read its start only

EXPECTED = {
    # generation
    ("GET", "/v1/generation/capabilities"): "generation:read",
    ("GET", "/v1/generation/models"): "generation:read",
    ("POST", "/v1/generation/capabilities/<capability>"): "generation:write",
    ("POST", "/v1/generation/models/<model>"): "generation:write",
    ("POST", "/v1/generation/estimate"): "generation:read",
    ("GET", "/v1/generation/requests"): "generation:read",
    ("GET", "/v1/generation/requests/<job_id>/status"): "generation:read",
    ("POST", "/v1/generation/requests/<job_id>/cancel"): "generation:write",
    ("GET", "/v1/generation/assets"): "generation:read",
    ("GET", "/v1/generation/assets/<asset_id>"): "generation:read",
    ("GET", "/v1/generation/assets/<asset_id>/content"): "generation:read",
    ("GET", "/v1/generation/assets/<asset_id>/url"): "generation:read",
    ("POST", "/v1/generation/uploads"): "generation:write",
    # products and runs
    ("GET", "/v1/workflows/products"): "generation:read",
    ("GET", "/v1/workflows/products/<slug>"): "generation:read",
    ("POST", "/v1/workflows/products/<slug>/estimate"): "generation:read",
    ("POST", "/v1/workflows/products/<slug>/runs"): "generation:write",
    ("GET", "/v1/workflows/runs"): "generation:read",
    ("GET", "/v1/workflows/runs/<run_id>"): "generation:read",
    ("POST", "/v1/workflows/runs/<run_id>/cancel"): "generation:write",
    ("GET", "/v1/runs"): "generation:read",
    # event streams
    ("GET", "/v1/generation/requests/<job_id>/events"): "generation:read",
    ("GET", "/v1/workflows/runs/<run_id>/events"): "generation:read",
    ("GET", "/v1/events"): "generation:read",
    # projects
    ("GET", "/v1/projects"): "projects:read",
    ("GET", "/v1/projects/<project_id>"): "projects:read",
    ("POST", "/v1/projects"): "projects:write",
    ("PATCH", "/v1/projects/<project_id>"): "projects:write",
    ("POST", "/v1/projects/<project_id>/archive"): "projects:write",
    # billing
    ("GET", "/v1/billing/balance"): "billing:read",
    ("GET", "/v1/billing/ledger"): "billing:read",
    ("GET", "/v1/billing/holds"): "billing:read",
    ("GET", "/v1/billing/usage"): "billing:read",
    ("GET", "/v1/billing/settings"): "billing:read",
    ("PUT", "/v1/billing/settings"): "billing:write",
    ("GET", "/v1/billing/topups/quote"): "billing:read",
    ("GET", "/v1/billing/topups"): "billing:read",
    ("GET", "/v1/billing/topups/<topup_id>"): "billing:read",
    ("POST", "/v1/billing/topups"): "billing:write",
    # API keys
    ("GET", "/v1/api-keys"): "api_keys:read",
    ("GET", "/v1/api-keys/<key_id>"): "api_keys:read",
    ("POST", "/v1/api-keys"): "api_keys:create",
    ("PATCH", "/v1/api-keys/<key_id>"): "api_keys:create",
    ("DELETE", "/v1/api-keys/<key_id>"): "api_keys:revoke",
    # roles
    ("GET", "/v1/roles"): None,
    ("GET", "/v1/roles/<role_id>"): "roles:read",
    ("GET", "/v1/roles/<role_id>/users"): "roles:read",
    # account webhooks (deliveries log: beyond the spec, read like the webhook itself)
    ("GET", "/v1/webhooks"): "webhooks:read",
    ("GET", "/v1/webhooks/events"): "webhooks:read",
    ("GET", "/v1/webhooks/<webhook_id>"): "webhooks:read",
    ("GET", "/v1/webhooks/<webhook_id>/deliveries"): "webhooks:read",
    ("POST", "/v1/webhooks"): "webhooks:create",
    ("PATCH", "/v1/webhooks/<webhook_id>"): "webhooks:update",
    ("POST", "/v1/webhooks/<webhook_id>/test"): "webhooks:update",
    ("DELETE", "/v1/webhooks/<webhook_id>"): "webhooks:delete",
    # support tickets (beyond the spec: see service/http/routes/support.py)
    ("GET", "/v1/support/tickets"): "users:read",
    ("GET", "/v1/support/tickets/<ticket_id>"): "users:read",
    ("POST", "/v1/support/tickets"): None,
    ("POST", "/v1/support/tickets/<ticket_id>/replies"): "users:read",
}

PUBLIC = {("GET", "/v1/openapi.json")}


def normalize(path: str) -> str:
    return re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", lambda m: "<" + m.group(1) + ">", path)


def app_routes(app):
    out = {}
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/v1"):
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            out[(method, normalize(rule.rule))] = app.view_functions[rule.endpoint]
    return out


def shape(path: str) -> str:
    return re.sub(r"<[^>]+>", "<>", path)


async def test_every_route_is_in_the_table(node):
    routes = app_routes(node.app)
    expected_shapes = {(m, shape(p)): perm for (m, p), perm in EXPECTED.items()}
    for (method, path), view in routes.items():
        if (method, path) in PUBLIC:
            continue
        key = (method, shape(path))
        assert key in expected_shapes, f"{method} {path} is not in the permission table"
        assert getattr(view, "permission", "missing") == expected_shapes[key], f"{method} {path}"


async def body_json(r) -> dict:
    if hasattr(r, "get_json"):
        return await r.get_json()
    return json.loads(await r.body())


def fill(path: str) -> str:
    return re.sub(r"<[^>]+>", "00000000-0000-4000-8000-000000000000", path)


@pytest.fixture
async def keys(node):
    org = await node.create_org()
    out = {("user", "owner"): org["api_key"]}
    for role in ("admin", "member", "read_only"):
        out[("user", role)] = (await node.add_member(org["organization_id"], role))["api_key"]
    for role in ("owner", "admin", "member", "read_only"):
        r = await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": f"b-{role}",
                                                                           "role_id": ROLE_IDS[role]})
        out[("bound", role)] = (await r.get_json())["data"]["key"]
    return out


async def test_roles_get_exactly_the_spec_table(node, keys):
    routes = app_routes(node.app)
    checked = 0
    for (method, path), view in sorted(routes.items()):
        if (method, path) in PUBLIC:
            continue
        perm = view.permission
        for (kind, role), key in keys.items():
            kw = {"json": {}} if method in ("POST", "PATCH", "PUT") and "uploads" not in path else {}
            if (method, path) in STREAMS:
                async with open_stream(node, fill(path), key) as r:
                    pass
            else:
                r = await node.call(method, fill(path), key, **kw)
            allowed = perm is None or allows(role, perm)
            if allowed:
                assert r.status_code not in (401, 403), (method, path, kind, role, r.status_code)
            else:
                assert r.status_code == 403, (method, path, kind, role, r.status_code)
                assert await body_json(r) == {"status": False, "error": "Forbidden"}
            checked += 1
    assert checked >= len(routes) - len(PUBLIC)
