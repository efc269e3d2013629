"""Signed asset URLs: `GET /files/<asset_id>?exp=<epoch>&sig=<hex>`, no API key.

A URL that is expired, altered (id, exp or sig), malformed, or whose `exp` lies more than
900 s ahead is refused with 403 `auth.forbidden` ("This link is invalid or has expired.");
a valid link to an asset that is gone is 404. The file is served with the asset's content
type, `X-Content-Type-Options: nosniff`, `Content-Disposition: inline`, a private cache
lifetime no longer than the link's, Range support, and the asset's own validators (ETag:
its id; Last-Modified: its creation), never the shared content file's.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from quart import Blueprint, request, send_file
from quart_schema import hide

from service.clock import parse_iso
from service.errors import Forbidden, NotFound
from service.http.auth import node
from service.storage import generation as sql

bp = Blueprint("files", __name__)

BUFFER = 256 * 1024


@bp.get("/files/<asset_id>")
@hide
async def signed_file(asset_id: str):
    gen = node().generation
    if not gen.signer.check(asset_id, request.args.get("exp"), request.args.get("sig")):
        raise Forbidden("This link is invalid or has expired.")
    row = sql.get_asset(node().store, asset_id)
    path = gen.files.path(row["sha256"]) if row is not None else None
    if row is None or path is None or not path.is_file():
        raise NotFound("Asset not found.")
    # Validators of the asset, not of the stored file: files are kept once per content for the
    # whole node, so the file's time would tell one organization that another stored the
    # same bytes, and when. An asset's bytes never change: its id is a strong ETag.
    created = datetime.fromtimestamp(parse_iso(row["created_at"]), UTC)
    response = await send_file(path, mimetype=row["content_type"], add_etags=False, last_modified=created)
    response.set_etag(row["id"])
    await response.make_conditional(request, accept_ranges=True, complete_length=response.content_length)
    response.response.buffer_size = BUFFER  # type: ignore[attr-defined]  # send_file gives a FileBody
    remaining = max(0, math.floor(int(request.args["exp"]) - gen.clock.now()))
    response.headers.pop("Expires", None)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Disposition"] = "inline"
    response.headers["Cache-Control"] = f"private, max-age={remaining}"
    return response
