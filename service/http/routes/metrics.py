"""`GET /metrics`: the node's Prometheus metrics (service/metrics.py), outside `/v1`.

Only with `Authorization: Bearer <GENSERVICE_METRICS_TOKEN>`; a wrong or missing token is
the flat 401; a node without that setting has no metrics route (404), so nothing about it
is readable by default."""

from __future__ import annotations

from quart import Blueprint, Response, request
from quart_schema import hide

from service.errors import NotFound
from service.http.auth import constant_time_equal, node
from service.http.errors import AuthFailure
from service.metrics import CONTENT_TYPE

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
@hide
async def metrics():
    svc = node()
    expected = svc.settings.metrics_token
    if not expected:
        raise NotFound("Not found.")
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not constant_time_equal(token.strip(), expected):
        raise AuthFailure(401)
    return Response(svc.metrics.text(), content_type=CONTENT_TYPE)
