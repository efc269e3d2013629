"""Assets page (`/assets`): the chosen project's assets as a gallery (type, size, links:
signed URLs only), and an upload form that stores a file exactly as
`POST /v1/generation/uploads` does (same streaming parser, checks, messages and actor).

The upload body is streamed (never buffered whole): its CSRF token and `next` are text fields
of the multipart body (before the file in the form, so a browser sends them first), checked
once the body is read and before anything is stored; the Origin check comes first, as for
every form. No token travels in a URL. `next` (a path on this site) is where the upload
returns, with a notice: Studio's own upload form comes back to Studio, where the file can be
picked, and a refused file comes back there too with the reason beside the upload form."""

from __future__ import annotations

import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.errors import ApiError, BadRequest, Unprocessable
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import check_csrf_value, forged, page, safe_next, same_site_origin
from service.http.dashboard import current_project, show, signed
from service.http.pages import PageError
from service.http.routes.uploads import (FILE_TOO_BIG, MAX_FILE, TooLarge, _drain, asset_row, receive,
                                         upload_slot)
from service.storage import generation as sql

bp = Blueprint("dash_assets", __name__)

FORM_FIELDS = ("csrf_token", "next")  # the upload form's text fields, besides the file
NEXT_MAX = 100_000  # characters: Studio's `next` carries its form as it was (the prompt too)

SHOWN = 100


def assets_page(status: int = 200, **ctx):
    project = current_project()
    rows = [{**r, "link": signed(r["id"])} for r in sql.list_assets(node().store, project["id"], SHOWN)]
    return show("assets.html", status, title="Assets", assets=rows, project=project, **ctx)


@bp.get("/assets")
@hide
@page("generation:read")
async def assets():
    return assets_page()


@bp.after_request
async def close_if_unread(response):
    """As the API's upload: an answer sent before the body was read closes the connection."""
    from quart import g
    if request.path == "/assets/upload" and not g.get("upload_body_read"):
        response.headers["Connection"] = "close"
    return response


@bp.post("/assets/upload")
@hide
@page("generation:write")
async def upload():
    if not same_site_origin():
        await _drain()
        raise forged()
    p, gen = principal(), node().generation
    project = current_project()
    boundary = request.mimetype_params.get("boundary")
    asset_id = str(uuid.uuid4())
    temp = gen.files.upload_temp(asset_id)
    handed_over, back = False, "/assets"
    try:
        with upload_slot(p.org_id):  # the API's per-organization cap (429 past it)
            if request.mimetype != "multipart/form-data" or not boundary or not boundary.isascii():
                await _drain()
                raise BadRequest("The upload must be multipart/form-data with the file in the field 'file'.")
            got = await receive(boundary, temp, FORM_FIELDS, NEXT_MAX)
            wanted = got.fields.get("next")
            back = wanted if wanted and safe_next(wanted) == wanted else "/assets"  # refused: stay on Assets
            if not check_csrf_value(got.fields.get("csrf_token", "")):
                raise forged()
            if got.malformed or not got.file_seen or got.errors:
                raise BadRequest("Choose one file to upload.")
            if got.too_big:
                raise Unprocessable(FILE_TOO_BIG, {"max_bytes": MAX_FILE})
            info = await gen.inspect_upload(temp, got.declared_type, p.org_id)
            row = asset_row(asset_id, p.org_id, project["id"], info, got, gen.clock.iso_now())
            handed_over = True
            await gen.commit_upload(p.org_id, row, temp)
    except TooLarge:
        raise PageError(413, "Upload refused", "The request body is too large.", {"Connection": "close"}) from None
    except ApiError as e:
        if back.startswith("/studio"):  # Studio keeps its form; the reason shows by its upload form
            forms.notify(None, upload_error=e.message)
            return redirect(back, 303)
        return assets_page(e.status, error=e.message)
    finally:
        if not handed_over:
            temp.unlink(missing_ok=True)
    if back.startswith("/studio"):
        back = picked(back, row["kind"], asset_id)
    forms.notify(f"Uploaded {row['kind']} {info_text(row)}." + (" Pick it in the form." if back != "/assets" else ""))
    return redirect(back, 303)


def picked(back: str, kind: str, asset_id: str) -> str:
    """Studio's address with the new file chosen in the first input of its model that takes it."""
    parts = urlsplit(back)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    model = node().catalog.model(query.get("model", ""))
    wanted = query.pop("slot", None)  # the slot a file was dropped on (Studio's page script)
    takes = [s for s in model.slots if kind in s.kinds and s.count > 0] if model else []
    slot = next((s for s in takes if s.name == wanted), takes[0] if takes else None)
    if slot is None:
        return f"{parts.path}?{urlencode(query)}"
    query["input_" + slot.name] = asset_id
    return f"{parts.path}?{urlencode(query)}"


def info_text(row: dict) -> str:
    return f"({row['width']}×{row['height']})" if row.get("width") else f"({row['content_type']})"
