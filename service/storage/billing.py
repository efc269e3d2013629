"""SQL of credits: lots, holds, the ledger and billing settings (tables in `schema_billing`).

The balance actor (`service.actors.balance.actor`) is the only writer of these tables; it stages
one batch of row changes (`Writes`) and `persist` applies it inside one `Store.write`.
Read functions take the Store and compute from the DB at read time.

Lots (`credit_lots`)
    One grant of credits: `amount_uc` granted, `remaining_uc` not yet charged (captured) nor
    expired-away, `reserved_uc` the part of `remaining_uc` held by outstanding holds,
    `expired_uc` the part that expired (breakage). For a lot whose expiry the actor has
    processed (`expired_at` set): remaining - reserved - expired = 0, i.e. only the reserved
    part is still alive (a capture may charge it; a release returns it and it expires at
    once). A lot is spent soonest `expires_ts` first, no expiry last, ties by `created_at`
    then `id`.

Holds (`credit_holds`)
    A reservation of `amount_uc` for one job; `slices` is a JSON list ``[[lot_id, uc], ...]``
    of the exact amounts reserved from each lot, in spend order, fixed when the hold is
    placed. Capture of C <= amount charges the slices in order up to C and returns the
    rest; release returns every slice.

Ledger (`credit_ledger`, append-only: triggers refuse UPDATE and DELETE)
    One row per lot slice touched. Signed amounts are chosen so that at every commit

        Σ amount_uc of an organization's ledger = its `available`
        Σ amount_uc of one lot's rows = that lot's free part (remaining - reserved - expired)

    kind      amount                    when
    grant     +A                        a lot of A is granted
    hold      -s per slice              a hold reserves s from a lot (spending; negative)
    capture   +(s - c) per slice        the hold is captured; c of the slice is charged and
                                        the rest returned: 0.00 for a full capture
    release   +s per slice              the hold is released; the slice is returned
    expiry    -E                        a lot expires with E free; or the returned part of a
                                        slice of an already expired lot expires at once
    Σ ledger = Σ grants - Σ captured - Σ held - Σ expired = available.
    `grant_id` in the API is the lot's id; `project_id` is null for grants and expiries.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from service.credits.rules import available, is_due
from service.credits.rules import spend_key as lot_spend_key
from service.money import fmt
from service.storage import spend
from service.storage.events import emit
from service.storage.rows import Row, rows_in
from service.views.billing_shapes import Balance, BillingSettings, Hold, LedgerEntry, Lot, UsageRow

if TYPE_CHECKING:
    from service.storage.db import Store


HOLD_COLUMNS = ("id, organization_id, job_id, workflow_run_id, project_id, description, status, amount_uc, "
                "captured_uc, slices, created_at, settled_at")
HOLD_KEYED = HOLD_COLUMNS + ", api_key_id"  # the actor's inserts and loads: with the key (spend limits)
LOT_COLUMNS = ("id, organization_id, grant_id, source, amount_uc, remaining_uc, reserved_uc, expired_uc, "
               "expires_at, expires_ts, expired_at, reason, created_at")


_rng = random.Random(int.from_bytes(os.urandom(32), "big"))


def new_id() -> str:
    """A random (version 4) UUID string for lots and ledger entries; these ids are not
    secrets, so a seeded PRNG replaces the urandom call of uuid4 on the hot path."""
    h = "%032x" % ((_rng.getrandbits(128) & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48))
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def dump_slices(slices: list[tuple[str, int]]) -> str:
    """JSON of ``[[lot_id, uc], ...]``, formatted directly (it is on every hold's path): lot
    ids come from `new_id`, so they hold nothing JSON would escape."""
    return "[" + ",".join([f'["{lot_id}",{uc:d}]' for lot_id, uc in slices]) + "]"


def load_slices(text: str) -> list[tuple[str, int]]:
    return [(lot_id, int(uc)) for lot_id, uc in json.loads(text)]


# -- the writer's side -------------------------------------------------------------------------
class Writes:
    """Row changes of one actor batch, as tuples ready for executemany."""

    __slots__ = ("lot_inserts", "lot_updates", "hold_inserts", "hold_updates", "ledger", "settings",
                 "notices", "limits", "figures", "warnings")

    def __init__(self) -> None:
        self.lot_inserts: list[tuple[Any, ...]] = []
        self.lot_updates: list[tuple[Any, ...]] = []
        self.hold_inserts: list[tuple[Any, ...]] = []
        self.hold_updates: list[tuple[Any, ...]] = []
        self.ledger: list[tuple[Any, ...]] = []
        self.settings: tuple[Any, ...] | None = None
        self.notices: list[tuple[str, str, str]] = []
        self.limits: list[tuple[Any, ...]] = []    # spend limits (service.storage.spend)
        self.figures: list[tuple[Any, ...]] = []
        self.warnings: list[tuple[Any, ...]] = []

    def empty(self) -> bool:
        return not (self.lot_inserts or self.lot_updates or self.hold_inserts or self.hold_updates
                    or self.ledger or self.settings is not None or self.notices or self.limits
                    or self.figures or self.warnings)


SQL_LOT_INSERT = f"INSERT INTO credit_lots ({LOT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
SQL_LOT_UPDATE = ("UPDATE credit_lots SET remaining_uc = ?, reserved_uc = ?, expired_uc = ?, expired_at = ? "
                  "WHERE id = ?")
SQL_HOLD_INSERT = f"INSERT INTO credit_holds ({HOLD_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
SQL_HOLD_INSERT_KEYED = f"INSERT INTO credit_holds ({HOLD_KEYED}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
SQL_HOLD_UPDATE = "UPDATE credit_holds SET status = ?, captured_uc = ?, settled_at = ? WHERE id = ?"
SQL_LEDGER_INSERT = ("INSERT INTO credit_ledger (id, organization_id, created_at, kind, amount_uc, source, "
                     "lot_id, hold_id, project_id, job_id, workflow_run_id, description) "
                     "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)")
SQL_SETTINGS_UPSERT = ("INSERT INTO billing_settings (organization_id, low_balance_threshold_uc, "
                       "low_balance_notified_at) VALUES (?,?,?) ON CONFLICT (organization_id) DO UPDATE SET "
                       "low_balance_threshold_uc = excluded.low_balance_threshold_uc, "
                       "low_balance_notified_at = excluded.low_balance_notified_at")


class HoldIdTaken(Exception):
    """A new hold's id is already in `credit_holds` (the actor decided without reading it)."""


def persist(conn: sqlite3.Connection, org_id: str, w: Writes) -> None:
    """Apply one batch (runs inside `Store.write`, i.e. in the group-commit transaction).
    The warnings' mails are the mail layer's to compose (service.mail.notices), in the
    same transaction."""
    if w.lot_inserts:
        conn.executemany(SQL_LOT_INSERT, w.lot_inserts)
    if w.lot_updates:
        conn.executemany(SQL_LOT_UPDATE, w.lot_updates)
    if w.hold_inserts:
        try:
            conn.executemany(SQL_HOLD_INSERT_KEYED, w.hold_inserts)
        except sqlite3.IntegrityError as e:
            if "credit_holds.id" in str(e):
                raise HoldIdTaken(str(e)) from e
            raise
    if w.hold_updates:
        conn.executemany(SQL_HOLD_UPDATE, w.hold_updates)
    if w.ledger:
        conn.executemany(SQL_LEDGER_INSERT, w.ledger)
    if w.settings is not None:
        conn.execute(SQL_SETTINGS_UPSERT, w.settings)
    for left, threshold, now_iso in w.notices:
        emit(conn, org_id, "billing.credits_low", {"available": left, "threshold": threshold}, now_iso)
    if w.limits or w.figures or w.warnings:
        spend.persist(conn, org_id, w.limits, w.figures, w.warnings)


# -- the actor's loads ---------------------------------------------------------------------------
@contextmanager
def snapshot(store: Store) -> Iterator[Store]:
    """One read transaction on the reader connection, so several SELECTs see one commit."""
    conn = store.reader
    conn.execute("BEGIN")
    try:
        yield store
    finally:
        conn.execute("COMMIT")


def load_org(store: Store, org_id: str, month: str = ""
             ) -> tuple[list[Row], list[Row], Row | None, tuple[str, list[Row], list[Row]]]:
    """Every lot, every held hold and the settings row of one organization, and its spend
    limits with the figures of `month` (`YYYY-MM`)."""
    with snapshot(store):
        lots = store.all(f"SELECT {LOT_COLUMNS} FROM credit_lots WHERE organization_id = ?", (org_id,))
        holds = store.all(f"SELECT {HOLD_KEYED} FROM credit_holds WHERE organization_id = ? "
                          "AND status = 'held'", (org_id,))
        settings = store.one("SELECT low_balance_threshold_uc, low_balance_notified_at FROM billing_settings "
                             "WHERE organization_id = ?", (org_id,))
        limits, figures = spend.load(store, org_id, month)
    return lots, holds, settings, (month, limits, figures)


def holds_by_ids(store: Store, ids: list[str]) -> list[Row]:
    return rows_in(store, f"SELECT {HOLD_COLUMNS} FROM credit_holds WHERE id IN ({{marks}})", ids)


def org_ids_with_live_credits(store: Store) -> list[str]:
    """Organizations with a lot not yet expired (by the actor) or an outstanding hold."""
    rows = store.all("SELECT DISTINCT organization_id FROM credit_lots WHERE expired_at IS NULL "
                     "AND remaining_uc > 0 UNION SELECT DISTINCT organization_id FROM credit_holds "
                     "WHERE status = 'held'")
    return [r["organization_id"] for r in rows]


def org_ids_due(store: Store, now: float) -> list[str]:
    """Organizations with a lot whose expiry time has come but whose expiry is not written."""
    rows = store.all("SELECT DISTINCT organization_id FROM credit_lots WHERE expired_at IS NULL "
                     "AND remaining_uc > 0 AND expires_ts <= ?", (now,))
    return [r["organization_id"] for r in rows]


def hold_status_of_job(store: Store, job_id: str) -> str | None:
    row = store.one("SELECT status FROM credit_holds WHERE job_id = ?", (job_id,))
    return None if row is None else row["status"]


def org_exists(store: Store, org_id: str) -> bool:
    return store.one("SELECT 1 AS x FROM organizations WHERE id = ?", (org_id,)) is not None


# -- views -----------------------------------------------------------------------------------------
def lot_view(row: Row) -> Lot:
    return {"id": row["id"], "source": row["source"], "amount": fmt(row["amount_uc"]),
            "remaining": fmt(row["remaining_uc"]), "expires_at": row["expires_at"], "reason": row["reason"],
            "created_at": row["created_at"]}


def hold_view(row: Row) -> Hold:
    return {"id": row["id"], "job_id": row["job_id"], "workflow_run_id": row["workflow_run_id"],
            "project_id": row["project_id"], "status": row["status"], "amount": fmt(row["amount_uc"]),
            "captured": fmt(row["captured_uc"]), "created_at": row["created_at"],
            "settled_at": row["settled_at"]}


def ledger_view(row: Row) -> LedgerEntry:
    return {"id": row["id"], "created_at": row["created_at"], "kind": row["kind"],
            "amount": fmt(row["amount_uc"]), "source": row["source"], "grant_id": row["lot_id"],
            "project_id": row["project_id"], "job_id": row["job_id"],
            "workflow_run_id": row["workflow_run_id"], "description": row["description"],
            "hold_id": row["hold_id"]}


def spend_key(row: Row) -> tuple[bool, float, str, str]:
    """The spend order (`service.credits.rules.spend_key`) of a stored lot."""
    return lot_spend_key(row["expires_ts"], row["created_at"], row["id"])


# -- reads of the routes ---------------------------------------------------------------------------
def live_lots(store: Store, org_id: str, now: float) -> list[Row]:
    """The lots with credits left that are live at `now`, in spend order (a lot is expired
    from its `expires_at` on, whether or not the actor has written its expiry yet)."""
    rows = store.all(f"SELECT {LOT_COLUMNS} FROM credit_lots WHERE organization_id = ? AND remaining_uc > 0 "
                     "AND expired_at IS NULL", (org_id,))
    lots = [r for r in rows if not is_due(r["expires_ts"], now)]
    lots.sort(key=spend_key)
    return lots


def lots_available(lots: list[Row]) -> int:
    """`available` (`service.credits.rules.available`) of live stored lots."""
    return available((r["remaining_uc"], r["reserved_uc"]) for r in lots)


def balance(store: Store, org_id: str, now: float) -> Balance:
    """The Balance resource, relative to service time `now` (a lot is expired from its
    `expires_at` on, whether or not the actor has written its expiry yet)."""
    with snapshot(store):
        lots = live_lots(store, org_id, now)
        held = store.scalar("SELECT COALESCE(SUM(amount_uc), 0) FROM credit_holds WHERE organization_id = ? "
                            "AND status = 'held'", (org_id,))
    free = lots_available(lots)
    by_source: dict[str, int] = {}
    for r in lots:
        by_source[r["source"]] = by_source.get(r["source"], 0) + r["remaining_uc"]
    expiring = [r for r in lots if r["expires_ts"] is not None]
    next_expiry = next_amount = None
    if expiring:
        first = expiring[0]["expires_ts"]
        next_expiry = expiring[0]["expires_at"]
        next_amount = fmt(sum(r["remaining_uc"] for r in expiring if r["expires_ts"] == first))
    return {
        "organization_id": org_id,
        "available": fmt(max(free, 0)),
        "held": fmt(held),
        "by_source": [{"source": s, "remaining": fmt(v)} for s, v in by_source.items()],
        "next_expiry": next_expiry,
        "next_expiry_amount": next_amount,
        "lots": [lot_view(r) for r in lots],
    }


def ledger(store: Store, org_id: str, *, project_id: str | None, since: str | None, until: str | None,
           limit: int, offset: int) -> tuple[list[LedgerEntry], int]:
    where, params = ["organization_id = ?"], [org_id]
    if project_id is not None:
        where.append("project_id = ?")
        params.append(project_id)
    if since is not None:
        where.append("created_at >= ?")
        params.append(since)
    if until is not None:
        where.append("created_at < ?")
        params.append(until)
    cond = " AND ".join(where)
    with snapshot(store):
        total = store.scalar(f"SELECT COUNT(*) FROM credit_ledger WHERE {cond}", params)
        rows = store.all(f"SELECT * FROM credit_ledger WHERE {cond} ORDER BY created_at DESC, seq DESC "
                         "LIMIT ? OFFSET ?", [*params, limit, offset])
    return [ledger_view(r) for r in rows], total


def list_holds(store: Store, org_id: str, status: str | None, limit: int) -> list[Hold]:
    if status is None:
        rows = store.all(f"SELECT {HOLD_COLUMNS} FROM credit_holds WHERE organization_id = ? "
                         "ORDER BY created_at DESC, rowid DESC LIMIT ?", (org_id, limit))
    else:
        rows = store.all(f"SELECT {HOLD_COLUMNS} FROM credit_holds WHERE organization_id = ? AND status = ? "
                         "ORDER BY created_at DESC, rowid DESC LIMIT ?", (org_id, status, limit))
    return [hold_view(r) for r in rows]


def usage(store: Store, org_id: str, since: str | None) -> list[UsageRow]:
    """Completed jobs (captured holds with a job) per project per UTC day, newest day first."""
    sql = ("SELECT project_id, substr(settled_at, 1, 10) AS day, SUM(captured_uc) AS credits, COUNT(*) AS jobs "
           "FROM credit_holds WHERE organization_id = ? AND status = 'captured' AND job_id IS NOT NULL")
    params: list[Any] = [org_id]
    if since is not None:
        sql += " AND settled_at >= ?"
        params.append(since)
    sql += " GROUP BY project_id, day ORDER BY day DESC, project_id"
    return [{"project_id": r["project_id"], "day": r["day"], "credits": fmt(r["credits"]), "jobs": r["jobs"]}
            for r in store.all(sql, params)]


def settings(store: Store, org_id: str) -> BillingSettings:
    row = store.one("SELECT low_balance_threshold_uc, low_balance_notified_at FROM billing_settings "
                    "WHERE organization_id = ?", (org_id,))
    return settings_view(row["low_balance_threshold_uc"] if row else None,
                         row["low_balance_notified_at"] if row else None)


def settings_view(threshold_uc: int | None, notified_at: str | None) -> BillingSettings:
    return {"low_balance_threshold": fmt(threshold_uc), "low_balance_notified_at": notified_at}


# -- checks (tests, benchmark) ---------------------------------------------------------------------
def ledger_sum(store: Store, org_id: str) -> int:
    return int(store.scalar("SELECT COALESCE(SUM(amount_uc), 0) FROM credit_ledger WHERE organization_id = ?",
                            (org_id,)))


def committed_available(store: Store, org_id: str) -> int:
    """Σ free part of the lots whose expiry is not yet written: what the actor holds as available."""
    return lots_available(store.all("SELECT remaining_uc, reserved_uc FROM credit_lots "
                                    "WHERE organization_id = ? AND expired_at IS NULL", (org_id,)))
