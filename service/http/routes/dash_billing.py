"""Billing page (`/billing`, the default top-up success and cancel URL): balance with held
credits and lots with their expiry, usage per project per day (an SVG chart drawn here, a
table and a CSV download), the ledger with paging, open holds, top-up history, a top-up form
bounded by the quote (through the configured payment provider's checkout) and the
low-balance threshold. Every read is the one the `/v1/billing/*` routes make; the writes go
through the same payment facade and balance actor.

Usage covers the last 90 days on the page (the CSV: everything)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from quart import Blueprint, Response, redirect, request
from quart_schema import hide

from service.clock import iso
from service.errors import ActorGone, ApiError, AskTimeout, Unavailable
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.dashboard import projects, show
from service.http.pages import PageError
from service.http.responses import LedgerEntry, UsageRow
from service.http.routes.billing import threshold_uc
from service.http.routes.topups import topup_view
from service.digits import ascii_int
from service.payments import facade
from service.payments.pricing import MAX_CREDITS
from service.storage import billing as sql
from service.storage import topups as topups_sql
from service.views import billing_lines

bp = Blueprint("dash_billing", __name__)

LEDGER_PAGE = 50
DAYS = 90
BAD_OFFSET = "The ledger offset must be a whole number."


COLORS = ("#0b5cad", "#c05600", "#2e7d32", "#8e24aa", "#6b6b6b")  # distinct at 3:1 on white


def chart(rows: list[UsageRow], today: datetime, names: dict[str, str]) -> dict:
    """Daily credits over the last DAYS days, stacked per project (the four largest, then
    "Other"), as SVG bar geometry: no script, no library."""
    totals: dict[str, Decimal] = {}
    for r in rows:
        totals[r["project_id"]] = totals.get(r["project_id"], Decimal(0)) + Decimal(r["credits"])
    ranked = sorted(totals, key=lambda p: -totals[p])
    series = ranked[:4] + (["other"] if len(ranked) > 4 else [])
    group = {p: (p if p in ranked[:4] else "other") for p in ranked}
    per_day: dict[str, dict[str, Decimal]] = {}
    for r in rows:
        bucket = per_day.setdefault(r["day"], {})
        key = group[r["project_id"]]
        bucket[key] = bucket.get(key, Decimal(0)) + Decimal(r["credits"])
    days = [(today - timedelta(days=DAYS - 1 - i)).strftime("%Y-%m-%d") for i in range(DAYS)]
    top = max((sum(v.values()) for d, v in per_day.items() if d in days), default=Decimal(0)) or Decimal(1)
    bars = []
    for i, day in enumerate(days):
        y = 100.0
        for n, key in enumerate(series):
            value = per_day.get(day, {}).get(key, Decimal(0))
            if value:
                h = float(value / top * 100)
                y -= h
                bars.append({"x": i * 4, "y": y, "h": h, "day": day, "credits": f"{value:.2f}", "color": COLORS[n],
                             "name": names.get(key, "Other" if key == "other" else key)})
    legend = [{"name": names.get(k, "Other" if k == "other" else k), "color": COLORS[n],
               "credits": f"{sum(totals[p] for p in ranked if group[p] == k):.2f}"} for n, k in enumerate(series)]
    in_range = sum((sum(per_day.get(d, {}).values(), Decimal(0)) for d in days), Decimal(0))
    return {"bars": bars, "legend": legend, "top": f"{top:.2f}", "first": days[0], "last": days[-1],
            "total": f"{in_range:.2f}"}


async def synced(org_id: str) -> None:
    try:  # due lot expiries are in the ledger before it is read (as GET /v1/billing/ledger)
        await node().balances.sync(org_id, timeout=2.0)
    except (ActorGone, AskTimeout, Unavailable):
        pass


def ledger_offset() -> int:
    """`?offset=`: a whole number (negative counts as 0); anything else is the 400 page. Probe
    L11: a number past SQLite's integers was a 500."""
    raw = request.args.get("offset", "").strip() or "0"
    if len(raw) > 40 or not re.fullmatch(r"-?[0-9]+", raw):
        raise PageError(400, "Bad page address", BAD_OFFSET)
    return max(0, int(raw))


def ledger_page(org_id: str, offset: int) -> tuple[list[LedgerEntry], int, int]:
    """One page of the ledger; an offset past the end shows the last page."""
    store = node().store
    ledger, total = sql.ledger(store, org_id, project_id=None, since=None, until=None, limit=LEDGER_PAGE,
                               offset=min(offset, 2**62))
    if offset >= total > 0:
        offset = (total - 1) // LEDGER_PAGE * LEDGER_PAGE
        ledger, total = sql.ledger(store, org_id, project_id=None, since=None, until=None, limit=LEDGER_PAGE,
                                   offset=offset)
    return ledger, total, offset


async def billing_page(status: int = 200, **ctx):
    svc, org_id = node(), principal().org_id
    now = svc.clock.now()
    offset = ledger_offset()
    await synced(org_id)
    since = iso((datetime.fromtimestamp(now, UTC) - timedelta(days=DAYS)).timestamp())
    usage = sql.usage(svc.store, org_id, since)
    ledger, total, offset = ledger_page(org_id, offset)
    names = {p["id"]: p["name"] for p in projects()}
    topup = request.args.get("topup")
    row = topups_sql.get_in_org(svc.store, org_id, topup) if topup else None
    returned = topup_view(row) if row else None
    return show("billing.html", status, title="Billing", usage=usage, names=names,
                chart=chart(usage, datetime.fromtimestamp(now, UTC), names), ledger=ledger,
                ledger_lines=billing_lines.lines(ledger), total=total, offset=offset,
                page_size=LEDGER_PAGE, holds=sql.list_holds(svc.store, org_id, "held", 100),
                topups=[topup_view(t) for t in topups_sql.list_for_org(svc.store, org_id, 20)], quote=facade.quote(svc),
                provider=svc.payments is not None, settings=sql.settings(svc.store, org_id),
                returned=returned, checkout=request.args.get("checkout"), **ctx)


@bp.get("/billing")
@hide
@page("billing:read")
async def billing():
    return await billing_page()


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(value: str) -> str:
    """A text cell a spreadsheet shows as text: one that would start a formula (=, +, -, @,
    tab, CR) gets a leading apostrophe (OWASP's CSV injection advice). Probe L13: project
    names went into usage.csv as they were."""
    return "'" + value if value.startswith(FORMULA_START) else value


@bp.get("/billing/usage.csv")
@hide
@page("billing:read")
async def usage_csv():
    svc, org_id = node(), principal().org_id
    names = {p["id"]: p["name"] for p in projects()}
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["day", "project_id", "project", "jobs", "credits"])
    for r in sql.usage(svc.store, org_id, None):
        w.writerow([r["day"], r["project_id"], spreadsheet_text(names.get(r["project_id"], "")), r["jobs"],
                    r["credits"]])
    return Response(out.getvalue(), 200, content_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": 'attachment; filename="usage.csv"', "Cache-Control": "no-store"})


@bp.post("/billing/topups")
@hide
@page("billing:write")
@csrf_protected
async def topup():
    form = await request.form
    return await forms.once(form, lambda: start_topup(form), "/billing")


async def start_topup(form):
    p = principal()
    # ASCII digits only (`int` takes "١٠٠", "1_000" and "+5"); past the quote's range is its 422
    credits = ascii_int(form.get("credits", "").strip(), 10 * MAX_CREDITS)
    if credits is None:
        return await billing_page(422, error="Enter a whole number of credits.")
    try:
        created = await facade.create_topup(node(), p.org_id, p.user_id, credits)
    except ApiError as e:
        return await billing_page(e.status, error=e.message)
    return redirect(created.checkout_url, 303)


@bp.post("/billing/threshold")
@hide
@page("billing:write")
@csrf_protected
async def threshold():
    value = (await request.form).get("threshold", "").strip()
    try:
        uc = threshold_uc(json.dumps({"low_balance_threshold": value or None}).encode())
        await node().balances.settings_put(principal().org_id, uc)
    except ApiError as e:
        return await billing_page(e.status, error=e.message)
    forms.notify("Low-balance threshold saved.")
    return redirect("/billing#threshold", 303)
