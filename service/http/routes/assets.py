"""Assets: list (resolved project), read one (any project of the organization), content
(302 to a signed URL) and a signed URL to hand to a browser (`expires_in` 900 s)."""

from __future__ import annotations

from pydantic import Field
from quart import Blueprint, Response

from service.views.jobs import asset_record
from service.views.shapes import Asset
from service.assets.signing import LIFETIME_S
from service.errors import NotFound
from service.http.auth import principal, requires, resolve_project, node
from service.http.responses import AssetUrl, Data
from service.http.schemas import LIMIT, Query, clamp, documented, query
from service.storage import generation as sql

bp = Blueprint("assets", __name__)


class AssetListQuery(Query):
    limit: int | None = documented(LIMIT, None, "Default 50; clamped to 1..200.")
    project_id: str | None = Field(default=None, description="Project id or slug (else "
                                   "X-Service-Project, else the default project).")


def _asset(asset_id: str) -> dict:
    row = sql.asset_in_org(node().store, principal().org_id, asset_id)
    if row is None:
        raise NotFound("Asset not found.")
    return row


@bp.get("/v1/generation/assets")
@requires("generation:read")
@query(AssetListQuery)
async def list_assets(q: AssetListQuery) -> Data[list[Asset]]:
    project = resolve_project(q.project_id)
    base = node().generation.base_url
    rows = sql.list_assets(node().store, project["id"], clamp(q.limit, 50, 1, 200))
    return {"data": [asset_record(r, base) for r in rows]}


@bp.get("/v1/generation/assets/<asset_id>")
@requires("generation:read")
async def get_asset(asset_id: str) -> Data[Asset]:
    return {"data": asset_record(_asset(asset_id), node().generation.base_url)}


@bp.get("/v1/generation/assets/<asset_id>/content")
@requires("generation:read")
async def asset_content(asset_id: str):
    """302 to a signed URL of the file (valid 900 s, no key needed)."""
    row = _asset(asset_id)
    url = node().generation.signer.url(row["id"])
    return Response("", status=302, headers={"Location": url, "Cache-Control": "no-store"})


@bp.get("/v1/generation/assets/<asset_id>/url")
@requires("generation:read")
async def asset_url(asset_id: str) -> Data[AssetUrl]:
    row = _asset(asset_id)
    return {"data": {"url": node().generation.signer.url(row["id"]), "expires_in": LIFETIME_S}}
