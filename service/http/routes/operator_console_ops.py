"""The console's running parts: engines, jobs (with cancel), the catalog (with "Reload
catalog"), the mail outbox (with retry), and `POST /operator/v1/catalog/reload` for scripts.

Engines are read from the engine pools directly (servers, health, last error, jobs in
flight); the page re-reads itself every few seconds with htmx while it is open.
"""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.catalog.catalog import tier_label
from service.clock import iso
from service.http.auth import node
from service.http.errors import envelope
from service.http.operator_session import address, audit, console_page, current_operator, show
from service.http.pages import PageError
from service.http.routes.operator import operator
from service.http.routes.operator_console import stuck
from service.http.routes.operator_console_orgs import offset_arg
from service.money import fmt
from service.reload import reload_catalog
from service.storage import console as sql

bp = Blueprint("operator_console_ops", __name__)

NOTES = {"canceled": "Job canceled; its credits were released.", "retried": "Mail queued to be sent again.",
         "reloaded": "Catalog reloaded: new submits use it; running jobs keep what they started with."}
MAIL_STATES = ("waiting", "failed", "sent")
LINK_GONE = ("This mail carried a one-time link that was discarded when sending failed; it cannot be sent "
             "again. Ask the person to request a new link (or resend the invitation).")


@bp.get("/operator/engines")
@hide
@console_page
async def engines():
    svc = node()
    figures = sql.open_jobs_by_model(svc.store)
    starts = sql.start_times(svc.store, iso(svc.clock.now() - 86400))
    models = []
    for m in svc.catalog.models:
        if m.engine is None:
            continue
        pool = svc.engines.pools.get(m.id)
        models.append({"id": m.id, "backend": m.backend, "servers": list(pool.servers) if pool else None,
                       "concurrency": m.concurrency, "available": svc.runnable(m),
                       "jobs": figures.get(m.id, {"queued": 0, "rendering": 0}), "start_s": starts.get(m.id)})
    gate = svc.hook_gate
    hooks = {"url": svc.settings.engine_hooks_url or svc.settings.public_base_url, "gate": gate is not None,
             "running": gate is not None and gate.pid is not None, "starts": gate.children if gate else 0}
    return show("operator_engines.html", title="Engines", models=models, hooks=hooks)


@bp.get("/operator/jobs")
@hide
@console_page
async def jobs():
    svc = node()
    now = svc.clock.now()
    rows = sql.open_jobs(svc.store)
    for j in rows:
        j["stuck"] = stuck(j, now)
    only_stuck = request.args.get("stuck") == "1"
    if only_stuck:
        rows = [j for j in rows if j["stuck"]]
    return show("operator_jobs.html", title="Jobs", rows=rows, only_stuck=only_stuck, fmt=fmt,
                note=NOTES.get(request.args.get("note", "")))


@bp.post("/operator/jobs/<job_id>/cancel")
@hide
@console_page
async def cancel(job_id: str):
    job = sql.job(node().store, job_id)
    if job is None:
        raise PageError(404, "Not found", "There is no job with this id.")
    out = await node().generation.cancel(job["organization_id"], job_id)
    await audit("job.cancel", job_id, f"{job['model']} of {job['organization_id']}: {out.get('status')}")
    return redirect("/operator/jobs?note=canceled", 303)


def _catalog_page(status: int = 200, **ctx):
    svc = node()
    models = [{"id": m.id, "capability": m.capability, "backend": m.backend, "available": svc.runnable(m),
               "prices": [(tier_label(p.resolution, p.duration), fmt(p.uc)) for p in m.prices]}
              for m in svc.catalog.models]
    return show("operator_catalog.html", status, title="Catalog", models=models, source=svc.catalog.source,
                reload=svc.console.last_reload, note=NOTES.get(request.args.get("note", "")), **ctx)


@bp.get("/operator/catalog")
@hide
@console_page
async def catalog():
    return _catalog_page()


@bp.post("/operator/catalog/reload")
@hide
@console_page
async def reload_from_page():
    op = current_operator()
    outcome = await reload_catalog(node(), op.who if op else "unknown", address())
    if not outcome.ok:
        return _catalog_page(422)
    return redirect("/operator/catalog?note=reloaded", 303)


@bp.post("/operator/v1/catalog/reload")
@operator
async def reload_api():
    """200 {data: {models: [ids]}} once the file's catalog is in force; 422 with the reasons
    (`details.problems`) when it fails a check, the old catalog staying in force."""
    outcome = await reload_catalog(node(), "operator API", address())
    if not outcome.ok:
        return envelope(422, "request.validation_failed", "The catalog file was not loaded: " +
                        "; ".join(outcome.problems), {"problems": outcome.problems})
    return {"data": {"models": outcome.models}}


@bp.get("/operator/mail")
@hide
@console_page
async def mail():
    state = request.args.get("state", "")
    if state and state not in MAIL_STATES:
        raise PageError(400, "Unknown state", f"State: choose one of {', '.join(MAIL_STATES)}, or all.")
    offset = offset_arg()
    rows, total = sql.mail_page(node().store, state or None, offset)
    return show("operator_mail.html", title="Mail", rows=rows, total=total, state=state, states=MAIL_STATES,
                offset=offset, page=sql.PAGE, smtp=bool(node().settings.smtp_host),
                note=NOTES.get(request.args.get("note", "")))


@bp.post("/operator/mail/<mail_id>/retry")
@hide
@console_page
async def retry(mail_id: str):
    row = sql.mail(node().store, mail_id)
    if row is None:
        raise PageError(404, "Not found", "There is no mail with this id.")
    if row["state"] not in ("failed", "unknown"):
        raise PageError(409, "Conflict", "Only a mail that failed can be sent again.")
    if row["needs_link"] and not row["has_link"]:
        raise PageError(409, "Conflict", LINK_GONE)
    if not await node().console.retry_mail(mail_id):
        raise PageError(409, "Conflict", "Only a mail that failed can be sent again.")
    await audit("mail.retry", mail_id)
    return redirect("/operator/mail?state=waiting&note=retried", 303)
