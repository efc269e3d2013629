"""The operator console's sign-in, overview and audit log (operations.md, "Operator console").

    GET/POST /operator/login   label "Operator token", button "Sign in"
    POST     /operator/logout
    GET      /operator         what needs the operator: sign-ups waiting, jobs, engines, mail
    GET      /operator/audit   every operator action, newest first

Changes made through the operator API (`/operator/v1`, `genservice admin`) are audited too,
as "operator API" with the route and the answer's status (`audit_operator_api`).

A wrong token gets the same 401 page whatever was typed; attempts are throttled per client
address like logins (429 page with Retry-After), and refused ones are audited.
"""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.clock import parse_iso
from service.console import ABSOLUTE
from service.http import browser
from service.http.auth import constant_time_equal, node
from service.http.operator_session import (OPERATOR_COOKIE, address, audit, clear_operator_cookie, console_page,
                                           current_operator, set_operator_cookie, show)
from service.http.pages import render
from service.http.routes.operator_console_orgs import whole_arg
from service.storage import console as sql

bp = Blueprint("operator_console", __name__)

BAD_TOKEN = "That is not the operator token."
STUCK_QUEUED_S = 600.0  # queued this long with no start: shown as stuck


def safe_console_next(value: str | None) -> str:
    target = browser.safe_next(value)
    return target if target == "/operator" or target.startswith("/operator/") else "/operator"


def login_form(status: int = 200, error: str | None = None, next_path: str = "/operator", headers=None):
    return render("operator_login.html", status, headers, title="Operator sign-in", error=error,
                  next_path=next_path, operator=None, here=request.path)


@bp.get("/operator/login")
@hide
async def login_page():
    if current_operator() is not None:
        return redirect("/operator", 303)
    return login_form(next_path=safe_console_next(request.args.get("next")))


def _throttle() -> None:
    """One attempt from the client address's buckets (shared with logins), or the 429 page."""
    svc, key = node(), address()
    wait = max(svc.login_by_address.retry_after("ip:" + key), svc.login_by_account.retry_after("operator:" + key))
    if wait:
        browser.too_many(wait, "sign-in attempts")
    svc.login_by_address.take("ip:" + key)
    svc.login_by_account.take("operator:" + key)


@bp.post("/operator/login")
@hide
@browser.csrf_protected
async def login():
    form = await request.form
    next_path = safe_console_next(form.get("next"))
    _throttle()
    token = form.get("token", "").strip()
    expected = node().settings.operator_token or ""
    if not token or not expected or not constant_time_equal(token, expected):
        await node().console.audit("unknown", address(), "sign_in_refused")
        return login_form(401, BAD_TOKEN, next_path)
    svc = node()
    new = await svc.console.start_session("operator token", address(), request.cookies.get(OPERATOR_COOKIE),
                                          expected)
    await svc.console.audit("operator token", address(), "sign_in")
    resp = redirect(next_path, 303)
    set_operator_cookie(resp, new, int(ABSOLUTE))
    return resp


@bp.post("/operator/logout")
@hide
@console_page
async def logout():
    """Ends the console session; a listed person signs out of their own login as well (by
    who is signed in, not by which cookies came: a dead console cookie outlives its session)."""
    await audit("sign_out")
    token = request.cookies.get(OPERATOR_COOKIE)
    person = browser.session_token()
    operator = current_operator()  # `console_page` let only a signed-in operator in
    as_person = operator is not None and operator.binding.startswith("p:")
    if token:
        await node().console.end_session(token, node().settings.operator_token or "")
    if as_person and person:
        await node().sessions.end_session(person)
    resp = redirect("/operator/login", 303)
    clear_operator_cookie(resp)
    if as_person:
        resp.delete_cookie(browser.SESSION_COOKIE, path="/", httponly=True, samesite="Lax")
    return resp


def stuck(job: dict, now: float) -> bool:
    """Queued for long with no start, or rendering past its model's timeout (the job's
    deadline should have failed it: something is wrong)."""
    if job["status"] == "queued":
        return now - parse_iso(job["created_at"]) > STUCK_QUEUED_S
    model = node().generation.model_for(job["id"], job["model"])
    timeout = model.timeout_s if model is not None else 600
    return bool(job["started_at"]) and now - parse_iso(job["started_at"]) > timeout + 60


def servers_down() -> int:
    return sum(1 for pool in node().engines.pools.values() for s in pool.servers if s.down and not s.retired)


@bp.get("/operator")
@hide
@console_page
async def overview():
    svc = node()
    now = svc.clock.now()
    figures = sql.counts(svc.store)
    jobs = sql.open_jobs(svc.store)
    figures["stuck"] = sum(1 for j in jobs if stuck(j, now))
    figures["servers_down"] = servers_down()
    return show("operator_overview.html", title="Overview", f=figures, reload=svc.console.last_reload)


@bp.get("/operator/audit")
@hide
@console_page
async def audit_log():
    rows = sql.audit_page(node().store, whole_arg("before", 2**63 - 1))  # SQLite's largest INTEGER
    more = len(rows) == sql.PAGE
    return show("operator_audit.html", title="Audit log", rows=rows, next_before=rows[-1]["seq"] if more else None)


@bp.after_app_request
async def audit_operator_api(response):
    """A change the operator API made (a write method answered below 400) goes to the audit
    log; the catalog reload writes its own entry with its outcome."""
    if (request.path.startswith("/operator/v1/") and request.method not in ("GET", "HEAD", "OPTIONS")
            and response.status_code < 400 and request.path != "/operator/v1/catalog/reload"):
        rule = request.url_rule.rule if request.url_rule is not None else request.path
        await node().console.audit("operator API", address(), f"{request.method} {rule}", request.path,
                                   str(response.status_code))
    return response
