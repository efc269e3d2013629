"""The Billing page's ledger as a person reads it: a job (or a product run) is one line,
"charged 1.00 credits", not its hold then its capture (which read as two charges, one of them
zero). The hold, capture and release entries stay as they are in `GET /v1/billing/ledger`
and its export; this only folds the rows of one page.

A job's entries add up to what it cost: the hold takes the estimate (negative), the capture
gives back what was not used, a release gives back all of it. So the charge is minus their sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from service.views.billing_shapes import LedgerEntry

JOB_KINDS = ("hold", "capture", "release")


def lines(rows: Sequence[LedgerEntry]) -> list[dict]:
    """Ledger rows (newest first, `ledger_view` shape) -> page lines, newest first: a job or
    run's rows fold into one line at the place of its newest row."""
    out: list[dict] = []
    groups: dict[tuple, dict] = {}
    for row in rows:
        owner = ("job", row["job_id"]) if row.get("job_id") else ("run", row["workflow_run_id"]) \
            if row.get("workflow_run_id") else None
        if owner is None or row["kind"] not in JOB_KINDS:
            out.append({**row, "what": row["kind"], "signed": signed(Decimal(row["amount"]))})
            continue
        line = groups.get(owner)
        if line is None:
            line = {**row, "kinds": set(), "total": Decimal(0), "owner": owner[0]}
            groups[owner] = line
            out.append(line)
        line["kinds"].add(row["kind"])
        line["total"] += Decimal(row["amount"])
        line["created_at"] = max(line["created_at"], row["created_at"])
    for line in groups.values():
        cost = -line.pop("total")
        kinds = line.pop("kinds")
        if "capture" in kinds:
            line["what"], line["signed"] = f"charged {cost:.2f} credits", signed(-cost)
        elif "release" in kinds:
            line["what"], line["signed"] = "nothing charged (held credits released)", signed(-cost)
        else:
            line["what"], line["signed"] = f"{cost:.2f} credits held while it runs", signed(-cost)
    return out


def signed(amount: Decimal) -> str:
    """An amount with its sign and unit: "+100.00 credits", "−1.00 credits", "0.00 credits"."""
    if amount > 0:
        return f"+{amount:.2f} credits"
    if amount < 0:
        return f"−{-amount:.2f} credits"
    return "0.00 credits"
