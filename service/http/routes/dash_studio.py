"""Studio (`/studio`): pick a capability and model from the catalog, see the chosen tier's
price, submit a job with `source` studio, and follow it in the output pane beside the form.

The form only offers what the catalog offers and this node can run (available models; the
others are listed, disabled). Its selects re-render the form through htmx (`/studio/form`) so
the price follows the choice; without script the "Update price" button does the same. A
submit goes through the same facade as `POST /v1/generation/capabilities/{id}` (plan ->
active limit -> submit), so a page and the API refuse the same things with the same
messages. Through htmx (Generate, Ctrl/Cmd+Enter) the answer is the output pane: the job's
section, which follows `/studio/jobs/{id}/events`, or the refusal in plain words with its
status and what to do; without script the post redirects to the job's own page, and a
refusal shows the form again (a 402 with the balance and a link to top up).
"""

from __future__ import annotations

import io
import json
from typing import Any, Mapping, Sequence
from urllib.parse import urlencode

import trio

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.assets.files import ObjectMissing
from service.assets.scopes import scope_of
from service.catalog.request import SubmitRequest
from service.errors import ApiError, InsufficientCredits, NotFound
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.responses import Estimate
from service.http.routes import dash_gallery
from service.http.dashboard import current_project, show, session_still_allowed, signed
from service.machines import JOB
from service.storage import billing as billing_sql
from service.storage import generation as gen_sql
from service.views import spend, studio_api
from service.views.shapes import JobStatus
from service.http.topics import job_stream, respond

bp = Blueprint("dash_studio", __name__)

ASSET_CHOICES = 50


def catalog() -> list[dict]:
    """Capabilities with at least one available model, each keeping only available models."""
    out = []
    for cap in node().generation.capabilities_view():
        models = [m for m in cap["models"] if m["available"]]
        if models:  # the picker lists the others too, disabled, so a person sees what exists
            out.append({**cap, "models": models, "all_models": cap["models"]})
    return out


def choose(args) -> dict:
    """The form's state from its fields: unknown or missing choices fall back to the first offer."""
    caps = catalog()
    cap = next((c for c in caps if c["id"] == args.get("capability")), caps[0] if caps else None)
    if cap is None:
        return {"caps": [], "cap": None}
    model = next((m for m in cap["models"] if m["id"] == args.get("model")), cap["models"][0])
    pick = lambda name, options: args.get(name) if args.get(name) in options else (options[0] if options else None)  # noqa: E731
    durations = [str(d) for d in model["durations"]]
    return {
        "caps": caps, "cap": cap, "model": model,
        "aspect_ratio": pick("aspect_ratio", cap["aspect_ratios"]),
        "resolution": pick("resolution", model["resolutions"]),
        "duration": pick("duration", durations), "durations": durations,
        "prompt": args.get("prompt", ""),
        "inputs": {slot["name"]: args.get("input_" + slot["name"], "") for slot in model["inputs"]},
    }


def request_of(state: dict) -> SubmitRequest:
    """The form's settings as a submit request (a field left empty: the model's default)."""
    duration = state["duration"]
    inputs = {slot: [v] for slot, v in state["inputs"].items() if v}
    return SubmitRequest(
        model=state["model"]["id"], prompt=state["prompt"] if state["prompt"].strip() else None,
        aspect_ratio=state["aspect_ratio"] or None, resolution=state["resolution"] or None,
        duration=(float(duration) if "." in duration else int(duration)) if duration else None,
        inputs=inputs or None,
    )


def price(state: dict) -> Estimate | None:
    if state["cap"] is None:
        return None
    try:
        return node().generation.estimate(request_of(state), capability=state["cap"]["id"])
    except ApiError:
        return None


def assets_for(project_id: str) -> list[dict]:
    rows = gen_sql.list_assets(node().store, project_id, ASSET_CHOICES)
    return [{**r, "link": signed(r["id"])} for r in rows]


def studio_page(state: dict, status: int = 200, error: str | None = None, short: bool = False, fragment=False,
                **extra):
    project = current_project()
    template = "studio_form.html" if fragment else "studio.html"
    svc = node()
    left = spend.left_this_month(svc.store, principal().org_id, project["id"], svc.clock.now())
    queue = svc.generation.queues.view(state["model"]["id"]) if state.get("model") else None
    if not fragment:  # "My generations" under the form
        extra = {**dash_gallery.gallery(request.args, "studio"), **extra}
    return show(template, status, title="Studio", state=state, price=price(state), error=error, short=short,
                assets=assets_for(project["id"]), project=project, project_left=left, queue=queue, **extra)


@bp.get("/studio")
@hide
@page("generation:read")
async def studio():
    return studio_page(choose(request.args))


@bp.get("/studio/form")
@hide
@page("generation:read")
async def studio_form():
    """The form alone (htmx swaps it in when a choice changes, so the price follows)."""
    return studio_page(choose(request.args), fragment=True)


@bp.post("/studio")
@hide
@page("generation:write")
@csrf_protected
async def submit():
    form = await request.form
    if form.get("update"):  # "Update price" without script: the form again, nothing sent
        return studio_page(choose(form))
    response = await forms.once(form, lambda: submit_job(form), "/studio")
    if not htmx() or response.status_code != 303:
        return response
    # Generate through htmx: the output pane follows the job (the page stays; a repeat of the
    # same form_token shows the job the first post made)
    where = response.headers["Location"]
    job = await job_view(job_or_404(where.rsplit("/", 1)[1])) if where.startswith("/studio/jobs/") else None
    if job is None:
        return pane(409, {"title": "Already sent", "message": forms.ALREADY_SENT, "todo": "Wait for the first one to show here.",
                          "balance": None, "link": None})
    return pane(200, None, job)


def htmx() -> bool:
    return bool(request.headers.get("HX-Request"))


def pane(status: int, error: dict | None, job: dict | None = None):
    """The output pane alone (htmx swaps it in), with a fresh form token out of band."""
    return show("studio_pane.html", status, pane_error=error, job=job, fresh_token=True)


def plain_error(status: int, message: str) -> dict:
    """A refused submit in plain words, with what to do about it."""
    if status == 402:
        bal = billing_sql.balance(node().store, principal().org_id, node().clock.now())
        return {"title": "Not enough credits", "message": message, "balance": bal["available"],
                "todo": "Top up, or pick a lower resolution or a shorter duration.", "link": ("/billing#top-up", "Top up credits")}
    if status in (409, 503):
        return {"title": "The model cannot take this job now", "message": message, "balance": None,
                "todo": "Pick another model, or try again in a minute.", "link": None}
    if status == 429:
        return {"title": "Too many jobs at once", "message": message, "balance": None,
                "todo": "Wait for a running job to finish (or cancel one), then generate again.", "link": ("/history", "See running jobs")}
    return {"title": "This cannot be generated as set", "message": message, "balance": None,
            "todo": "Change the setting named above (a lower resolution, a required input, a prompt) and generate again.", "link": None}


async def submit_job(form):
    state = choose(form)
    if state["cap"] is None:
        if htmx():
            return pane(409, plain_error(409, "No model can run on this node right now."))
        return studio_page(state, 409, "No model can run on this node right now.")
    gen, p, project = node().generation, principal(), current_project()
    try:
        plan = gen.plan(p.org_id, project["id"], capability=state["cap"]["id"], request=request_of(state))
        gen.check_active_limit(p.org_id)
        out = await gen.submit(plan, org_id=p.org_id, project_id=project["id"], source="studio")
    except InsufficientCredits as e:
        if htmx():
            return pane(402, plain_error(402, e.message))
        return studio_page(state, 402, e.message, short=True)
    except ApiError as e:
        if htmx():
            return pane(e.status, plain_error(e.status, e.message))
        return studio_page(state, e.status, e.message)
    return redirect(f"/studio/jobs/{out['request_id']}", 303)


TEXT_SHOWN = 20_000  # characters of a text output shown in place (the whole file is a download)


async def texts_of(outputs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The text outputs' first characters (shown in the pane like an image is), by output
    id: read through the asset store in a worker thread (an object store's fetch must not
    block the event loop), at most 4 bytes a character, decoded as a text file is opened."""
    files, store = node().generation.files, node().store
    rows = [gen_sql.get_asset(store, o["id"]) for o in outputs if o["content_type"].startswith("text/")]
    wanted = [(r["id"], r["sha256"], scope_of(r)) for r in rows if r is not None and r.get("sha256")]
    if not wanted:
        return {}

    def read() -> dict[str, str]:
        texts: dict[str, str] = {}
        for asset_id, sha, scope in wanted:
            try:
                data = files.read_bytes(sha, 4 * TEXT_SHOWN, scope)
            except (OSError, ObjectMissing):
                continue
            with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace") as f:
                texts[asset_id] = f.read(TEXT_SHOWN)
        return texts

    return await trio.to_thread.run_sync(read)


def job_or_404(job_id: str) -> JobStatus:
    status = node().generation.status(job_id, principal().org_id)
    if status is None:
        raise NotFound("Generation request not found.")
    return status


async def job_view(status: JobStatus) -> dict:
    """The status object plus what a page shows: signed output links, whether the hold was
    released, the settings it ran with, its timings and a link to run them again."""
    store = node().store
    texts = await texts_of(status["outputs"])
    outputs = [{**o, "link": signed(o["id"]), "text": texts.get(o["id"])} for o in status["outputs"]]
    hold = billing_sql.hold_status_of_job(store, status["request_id"]) \
        if status["status"] in JOB.final and status["status"] != "completed" else None
    row = gen_sql.get_job(store, status["request_id"]) or {}
    params = json.loads(row.get("params") or "{}")
    again = {"capability": status["capability"], "model": status["model"], "prompt": row.get("prompt") or ""}
    for name in ("aspect_ratio", "resolution", "duration"):
        if params.get(name) is not None:
            again[name] = str(params[name])
    for slot, ids in (params.get("inputs") or {}).items():
        if ids:
            again["input_" + slot] = ids[0]
    # a job that ends failed, canceled or flagged never captures its hold: the actor releases
    # it right after the final status (it may still read "held" for a moment)
    released = hold is not None and hold != "captured"
    queue = node().generation.queues.view(status["model"]) if status["status"] == "queued" else None
    api = studio_api.snippets(node().generation.base_url, status, row.get("prompt"), params)
    return {**status, "outputs": outputs, "released": released, "queue": queue, "api": api,
            "final": status["status"] in JOB.final, "prompt": row.get("prompt"), "params": params,
            "started_at": row.get("started_at"), "again": "/studio?" + urlencode(again)}


@bp.get("/studio/jobs/<job_id>")
@hide
@page("generation:read")
async def job_page(job_id: str):
    job = await job_view(job_or_404(job_id))
    return show("studio_job.html", title=f"Job {job_id[:8]}", job=job)


@bp.get("/studio/jobs/<job_id>/events")
@hide
@page("generation:read")
async def job_events(job_id: str):
    """The API's job stream (`/v1/generation/requests/{id}/events`) for the browser session."""
    job_or_404(job_id)
    return respond(job_stream(job_id, principal().org_id, session_still_allowed("generation:read")))


@bp.post("/studio/jobs/<job_id>/cancel")
@hide
@page("generation:write")
@csrf_protected
async def cancel(job_id: str):
    try:
        await node().generation.cancel(principal().org_id, job_id)
    except ApiError as e:
        job = await job_view(job_or_404(job_id))
        if htmx():
            return show("job_detail.html", e.status, job=job, error=e.message)
        return show("studio_job.html", e.status, title="Job", job=job, error=e.message)
    if htmx():  # from Studio's output pane: the job's section again, in place
        return show("job_detail.html", job=await job_view(job_or_404(job_id)))
    forms.notify("Job canceled.")
    return redirect(f"/studio/jobs/{job_id}", 303)


@bp.get("/studio/jobs/<job_id>/pane")
@hide
@page("generation:read")
async def job_pane(job_id: str):
    """A job in the output pane, opened from a tile of "My generations"."""
    return show("job_detail.html", job=await job_view(job_or_404(job_id)))
