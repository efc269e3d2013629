"""`POST /engine-hooks/{job_id}/{token}`: outcomes an engine reports to this node.

Cog has no GET of a prediction: it tells its outcome only by webhook. The URL it is
given carries a token derived from a node secret (service/engines/context.py), so a
wrong token is 404, as for any unknown path. Not part of the public API (no /v1).
A hook of known length up to 1 MiB that this route would accept is answered in front of
Quart, with the same answer (service/http/hook_front.py); this route answers the rest.
"""

from __future__ import annotations

import json

from quart import Blueprint, request
from quart_schema import hide

from service.engines import HOOK_PATH
from service.engines.context import BadSignature
from service.errors import ApiError, BadRequest, NotFound
from service.http.auth import node

bp = Blueprint("engine_hooks", __name__)


@bp.post(f"{HOOK_PATH}/<job_id>/<token>")
@hide
async def engine_hook(job_id: str, token: str):
    body = await request.get_data(cache=False)
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("Body must be a JSON object.") from None
    if not isinstance(payload, dict):
        raise BadRequest("Body must be a JSON object.")
    try:
        headers = {k.lower(): v for k, v in request.headers.items()}
        raw = body if isinstance(body, bytes) else body.encode()
        known = node().engines.context.deliver(job_id, token, payload, headers, raw)
    except BadSignature:  # Replicate signs its webhooks (Standard Webhooks)
        raise ApiError("Invalid webhook signature.", code="request.unauthorized", status=401) from None
    if not known:
        raise NotFound("Not found.")
    return {"received": True}
