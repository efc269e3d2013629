"""`GET /static/<name>`: the dashboard's vendored files (htmx, the stylesheet, the page script);
`GET /static/vendor/<package>/<name>`: a vendored package kept whole with its licence.

No build step and no CDN: the files ship in the package (service/http/static). Names carry
their version (`dash-2.css`): a change a browser must see at once bumps the number, since
the files are cached for a day and revalidated by ETag after that. A client
that accepts gzip gets the file compressed once per process (htmx: 52 KB -> 17 KB), which
matters on a slow link.
"""

from __future__ import annotations

import gzip
import hashlib
from functools import lru_cache
from pathlib import Path

from quart import Blueprint, Response, request
from quart_schema import hide

from service.errors import NotFound

bp = Blueprint("dash_static", __name__)

STATIC = Path(__file__).resolve().parent.parent / "static"
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".ico": "image/x-icon"}


@lru_cache(maxsize=16)
def load(name: str) -> tuple[bytes, bytes, str]:
    """(raw, gzipped, etag) of a static file."""
    raw = (STATIC / name).read_bytes()
    return raw, gzip.compress(raw, 9, mtime=0), hashlib.sha256(raw).hexdigest()[:32]


@bp.get("/static/<name>")
@hide
async def static_file(name: str):
    return await serve_file(name)


@bp.get("/static/vendor/<package>/<name>")
@hide
async def vendor_file(package: str, name: str):
    if "/" in package or package.startswith("."):
        raise NotFound("File not found.")
    return await serve_file(f"vendor/{package}/{name}")


async def serve_file(relpath: str):
    """A file under static/ (at most one folder deep, `vendor/<package>/`), gzipped when accepted."""
    *folders, name = relpath.split("/")
    path = STATIC.joinpath(*folders, name)
    if not name or name.startswith(".") or path.suffix not in TYPES or not path.is_file():
        raise NotFound("File not found.")
    raw, packed, etag = load(relpath)
    zipped = "gzip" in request.headers.get("Accept-Encoding", "")
    response = Response(packed if zipped else raw, 200, content_type=TYPES[path.suffix])
    if zipped:
        response.headers["Content-Encoding"] = "gzip"
    response.headers["Vary"] = "Accept-Encoding"
    response.set_etag(etag + ("-gz" if zipped else ""))
    response.headers["Cache-Control"] = "public, max-age=86400"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return await response.make_conditional(request)
