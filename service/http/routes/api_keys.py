"""API keys (spec "API keys"; operations.md). The full key is in the create answer only.
Keys carry `spend_limit` and `spent` (operations.md "Spend limits")."""

from __future__ import annotations

import trio
from quart import Blueprint

from service.clock import iso, parse_iso
from service.credits.limits import parse_limit
from service.errors import NotFound, Unprocessable
from service.views import accounts as views
from service.views import spend
from service.views.shapes import ApiKey, ApiKeyCreated
from service.http.responses import Data
from service.http.auth import principal, requires, node
from service.http.schemas import SPEND_LIMIT, TS, Body, Timestamp, body, documented, non_blank, nullable
from service.roles import ROLE_IDS
from service.storage import accounts as sql

bp = Blueprint("api_keys", __name__)


class KeyCreate(Body):
    name: str = documented(non_blank())
    role_id: str | None = documented(nullable({"enum": list(ROLE_IDS.values())}), None)
    expires_at: Timestamp | None = documented(nullable(TS), None)
    spend_limit: str | None = documented(SPEND_LIMIT, None)


class KeyUpdate(Body):
    name: str | None = documented(nullable(non_blank()), None)
    is_active: bool | None = None
    spend_limit: str | None = documented(SPEND_LIMIT, None)


async def limit_or_revoke(org_id: str, key_id: str, limit: int) -> None:
    """Set a new key's spend limit; if that fails the key is revoked: a key meant to be
    limited must not stay usable without its limit."""
    try:
        await node().balances.limit_put(org_id, "api_key", key_id, limit)
    except BaseException:
        with trio.CancelScope(shield=True):
            await node().accounts.revoke_key(org_id, key_id)
        raise


def _views(rows: list[dict]) -> list[ApiKey]:
    return spend.keys(node().store, principal().org_id, rows)


@bp.get("/v1/api-keys")
@requires("api_keys:read")
async def list_keys() -> Data[list[ApiKey]]:
    return {"data": _views(sql.list_keys(node().store, principal().org_id))}


@bp.get("/v1/api-keys/<key_id>")
@requires("api_keys:read")
async def get_key(key_id: str) -> Data[ApiKey]:
    row = sql.get_key(node().store, principal().org_id, key_id)
    if row is None:
        raise NotFound("API key not found.", code="api_key.not_found")
    return {"data": _views([row])[0]}


@bp.post("/v1/api-keys")
@requires("api_keys:create")
@body(KeyCreate)
async def create_key(data: KeyCreate) -> tuple[Data[ApiKeyCreated], int]:
    limit = parse_limit(data.spend_limit, "spend_limit")
    if not data.name.strip():
        raise Unprocessable("name is required.", {"field": "name"})
    expires = None
    if data.expires_at is not None:
        try:
            ts = parse_iso(data.expires_at)
        except ValueError:
            raise Unprocessable("expires_at must be an ISO 8601 timestamp with an offset.",
                                {"field": "expires_at"}) from None
        if ts <= node().clock.now():
            raise Unprocessable("expires_at must be in the future.", {"field": "expires_at"})
        expires = iso(ts)
    p = principal()
    row = await node().accounts.create_key(p.org_id, p.user_id, p.role, data.name.strip(), data.role_id, expires,
                                           caller_user_role=p.user_role)
    if limit is not None:
        await limit_or_revoke(p.org_id, row["id"], limit)
    return {"data": views.api_key_created(_views([row])[0], row["key"])}, 201


@bp.patch("/v1/api-keys/<key_id>")
@requires("api_keys:create")
@body(KeyUpdate)
async def update_key(key_id: str, data: KeyUpdate) -> Data[ApiKey]:
    setting = "spend_limit" in data.model_fields_set
    limit = parse_limit(data.spend_limit, "spend_limit")
    fields: dict[str, object] = {}
    if data.name is not None:
        if not data.name.strip():
            raise Unprocessable("name is required.", {"field": "name"})
        fields["name"] = data.name.strip()
    if data.is_active is not None:
        fields["is_active"] = int(data.is_active)
    org_id = principal().org_id
    row = await node().accounts.update_key(org_id, key_id, fields)
    if setting:
        await node().balances.limit_put(org_id, "api_key", row["id"], limit)
    return {"data": _views([row])[0]}


@bp.delete("/v1/api-keys/<key_id>")
@requires("api_keys:revoke")
async def revoke_key(key_id: str):
    await node().accounts.revoke_key(principal().org_id, key_id)
    return "", 204
