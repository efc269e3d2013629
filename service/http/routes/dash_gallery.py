"""Studio's "My generations" (and the same grid on History): the project's recent jobs as
tiles, newest first, filtered by capability and project, loaded a page at a time as the
grid scrolls into view (htmx `revealed`); a tile opens the job in Studio's output pane (its
settings, "Use these settings again", downloads) or hides it from the grid.

Tiles show a thumbnail made once per distinct output image or video (`GET
/studio/thumbs/<asset>`: 320 px WebP of the image or the video's first frame, kept in the
file store and the `thumbnails` table), never the full-size output scaled down by the
browser. Sounds and texts show a labelled tile. Hiding keeps the job, its outputs and its ledger; the API still lists it.
"""

from __future__ import annotations

import hashlib
import uuid

import trio
from quart import Blueprint, Response, redirect, request
from quart_schema import hide

from service.assets.files import FileStore, ObjectMissing
from service.assets.scopes import scope_of
from service.errors import NotFound
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.dashboard import current_project, projects, show, signed
from service.media.thumbnail import CONTENT_TYPE, make_thumbnail
from service.storage import gallery as sql
from service.storage import generation as gen_sql

bp = Blueprint("dash_gallery", __name__)

CURSOR_MAX = 200
THUMBNAILED = ("image", "video")  # a video's tile shows its first frame


def chosen_project(value: str | None) -> dict:
    """The project asked for when it is one of the organization's live ones, else the current one."""
    for p in projects():
        if p["id"] == value and not p.get("is_archived"):
            return p
    return current_project()


def cursor_of(raw: str | None) -> tuple[str, str] | None:
    if not raw or len(raw) > CURSOR_MAX or "|" not in raw:
        return None
    created, _, job_id = raw.partition("|")
    return created, job_id


def gallery(args, mode: str) -> dict:
    """The grid's context: tiles of one page, the filters, the next page's address."""
    p = principal()
    project = chosen_project(args.get("gproject"))
    caps = [c["id"] for c in node().generation.capabilities_view()]
    capability = args.get("gcap") if args.get("gcap") in caps else ""
    rows = sql.page(node().store, p.org_id, project["id"], capability or None, cursor_of(args.get("before")))
    more = None
    if len(rows) == sql.PAGE:
        last = rows[-1]
        more = {"gproject": project["id"], "gcap": capability, "before": f"{last['created_at']}|{last['id']}",
                "mode": mode}
    tiles = [{**r, "link": signed(r["asset_id"]) if r["asset_id"] else None} for r in rows]
    return {"tiles": tiles, "g_project": project, "g_capability": capability, "g_caps": caps, "g_more": more,
            "g_mode": mode}


@bp.get("/studio/gallery")
@hide
@page("generation:read")
async def gallery_page():
    """One page of tiles (the grid's next page, or the grid again after a filter changed)."""
    mode = "history" if request.args.get("mode") == "history" else "studio"
    template = "gallery_tiles.html" if request.args.get("before") else "gallery.html"
    return show(template, **gallery(request.args, mode))


@bp.get("/studio/thumbs/<asset_id>")
@hide
@page("generation:read")
async def thumb(asset_id: str):
    """The asset's thumbnail, made on its first view and stored; an asset of another
    organization, or not an image, is 404."""
    svc, p = node(), principal()
    rows = gen_sql.assets_in_org(svc.store, p.org_id, [asset_id])
    if not rows or rows[0]["kind"] not in THUMBNAILED:
        raise NotFound("Thumbnail not found.")
    sha = rows[0]["sha256"]
    made = sql.thumbnail(svc.store, sha)
    body = None if made is None else await trio.to_thread.run_sync(stored, svc.generation.files, made["thumb_sha256"],
                                                                   made["size_bytes"])
    if body is None:  # never made, or its bytes left the store
        pixels = (rows[0].get("width") or 0) * (rows[0].get("height") or 0)
        async with svc.generation.decodes.slot(p.org_id, pixels):  # a large decode waits its turn
            made = await make(sha, rows[0]["kind"], scope_of(rows[0]))
        body = await trio.to_thread.run_sync(stored, svc.generation.files, made["thumb_sha256"], made["size_bytes"])
        if body is None:
            raise NotFound("Thumbnail not found.")
    response = Response(body, 200, content_type=CONTENT_TYPE)
    response.headers["Cache-Control"] = "private, max-age=31536000, immutable"  # an asset's bytes never change
    return response


def stored(files: FileStore, sha: str, size: int) -> bytes | None:
    """A stored thumbnail's bytes through the asset store (no copy left on the node's disk);
    None when it is not there. Thumbnails are node-wide objects (scope None): the node serves
    them itself, never with the object's times. A worker thread."""
    try:
        return files.read_bytes(sha, size)
    except ObjectMissing:
        return None


async def make(sha: str, kind: str, scope: str | None) -> dict:
    svc = node()
    files = svc.generation.files
    name = f"thumb-{uuid.uuid4()}"
    tmp = files.upload_temp(name)
    def made_here() -> tuple[int, int, str, int]:  # decode, encode and hash: one worker thread
        # a decoder reads a file (a video's, ffmpeg): an object store's source is fetched
        # into scratch that goes with the block, or every thumbnailed asset stays on disk
        with files.fetched(sha, scope) as source:
            width, height = make_thumbnail(source, tmp, kind)
        return width, height, hashlib.sha256(tmp.read_bytes()).hexdigest(), tmp.stat().st_size

    try:
        width, height, digest, size = await trio.to_thread.run_sync(made_here)
        await trio.to_thread.run_sync(files.place, tmp, digest)
    finally:
        tmp.unlink(missing_ok=True)
    row = {"sha256": sha, "thumb_sha256": digest, "content_type": CONTENT_TYPE, "width": width, "height": height,
           "size_bytes": size, "created_at": svc.clock.iso_now()}
    await svc.store.write(lambda conn: sql.save_thumbnail(conn, row))
    return row


@bp.post("/studio/jobs/<job_id>/hide")
@hide
@page("generation:write")
@csrf_protected
async def hide_job(job_id: str):
    p = principal()
    if gen_sql.job_in_org(node().store, p.org_id, job_id) is None:
        raise NotFound("Generation request not found.")
    now = node().clock.iso_now()
    await node().store.write(lambda conn: sql.hide(conn, p.org_id, job_id, now))
    if request.headers.get("HX-Request"):
        return Response("", 200)  # the tile is swapped out
    return redirect("/studio#generations", 303)
