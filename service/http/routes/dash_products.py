"""Products pages: the catalog with availability and the reasons a product cannot run, a run
form generated from each product's inputs (text, number, choice, image, video, audio;
defaults filled; hidden inputs left out so their defaults apply), and a run page showing
its steps with their status and outputs as they finish (the run's event stream), with cancel.

A run starts through the same products facade as `POST /v1/workflows/products/{slug}/runs`,
so a page and the API refuse the same inputs with the same messages. An asset input is
picked from the chosen project's assets of that kind."""

from __future__ import annotations

import math
import re
from urllib.parse import urlencode

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.catalog import products as catalog_products
from service.catalog.products import list_products
from service.errors import ApiError, InsufficientCredits
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.dashboard import current_project, session_still_allowed, show, signed
from service.machines import RUN
from service.storage import generation as gen_sql
from service.views import run_graph
from service.http.topics import respond, run_stream


bp = Blueprint("dash_products", __name__)

MEDIA = ("image", "video", "audio")


def products():
    return node().products


@bp.get("/products")
@hide
@page("generation:read")
async def catalog():
    pr = products()
    return show("products.html", title="Products", items=[pr.product_view(p) for p in list_products(None)])


def form_page(slug: str, status: int = 200, values: dict | None = None, **ctx):
    pr = products()
    product = pr.product_view(pr.product_or_404(slug))
    kinds = {spec["type"] for spec in product["inputs"].values()} & set(MEDIA)
    assets = [r for r in gen_sql.list_assets(node().store, current_project()["id"], 100) if r["kind"] in kinds]
    return show("product.html", status, title=product["name"], product=product, values=values or {},
                assets=assets, **ctx)


@bp.get("/products/<slug>")
@hide
@page("generation:read")
async def product(slug: str):
    """The run form; `in_<name>` query fields prefill it ("Use these inputs again")."""
    return form_page(slug, values={k[3:]: v for k, v in request.args.items() if k.startswith("in_")})


def inputs_of(product: dict, form) -> dict:
    """Form fields -> the run's `inputs` as the API takes them; empty optional fields are left out."""
    out: dict = {}
    for name, spec in product["inputs"].items():
        if spec["hidden"]:
            continue
        raw = form.get("in_" + name, "").strip()
        if raw == "":
            continue
        out[name] = number(raw) if spec["type"] == "number" else raw
    return out


_NUMBER = re.compile(r"-?[0-9]{1,300}(\.[0-9]{1,300})?([eE][-+]?[0-9]{1,3})?")


def number(raw: str) -> int | float | str:
    """ASCII decimal only, finite, within a float's range; anything else stays the string, so the
    facade answers with the input's own 422 message. (`'٣'.isdigit()` is true, `float('1_0')` is
    10, and an integer past a float's range made the facade's finiteness check raise: a 500.)"""
    if not _NUMBER.fullmatch(raw):
        return raw
    value = float(raw)
    if not math.isfinite(value):
        return raw
    return int(raw) if raw.lstrip("-").isdigit() else value


@bp.post("/products/<slug>/runs")
@hide
@page("generation:write")
@csrf_protected
async def start(slug: str):
    form = await request.form
    return await forms.once(form, lambda: start_run(slug, form), f"/products/{slug}")


async def start_run(slug: str, form):
    pr, p = products(), principal()
    product = pr.product_view(pr.product_or_404(slug))
    values = {k[3:]: v for k, v in form.items() if k.startswith("in_")}
    project = current_project()
    try:
        view = await pr.start(p.org_id, p.user_id, slug, inputs_of(product, form), project)
    except InsufficientCredits as e:
        return form_page(slug, 402, values, error=e.message, short=True)
    except ApiError as e:
        return form_page(slug, e.status, values, error=e.message)
    return redirect(f"/products/runs/{view['id']}", 303)


def run_view(run_id: str) -> dict:
    run = products().get(principal().org_id, run_id)
    link = lambda outputs: [{**o, "link": signed(o["id"])} for o in outputs]  # noqa: E731
    again = {"in_" + k: v for k, v in (run["inputs"] or {}).items() if isinstance(v, (str, int, float))}
    definition = catalog_products.product(run["product"])
    needs = {st.key: list(st.needs) for st in definition.steps} if definition is not None else {}
    return {**run, "final": run["status"] in RUN.final, "again": f"/products/{run['product']}?" + urlencode(again),
            "graph": run_graph.layout(run["steps"], needs),
            "steps": [{**s, "outputs": link(s["outputs"])} for s in run["steps"]],
            "outputs": {name: link(outs) for name, outs in run["outputs"].items()}}


@bp.get("/products/runs/<run_id>")
@hide
@page("generation:read")
async def run_page(run_id: str):
    return show("product_run.html", title="Run", run=run_view(run_id))


@bp.get("/products/runs/<run_id>/events")
@hide
@page("generation:read")
async def run_events(run_id: str):
    """The API's run stream (`/v1/workflows/runs/{id}/events`) for the browser session."""
    org_id = principal().org_id
    products().get(org_id, run_id)  # 404 for a run of another organization
    return respond(run_stream(run_id, org_id, session_still_allowed("generation:read")))


@bp.post("/products/runs/<run_id>/cancel")
@hide
@page("generation:write")
@csrf_protected
async def cancel(run_id: str):
    try:
        await products().cancel(principal().org_id, run_id)
    except ApiError as e:
        return show("product_run.html", e.status, title="Run", run=run_view(run_id), error=e.message)
    forms.notify("Run canceled.")
    return redirect(f"/products/runs/{run_id}", 303)
