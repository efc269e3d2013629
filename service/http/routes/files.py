"""Signed asset URLs: `GET /files/<asset_id>?exp=<epoch>&sig=<hex>`, no API key.

A URL that is expired, altered (id, exp or sig), malformed, or whose `exp` lies more than
900 s ahead is refused with 403 `auth.forbidden` ("This link is invalid or has expired.");
a valid link to an asset that is gone, or whose bytes were deleted behind the node's back, is 404.
With an object store (service/assets/s3.py) a valid link answers 302 to a presigned URL of
the object expiring with the link. The file is served with the asset's content
type, `X-Content-Type-Options: nosniff`, `Content-Disposition: inline`, a private cache
lifetime no longer than the link's, Range support, and the asset's own validators (ETag:
its id; Last-Modified: its creation), never the shared content file's.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import trio
from quart import Blueprint, Response, request, send_file
from quart_schema import hide

from service.clock import parse_iso
from service.assets.files import ObjectMissing, StoreUnavailable
from service.assets.s3 import S3Store
from service.assets.scopes import scope_of
from service.errors import Forbidden, NotFound, Unavailable
from service.http.auth import node
from service.storage import generation as sql

bp = Blueprint("files", __name__)

BUFFER = 256 * 1024
GONE = "The asset's bytes are no longer in the asset store."
STORE_DOWN = "The asset store is unavailable; try again later."


async def _from_store(store: S3Store, row: dict, remaining: int):
    """An object store serves its own bytes: 302 to a presigned URL of the object that
    expires with the node's link (never past 900 s). The node checks the object is there
    first, so a deleted one is a clear 404 here rather than the store's XML error page."""
    try:
        if not await trio.to_thread.run_sync(store.exists, row["sha256"], scope_of(row)):
            raise ObjectMissing(row["sha256"])
    except ObjectMissing:
        raise NotFound(GONE) from None
    except StoreUnavailable:
        raise Unavailable(STORE_DOWN) from None
    url = store.presign(row["sha256"], remaining, row["content_type"], scope_of(row))
    return Response("", status=302, headers={"Location": url, "Cache-Control": "no-store",
                                             "Referrer-Policy": "no-referrer"})


@bp.get("/files/<asset_id>")
@hide
async def signed_file(asset_id: str):
    gen = node().generation
    if not gen.signer.check(asset_id, request.args.get("exp"), request.args.get("sig")):
        raise Forbidden("This link is invalid or has expired.")
    row = sql.get_asset(node().store, asset_id)
    if row is None:
        raise NotFound("Asset not found.")
    if isinstance(gen.files, S3Store):
        return await _from_store(gen.files, row, int(request.args["exp"]) - math.floor(gen.clock.now()))
    path = gen.files.path(row["sha256"])
    if not path.is_file():
        raise NotFound(GONE)
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
