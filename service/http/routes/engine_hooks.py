"""`POST /engine-hooks/{job_id}/{token}`: outcomes an engine reports to this node.

Cog has no GET of a prediction: it tells its outcome only by webhook. The URL it is
given carries a token derived from a node secret (service/engines/context.py), so a
wrong token is 404, as for any unknown path. Not part of the public API (no /v1).
A hook of known length up to 1 MiB that this route would accept is answered in front of
Quart, with the same answer (service/http/hook_front.py); this route answers the rest.
"""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import hide

from service.engines import HOOK_PATH
from service.errors import ApiError
from service.http.auth import node

bp = Blueprint("engine_hooks", __name__)


@bp.post(f"{HOOK_PATH}/<job_id>/<token>")
@hide
async def engine_hook(job_id: str, token: str):
    body = await request.get_data(cache=False)
    raw = body if isinstance(body, bytes) else body.encode()
    headers = {k.lower(): v for k, v in request.headers.items()}
    refusal = node().engines.context.judge(job_id, token, raw, headers)
    if refusal is not None:
        status, code, message = refusal
        raise ApiError(message, code=code, status=status)
    return {"received": True}
