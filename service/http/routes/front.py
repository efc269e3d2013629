"""`GET /`: the node's front door. A browser gets a page (what this node is, sign up or log
in, the models it serves, the API reference); an API client gets a small JSON index.

`GET /docs`: the interactive API reference, swagger-ui (vendored under static/vendor/, no
CDN) reading `/v1/openapi.json`. `GET /favicon.ico`: the site's icon.
"""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import hide

from service.http.auth import node
from service.http.pages import render
from service.http.routes.dash_static import serve_file

bp = Blueprint("front", __name__)

VIEWER = "swagger-ui-5.35.0"  # the folder under static/vendor/ (its LICENSE and NOTICE with it)


def wants_html() -> bool:
    """A browser: Accept prefers text/html over JSON (curl's `*/*` gets JSON)."""
    return request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html"


def models_shown() -> list[dict]:
    """The catalog's models, engine-served ones first, each with whether it runs now."""
    svc = node()
    rows = [{"id": m.id, "capability": m.capability, "description": m.description,
             "engine": m.engine is not None, "available": svc.runnable(m)} for m in svc.catalog.models]
    return sorted(rows, key=lambda r: not r["engine"])  # stable: catalog order within each group


def only_builtin_images(models: list[dict]) -> bool:
    """Whether images come from built-ins only, no engine configured for them (the procedural
    model draws shapes from the prompt, it does not picture it)."""
    image = [m for m in models if m["capability"] == "image.generate"]
    return any(m["available"] for m in image) and not any(m["engine"] for m in image)


@bp.get("/")
@hide
async def front():
    settings = node().settings
    if not wants_html():
        return {
            "service": "genservice",
            "api": "/v1",
            "openapi": "/v1/openapi.json",
            "docs": "/docs",
            "capabilities": "/v1/generation/capabilities",
            "models": "/v1/generation/models",
            "health": "/healthz",
            "dashboard": "/studio",
        }
    models = models_shown()
    return render("front.html", title="Welcome", models=models, only_builtin_images=only_builtin_images(models),
                  signup_open=settings.signup == "open", base_url=settings.public_base_url)


@bp.get("/docs")
@hide
async def docs():
    return render("docs.html", title="API reference", viewer=VIEWER,
                  signup_open=node().settings.signup == "open")


@bp.get("/favicon.ico")
@hide
async def favicon():
    return await serve_file("favicon-1.ico")
