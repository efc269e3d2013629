from quart import Blueprint
from quart_schema import hide

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@hide
async def healthz():
    return {"status": "ok"}
