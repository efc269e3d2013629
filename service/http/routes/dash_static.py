"""`GET /static/<name>`: the dashboard's vendored files (htmx, the stylesheet, the page script).

No build step and no CDN: the files ship in the package (service/http/static). Names carry
their version, so they are cached for a day and revalidated by ETag after that.
"""

from __future__ import annotations

from pathlib import Path

from quart import Blueprint, request, send_file
from quart_schema import hide

from service.errors import NotFound

bp = Blueprint("dash_static", __name__)

STATIC = Path(__file__).resolve().parent.parent / "static"
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


@bp.get("/static/<name>")
@hide
async def static_file(name: str):
    path = STATIC / name
    if "/" in name or name.startswith(".") or path.suffix not in TYPES or not path.is_file():
        raise NotFound("File not found.")
    response = await send_file(path, mimetype=TYPES[path.suffix])
    await response.make_conditional(request)
    response.headers["Cache-Control"] = "public, max-age=86400"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
