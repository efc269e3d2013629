"""The console's organizations: the list (search, status filter, "Approve") and one
organization (members, invitations with "Resend", projects, balance, lots, ledger, usage
chart, "Grant credits" with "Credits" and "Reason").

Forms post, then redirect back with a fixed note (no text from the request is echoed into a
note); a refused value re-renders the page with 400 and the field named.
"""

from __future__ import annotations



from quart import Blueprint, redirect, request
from quart_schema import hide

from service.clock import iso, parse_iso
from service.digits import ascii_int
from service.http.auth import node
from service.http.operator_session import audit, console_page, show
from service.http.pages import PageError
from service.money import fmt, plain_uc
from service.storage import accounts as accounts_sql
from service.storage import billing as billing_sql
from service.storage import console as sql
from service.storage.mail import STATUS_WHERE

bp = Blueprint("operator_console_orgs", __name__)

NOTES = {"approved": "Organization approved; its sign-up credits were granted.",
         "granted": "Credits granted.", "resent": "Invitation sent again with a new link."}
CREDITS_ERROR = "Credits: enter a number above zero with at most two decimals, such as 25 or 12.50."
REASON_ERROR = "Reason: say why these credits are granted (up to 500 characters)."
CHART_DAYS = 30


def offset_arg() -> int:
    return whole_arg("offset", 10_000_000) or 0


def whole_arg(name: str, cap: int) -> int | None:
    """A paging argument: capped, so that thousands of digits neither reach int() nor
    overflow SQLite's INTEGER."""
    return ascii_int(request.args.get(name, ""), cap)


@bp.get("/operator/organizations")
@hide
@console_page
async def organizations():
    svc = node()
    q = request.args.get("q", "").strip()[:200]
    status = request.args.get("status", "")
    if status and status not in STATUS_WHERE:
        raise PageError(400, "Unknown status", f"Status: choose one of {', '.join(STATUS_WHERE)}, or all.")
    offset = offset_arg()
    rows, total = sql.org_page(svc.store, search=q, status=status or None, offset=offset, now=svc.clock.now())
    return show("operator_orgs.html", title="Organizations", rows=rows, total=total, q=q, chosen=status,
                statuses=list(STATUS_WHERE), offset=offset, page=sql.PAGE, fmt=fmt,
                note=NOTES.get(request.args.get("note", "")))


def _org(org_id: str) -> dict:
    row = sql.org(node().store, org_id)
    if row is None:
        raise PageError(404, "Not found", "There is no organization with this id.")
    return row


def _detail(org_id: str, status: int = 200, **ctx):
    svc = node()
    org = _org(org_id)
    now = svc.clock.now()
    offset = offset_arg()
    ledger, ledger_total = billing_sql.ledger(svc.store, org_id, project_id=None, since=None, until=None,
                                              limit=sql.PAGE, offset=offset)
    since = iso(now - CHART_DAYS * 86400)[:10]
    days = {r["day"]: r["uc"] for r in sql.daily_usage(svc.store, org_id, since)}
    start = parse_iso(iso(now - (CHART_DAYS - 1) * 86400)[:10] + "T00:00:00Z")
    chart = []
    for i in range(CHART_DAYS):
        day = iso(start + i * 86400)[:10]
        chart.append((day, days.get(day, 0)))
    top = max((uc for _, uc in chart), default=0)
    return show("operator_org.html", status, title=org["name"], org=org,
                members=sql.members(svc.store, org_id), invitations=sql.invitations(svc.store, org_id),
                projects=accounts_sql.list_projects(svc.store, org_id),
                balance=billing_sql.balance(svc.store, org_id, now), ledger=ledger, ledger_total=ledger_total,
                offset=offset, page=sql.PAGE, chart=chart, top=top, fmt=fmt, days=CHART_DAYS,
                note=NOTES.get(request.args.get("note", "")), **ctx)


@bp.get("/operator/organizations/<org_id>")
@hide
@console_page
async def organization(org_id: str):
    return _detail(org_id)


@bp.post("/operator/organizations/<org_id>/approve")
@hide
@console_page
async def approve(org_id: str):
    org = _org(org_id)
    if org["approved_at"] is None:
        await node().accounts.approve_org(org_id)
        await node().balances.on_approved(org_id)
        await audit("organization.approve", org_id, org["name"])
    back = "/operator/organizations/" + org_id if (await request.form).get("from") == "detail" else \
        "/operator/organizations"
    return redirect(back + "?note=approved", 303)


def parse_credits(raw: str) -> int | None:
    """Plain decimal notation only (`25`, `12.50`): an exponent or a sign is a typo here."""
    return plain_uc(raw.strip(), zero_ok=False)


@bp.post("/operator/organizations/<org_id>/grants")
@hide
@console_page
async def grant(org_id: str):
    _org(org_id)
    form = await request.form
    raw, reason = form.get("credits", ""), form.get("reason", "").strip()
    values = {"credits": raw[:40], "reason": reason[:500]}
    uc = parse_credits(raw)
    if uc is None:
        return _detail(org_id, 400, grant_error=CREDITS_ERROR, bad_field="credits", values=values)
    if not reason or len(reason) > 500:
        return _detail(org_id, 400, grant_error=REASON_ERROR, bad_field="reason", values=values)
    lot = await node().balances.grant(org_id, billing_sql.new_id(), uc, source="promo", expires_at=None,
                                      reason=reason)
    await audit("credits.grant", org_id, f"{fmt(uc)} credits (lot {lot['id']}): {reason}")
    return redirect(f"/operator/organizations/{org_id}?note=granted", 303)


@bp.post("/operator/organizations/<org_id>/invitations/<invitation_id>/resend")
@hide
@console_page
async def resend(org_id: str, invitation_id: str):
    _org(org_id)
    out = await node().accounts.resend_invite(org_id, invitation_id)
    await audit("invitation.resend", org_id, f"invitation {invitation_id} to {out['email']}")
    return redirect(f"/operator/organizations/{org_id}?note=resent", 303)
