"""Spend limits of one organization's projects and API keys (pure: no trio, no SQL).

The credit book owns one `SpendLimits` and asks it beside the balance rule, in the same
decision, so a limit is exact under any concurrency as the balance is: a hold is placed
only if the project's month and the key's lifetime both still cover it (`check`), its
amount then counts against both (`add`), a release gives it back and a capture gives back
what it did not charge (`give_back`).

- A project's figure is per UTC calendar month of the service clock: a hold counts in the
  month it was placed; when the month changes the figures start again from zero, and a
  hold of an earlier month gives back nothing to the new one.
- A key's figure is for its whole life.
- The first refusal of a scope in a period stages one warning (event and mail, written
  with the batch): a project once per month, a key once; setting a limit re-arms it.

Every figure is kept for every project and key, limited or not, so the API shows what was
spent before a limit is set. Changed figures and limits are staged (`dirty_*`) for the
batch's write and read from storage by `load`.
"""

from __future__ import annotations

import time
from typing import Any

from service.errors import ApiError, SpendLimitReached
from service.money import MAX_UC, PLAIN, UC, fmt, plain_uc

PROJECT = "project"
API_KEY = "api_key"
MESSAGES = {PROJECT: "This project's monthly spend limit is reached.",
            API_KEY: "This API key's spend limit is reached."}


def parse_limit(value: object, field: str) -> int | None:
    """A limit as the API takes it: a decimal string with at most two decimals, "0" or more,
    or None (no limit); anything else is 400 `request.validation_failed` naming the field."""
    if value is None:
        return None
    uc = plain_uc(value, zero_ok=True) if isinstance(value, str) else None
    if uc is not None:
        return uc
    errors = [{"message": "Invalid spend limit", "key": field, "source": "body"}]
    if isinstance(value, str) and PLAIN.fullmatch(value):  # well formed, only too large
        raise ApiError(f"{field} must be at most {MAX_UC // UC} credits.",
                       {"field": field, "maximum": fmt(MAX_UC), "errors": errors},
                       code="request.validation_failed", status=400)
    raise ApiError(f"{field} must be a decimal string of credits with at most two decimals, \"0\" or more, "
                   "or null.", {"field": field, "errors": errors},
                   code="request.validation_failed", status=400)


def month_of(now: float) -> str:
    """The UTC calendar month of a service time, as `YYYY-MM` (the prefix of its ISO text)."""
    return time.strftime("%Y-%m", time.gmtime(now))


class SpendLimits:
    def __init__(self) -> None:
        self.month = ""
        self.limits: dict[tuple[str, str], int] = {}        # (scope, id) -> limit_uc
        self.notified: dict[tuple[str, str], str] = {}      # (scope, id) -> ISO time of its warning
        self.project_spent: dict[str, int] = {}             # this month
        self.key_spent: dict[str, int] = {}                 # ever
        self.begin("")

    def load(self, month: str, limits: list[dict[str, Any]], spent: list[dict[str, Any]]) -> None:
        """Stored limits (scope, scope_id, limit_uc, notified_at) and figures (scope,
        scope_id, period, spent_uc) of the organization; only this month's project figures
        count."""
        self.__init__()  # type: ignore[misc]  # a reload starts from nothing
        self.month = month
        for r in limits:
            key = (r["scope"], r["scope_id"])
            if r["limit_uc"] is not None:
                self.limits[key] = r["limit_uc"]
            if r["notified_at"] is not None:
                self.notified[key] = r["notified_at"]
        for r in spent:
            if r["scope"] == API_KEY:
                self.key_spent[r["scope_id"]] = r["spent_uc"]
            elif r["period"] == month:
                self.project_spent[r["scope_id"]] = r["spent_uc"]

    def begin(self, now_iso: str, month: str | None = None) -> None:
        """Open a batch: nothing staged; a new month starts the project figures at zero."""
        self.now_iso = now_iso
        if month is not None and month != self.month:
            self.month = month
            self.project_spent = {}
        self.dirty_spent: set[tuple[str, str]] = set()
        self.dirty_limits: set[tuple[str, str]] = set()
        self.warnings: list[tuple[str, str, str, str, str]] = []  # scope, id, limit, spent, when

    # -- the rules ---------------------------------------------------------------------------------
    def spent(self, scope: str, scope_id: str) -> int:
        return (self.project_spent if scope == PROJECT else self.key_spent).get(scope_id, 0)

    def check(self, project_id: str | None, key_id: str | None, amount: int) -> tuple[str, str, int, int] | None:
        """(scope, id, limit, spent) of the limit `amount` more would pass, the key's before
        the project's, or None. Nothing (a free job) passes no limit, even one lowered below
        what is already spent: it takes no figure anywhere, as under a limit of "0"."""
        if not amount:
            return None
        for scope, scope_id in ((API_KEY, key_id), (PROJECT, project_id)):
            if scope_id is None:
                continue
            limit = self.limits.get((scope, scope_id))
            if limit is not None:
                spent = self.spent(scope, scope_id)
                if spent + amount > limit:
                    return scope, scope_id, limit, spent
        return None

    def refuse(self, found: tuple[str, str, int, int], amount: int) -> SpendLimitReached:
        """The refusal of what `check` found; stages the scope's warning when it is the first
        of its period."""
        scope, scope_id, limit, spent = found
        self._warn(scope, scope_id, limit, spent)
        return SpendLimitReached(MESSAGES[scope], {"scope": scope, "limit": fmt(limit), "spent": fmt(spent),
                                                   "required": fmt(amount)})

    def add(self, project_id: str | None, key_id: str | None, amount: int) -> None:
        """A placed hold's amount counts against its project's month and its key."""
        if not amount:
            return
        if project_id is not None:
            self.project_spent[project_id] = self.project_spent.get(project_id, 0) + amount
            self.dirty_spent.add((PROJECT, project_id))
        if key_id is not None:
            self.key_spent[key_id] = self.key_spent.get(key_id, 0) + amount
            self.dirty_spent.add((API_KEY, key_id))

    def give_back(self, project_id: str | None, key_id: str | None, month: str, amount: int) -> None:
        """`amount` of a hold placed in `month` no longer counts (released, or not charged)."""
        if not amount:
            return
        if project_id is not None and month == self.month and project_id in self.project_spent:
            self.project_spent[project_id] -= amount
            self.dirty_spent.add((PROJECT, project_id))
        if key_id is not None and key_id in self.key_spent:
            self.key_spent[key_id] -= amount
            self.dirty_spent.add((API_KEY, key_id))

    def put(self, scope: str, scope_id: str, limit_uc: int | None) -> None:
        """Set (or with None remove) a limit; the scope's warning is armed again."""
        key = (scope, scope_id)
        if limit_uc is None:
            self.limits.pop(key, None)
        else:
            self.limits[key] = limit_uc
        self.notified.pop(key, None)
        self.dirty_limits.add(key)

    def view(self, scope: str, scope_id: str) -> dict[str, Any]:
        limit = self.limits.get((scope, scope_id))
        return {"scope": scope, "id": scope_id, "limit": fmt(limit), "spent": fmt(self.spent(scope, scope_id))}

    def _warn(self, scope: str, scope_id: str, limit: int, spent: int) -> None:
        key = (scope, scope_id)
        last = self.notified.get(key)
        if last is not None and (scope == API_KEY or last[:7] == self.month):
            return
        self.notified[key] = self.now_iso
        self.dirty_limits.add(key)
        self.warnings.append((scope, scope_id, fmt(limit), fmt(spent), self.now_iso))

    # -- what the batch writes -------------------------------------------------------------------
    def staged_spent(self) -> list[tuple[str, str, str, int]]:
        """(scope, id, period, spent_uc) of the figures this batch changed."""
        return [(scope, sid, self.month if scope == PROJECT else "", self.spent(scope, sid))
                for scope, sid in self.dirty_spent]

    def staged_limits(self) -> list[tuple[str, str, int | None, str | None]]:
        """(scope, id, limit_uc, notified_at) of the limits this batch changed."""
        return [(scope, sid, self.limits.get((scope, sid)), self.notified.get((scope, sid)))
                for scope, sid in self.dirty_limits]

    def state(self) -> dict[str, Any]:
        return {"month": self.month, "limits": dict(self.limits), "notified": dict(self.notified),
                "project_spent": {k: v for k, v in self.project_spent.items() if v},
                "key_spent": {k: v for k, v in self.key_spent.items() if v}}
