"""Spend-limit fields of projects and API keys, added to their response objects.

Read from the balance actor's committed rows (`service.storage.spend`): a figure changes in
the same commit as the hold that moves it, so a response never shows a hold without it.
"""

from __future__ import annotations

from typing import Iterable

from service.credits.limits import month_of
from service.money import fmt, to_uc
from service.storage import spend as sql
from service.views import accounts
from service.views.shapes import ApiKey, KeySpend, Project, ProjectSpend


def project_figures(store, org_id: str, project_ids: Iterable[str], now: float) -> dict[str, ProjectSpend]:
    """project id -> its monthly limit and what it spent this UTC month."""
    fields = sql.project_fields(store, org_id, month_of(now))
    out: dict[str, ProjectSpend] = {}
    for i in project_ids:
        f = fields.get(i, sql.PROJECT_NONE)
        out[i] = {"monthly_spend_limit": f["monthly_spend_limit"], "month_spent": f["month_spent"]}
    return out


def key_figures(store, org_id: str, key_ids: Iterable[str]) -> dict[str, KeySpend]:
    """key id -> its limit and what it spent, ever."""
    fields = sql.key_fields(store, org_id)
    out: dict[str, KeySpend] = {}
    for i in key_ids:
        f = fields.get(i, sql.KEY_NONE)
        out[i] = {"spend_limit": f["spend_limit"], "spent": f["spent"]}
    return out


def projects(store, org_id: str, rows: list[dict], now: float) -> list[Project]:
    figures = project_figures(store, org_id, [r["id"] for r in rows], now)
    return [accounts.project(r, figures[r["id"]]) for r in rows]


def keys(store, org_id: str, rows: list[dict]) -> list[ApiKey]:
    figures = key_figures(store, org_id, [r["id"] for r in rows])
    return [accounts.api_key(r, figures[r["id"]]) for r in rows]


def left_this_month(store, org_id: str, project_id: str, now: float) -> str | None:
    """What the project's monthly limit still allows (never below 0.00), or None: no limit."""
    f = sql.project_fields(store, org_id, month_of(now)).get(project_id)
    if f is None or f["monthly_spend_limit"] is None:
        return None
    left = max(to_uc(f["monthly_spend_limit"]) - to_uc(f["month_spent"]), 0)
    return fmt(left)
