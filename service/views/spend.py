"""Spend-limit fields of projects and API keys, added to their response objects.

Read from the balance actor's committed rows (`service.storage.spend`): a figure changes in
the same commit as the hold that moves it, so a response never shows a hold without it.
"""

from __future__ import annotations

from service.credits.limits import month_of
from service.money import fmt, to_uc
from service.storage import spend as sql


def projects(store, org_id: str, views: list[dict], now: float) -> list[dict]:
    fields = sql.project_fields(store, org_id, month_of(now))
    for v in views:
        v.update(fields.get(v["id"], sql.PROJECT_NONE))
    return views


def left_this_month(store, org_id: str, project_id: str, now: float) -> str | None:
    """What the project's monthly limit still allows (never below 0.00), or None: no limit."""
    f = sql.project_fields(store, org_id, month_of(now)).get(project_id)
    if f is None or f["monthly_spend_limit"] is None:
        return None
    left = max(to_uc(f["monthly_spend_limit"]) - to_uc(f["month_spent"]), 0)
    return fmt(left)


def keys(store, org_id: str, views: list[dict]) -> list[dict]:
    fields = sql.key_fields(store, org_id)
    for v in views:
        v.update(fields.get(v["id"], sql.KEY_NONE))
    return views
