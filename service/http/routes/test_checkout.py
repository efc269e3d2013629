"""The built-in test payment provider's checkout (test mode only): a page of this node saying
what is being paid, with "Pay (test)" and "Cancel" buttons that do what a real provider's
checkout does, confirm the top-up (one `topup` lot) or expire it, then return to the top-up's
success or cancel URL. No money moves. Like a provider's page it needs no session, only the
link (the top-up's id); its two forms carry the page's CSRF token.
"""

from __future__ import annotations

from quart import Blueprint, redirect
from quart_schema import hide

from service.errors import NotFound
from service.http.auth import node
from service.http.browser import csrf_protected
from service.http.pages import render
from service.money import fmt
from service.payments import facade
from service.storage import topups as sql

bp = Blueprint("test_checkout", __name__)

ROUTE_MISSING = "The requested resource was not found."


def test_topup(topup_id: str) -> dict:
    """A top-up of the test provider, in test mode; 404 otherwise (the route does not exist)."""
    svc = node()
    row = sql.get(svc.store, topup_id)
    if row is None or row["provider"] != "test" or not svc.settings.test_mode:
        raise NotFound(ROUTE_MISSING)
    return row


@bp.get("/checkout/test/<topup_id>")
@hide
async def test_checkout_page(topup_id: str):
    row = test_topup(topup_id)
    amount = f"{row['amount_cents'] // 100}.{row['amount_cents'] % 100:02d} {row['currency'].upper()}"
    return render("checkout_test.html", title="Test checkout", topup=row, credits=fmt(row["credits_uc"]),
                  amount=amount)


@bp.post("/checkout/test/<topup_id>/pay")
@hide
@csrf_protected
async def pay(topup_id: str):
    row = test_topup(topup_id)
    if row["status"] == "pending":
        await facade.confirm_topup(node(), topup_id, f"test_{topup_id}")
    return redirect(row["success_url"], 303)


@bp.post("/checkout/test/<topup_id>/cancel")
@hide
@csrf_protected
async def cancel(topup_id: str):
    row = test_topup(topup_id)
    if row["status"] == "pending":
        await facade.expire_topup(node(), topup_id, f"test_{topup_id}")
    return redirect(row["cancel_url"], 303)
