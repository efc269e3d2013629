"""History (`/history`): the project's merged runs feed (the same read as `GET /v1/runs`),
with the source filter, cursor paging and thumbnails, kept current by the project's event
stream (`/history/events`, the API's `GET /v1/events` for the browser session).

A job row links to its Studio page (settings, outputs, credits, timings, "use these settings
again"); a product run row to its run page. A bad cursor or source is the API's 422/400
message on a page."""

from __future__ import annotations

from typing import Any, Mapping

from quart import Blueprint, request
from quart_schema import hide

from service.views import run_feed
from service.views.shapes import SOURCES
from service.errors import ApiError
from service.http.auth import node
from service.http.browser import page
from service.http.dashboard import current_project, session_still_allowed, show
from service.http.pages import PageError
from service.http.routes import dash_gallery
from service.http.topics import project_stream, respond

bp = Blueprint("dash_history", __name__)

PAGE = 25


def thumb(item: Mapping[str, Any]) -> str | None:
    """The stored thumbnail of the row's first image output, if any (never the full image)."""
    outputs = item.get("outputs") or []
    if isinstance(outputs, dict):  # a product run: named outputs
        outputs = [o for group in outputs.values() for o in group]
    for o in outputs:
        if o.get("content_type", "").startswith("image/"):
            return f"/studio/thumbs/{o['id']}"
    return None


@bp.get("/history")
@hide
@page("generation:read")
async def history():
    source = request.args.get("source") or None
    if source is not None and source not in SOURCES:
        raise PageError(400, "Bad filter", "source must be one of api, studio, workflow.")
    cursor = request.args.get("cursor") or None
    project = current_project()
    try:
        feed = run_feed.page(node().products, project["id"], source, PAGE, cursor)
    except ApiError as e:
        raise PageError(e.status, "History", e.message) from None
    items = [{**i, "thumb": thumb(i)} for i in feed["items"]]
    events = "/history/events" + (f"?source={source}" if source else "")
    return show("history.html", title="History", items=items, total=feed["total"], next_cursor=feed["next_cursor"],
                source=source, sources=SOURCES, cursor=cursor, events=events, project=project,
                **dash_gallery.gallery(request.args, "history"))


@bp.get("/history/events")
@hide
@page("generation:read")
async def history_events():
    """Every job and run of the chosen project as it changes (docs/streams.md)."""
    source = request.args.get("source") if request.args.get("source") in SOURCES else None
    project_id = current_project()["id"]
    return respond(project_stream(project_id, source, session_still_allowed("generation:read"), PAGE))
