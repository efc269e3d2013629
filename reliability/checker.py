"""Quiescence and invariants after a crash (reliability.md §6.3).

Everything here reads the node's SQLite file through a read-only connection (the node keeps
running and stays its only writer) and, for the credit figures, the public API.

    quiesce(node)                     wait until nothing is in flight (see OPEN_QUERIES)
    problems = invariants(node)       node-wide invariants I1-I10 below; [] when all hold
    fig = credits(node, org_id, key)  one organization's credit figures (Decimal credits)
    drift(fig, model)                 |model - (available + held)| + |Σ ledger - available|

Invariants (each problem is a readable sentence):

    I1  no job is queued or rendering
    I2  no product run is queued or running; a final run has no pending or running step;
        a completed step's job exists, is completed, and its cost is the job's actual
    I3  every final job's hold is settled: `hold_settled`, a completed job's hold
        `captured` with captured = actual = price, any other final job's hold `released`
    I4  no hold is `held` (every hold has its job; no job left means no hold left)
    I5  every lot: 0 <= remaining - reserved - expired = Σ its ledger rows; reserved = 0
    I6  every organization: Σ ledger = Σ free part of its lots; Σ captured holds = Σ
        actual of its completed jobs
    I7  every paid top-up has exactly one `topup` lot (grant id = top-up id) and records it;
        a pending or expired top-up has none; no `topup` lot without its top-up
    I8  every asset row has its file; nothing is left in assets/tmp or work/
    I9  no job webhook is waiting, pending or sending; no account delivery is pending or
        sending; no event is left undispatched
    I10 no job webhook row without its job; at most one job webhook row per job
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import httpx

UC = Decimal(1_000_000)
OPEN_QUERIES = {
    "open jobs": "SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'rendering')",
    "open runs": "SELECT COUNT(*) FROM product_runs WHERE status IN ('queued', 'running')",
    "unsettled jobs": "SELECT COUNT(*) FROM jobs WHERE hold_settled = 0",
    "held holds": "SELECT COUNT(*) FROM credit_holds WHERE status = 'held'",
    "ungranted top-ups": "SELECT COUNT(*) FROM topups WHERE status = 'paid' AND lot_id IS NULL",
    "job webhooks in flight": "SELECT COUNT(*) FROM job_webhooks WHERE state IN ('waiting', 'pending', 'sending')",
    "deliveries in flight": "SELECT COUNT(*) FROM webhook_deliveries WHERE status IN ('pending', 'sending')",
    "undispatched events": "SELECT COUNT(*) FROM events WHERE dispatched = 0",
}


def connect(db_path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def rows(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> list[dict]:
    return [dict(r) for r in conn.execute(sql, params).fetchall()]


def scalar(conn: sqlite3.Connection, sql: str, params: tuple = ()):
    return conn.execute(sql, params).fetchone()[0]


def open_work(db_path: str | Path) -> dict[str, int]:
    with closing(connect(db_path)) as conn:
        return {name: scalar(conn, q) for name, q in OPEN_QUERIES.items()}


def quiesce(node, timeout: float = 90.0, settle: float = 0.3) -> dict[str, int]:
    """Wait until nothing is in flight (twice in a row, `settle` seconds apart); raises
    TimeoutError with what is still open."""
    deadline = time.monotonic() + timeout
    calm = 0
    while True:
        left = {k: v for k, v in open_work(node.db_path).items() if v}
        if not left:
            calm += 1
            if calm >= 2:
                return {}
        else:
            calm = 0
        if time.monotonic() > deadline:
            raise TimeoutError(f"not quiescent after {timeout:.0f} s: {left}")
        if node.proc is not None and node.proc.poll() is not None:
            raise RuntimeError(f"node exited ({node.proc.returncode}) while quiescing:\n{node.log_tail()}")
        time.sleep(settle if not left else 0.1)


def invariants(node) -> list[str]:
    """I1-I10 over the whole node; a list of problems (empty when every invariant holds)."""
    p: list[str] = []
    with closing(connect(node.db_path)) as conn:
        jobs = {j["id"]: j for j in rows(conn, "SELECT * FROM jobs")}
        holds = {h["id"]: h for h in rows(conn, "SELECT * FROM credit_holds")}
        lots = rows(conn, "SELECT * FROM credit_lots")
        # I1
        for j in jobs.values():
            if j["status"] in ("queued", "rendering"):
                p.append(f"I1 job {j['id']} is {j['status']}")
        # I2
        runs = {r["id"]: r for r in rows(conn, "SELECT * FROM product_runs")}
        steps = rows(conn, "SELECT * FROM product_run_steps")
        for r in runs.values():
            if r["status"] in ("queued", "running"):
                p.append(f"I2 run {r['id']} is {r['status']}")
        for s in steps:
            run = runs.get(s["run_id"])
            if run is None:
                p.append(f"I2 step {s['run_id']}/{s['key']} has no run")
                continue
            if run["status"] in ("completed", "failed", "canceled") and s["status"] in ("pending", "running"):
                p.append(f"I2 run {run['id']} is {run['status']} but step {s['key']} is {s['status']}")
            if s["status"] == "completed" and s["capability"] is not None:
                j = jobs.get(s["request_id"])
                if j is None or j["status"] != "completed":
                    p.append(f"I2 completed step {s['run_id']}/{s['key']}: job {s['request_id']} is "
                             f"{None if j is None else j['status']}")
                elif s["cost_uc"] != j["actual_uc"]:
                    p.append(f"I2 step {s['run_id']}/{s['key']} cost {s['cost_uc']} != job actual {j['actual_uc']}")
        for r in runs.values():
            if r["status"] == "completed":
                total = sum(s["cost_uc"] or 0 for s in steps if s["run_id"] == r["id"])
                if r["actual_uc"] != total:
                    p.append(f"I2 run {r['id']} actual {r['actual_uc']} != Σ step costs {total}")
        # I3
        for j in jobs.values():
            if j["status"] not in ("completed", "failed", "nsfw", "canceled"):
                continue
            h = holds.get(j["hold_id"])
            if h is None:
                p.append(f"I3 final job {j['id']} has no hold row {j['hold_id']}")
                continue
            if not j["hold_settled"]:
                p.append(f"I3 final job {j['id']} ({j['status']}) hold not settled")
            if h["job_id"] != j["id"] or h["organization_id"] != j["organization_id"]:
                p.append(f"I3 hold {h['id']} belongs to job {h['job_id']}, not {j['id']}")
            if j["status"] == "completed":
                if h["status"] != "captured" or h["captured_uc"] != j["actual_uc"] or j["actual_uc"] != j["price_uc"]:
                    p.append(f"I3 completed job {j['id']}: hold {h['status']} captured {h['captured_uc']}, "
                             f"actual {j['actual_uc']}, price {j['price_uc']}")
            else:
                if h["status"] != "released" or j["actual_uc"] is not None:
                    p.append(f"I3 {j['status']} job {j['id']}: hold {h['status']}, actual {j['actual_uc']}")
        # I4
        for h in holds.values():
            if h["status"] == "held":
                j = jobs.get(h["job_id"])
                p.append(f"I4 hold {h['id']} is held (job {h['job_id']}: {None if j is None else j['status']})")
            if h["job_id"] is not None and h["job_id"] not in jobs and h["status"] == "captured":
                p.append(f"I4 hold {h['id']} captured without its job {h['job_id']}")
        # I5
        ledger_by_lot = {r["lot_id"]: r["s"] for r in rows(
            conn, "SELECT lot_id, SUM(amount_uc) AS s FROM credit_ledger GROUP BY lot_id")}
        for lot in lots:
            free = lot["remaining_uc"] - lot["reserved_uc"] - lot["expired_uc"]
            if free < 0 or free != ledger_by_lot.get(lot["id"], 0):
                p.append(f"I5 lot {lot['id']}: free {free} != Σ ledger {ledger_by_lot.get(lot['id'], 0)}")
            if lot["reserved_uc"] != 0:
                p.append(f"I5 lot {lot['id']} still reserves {lot['reserved_uc']}")
        # I6
        for org in rows(conn, "SELECT id FROM organizations"):
            oid = org["id"]
            led = scalar(conn, "SELECT COALESCE(SUM(amount_uc), 0) FROM credit_ledger WHERE organization_id = ?", (oid,))
            free = scalar(conn, "SELECT COALESCE(SUM(remaining_uc - reserved_uc - expired_uc), 0) FROM credit_lots "
                          "WHERE organization_id = ?", (oid,))
            if led != free:
                p.append(f"I6 org {oid}: Σ ledger {led} != Σ free {free}")
            cap = scalar(conn, "SELECT COALESCE(SUM(captured_uc), 0) FROM credit_holds WHERE organization_id = ? "
                         "AND status = 'captured'", (oid,))
            act = scalar(conn, "SELECT COALESCE(SUM(actual_uc), 0) FROM jobs WHERE organization_id = ? "
                         "AND status = 'completed'", (oid,))
            if cap != act:
                p.append(f"I6 org {oid}: Σ captured {cap} != Σ completed actual {act}")
        # I7
        topups = {t["id"]: t for t in rows(conn, "SELECT * FROM topups")}
        topup_lots: dict[str, list[dict]] = {}
        for lot in lots:
            if lot["source"] == "topup":
                topup_lots.setdefault(lot["grant_id"], []).append(lot)
                if lot["grant_id"] not in topups:
                    p.append(f"I7 topup lot {lot['id']} has no top-up {lot['grant_id']}")
        for t in topups.values():
            got = topup_lots.get(t["id"], [])
            if t["status"] == "paid":
                if len(got) != 1 or t["lot_id"] != got[0]["id"] or got[0]["amount_uc"] != t["credits_uc"]:
                    p.append(f"I7 paid top-up {t['id']}: {len(got)} lots, lot_id {t['lot_id']}")
            elif got:
                p.append(f"I7 {t['status']} top-up {t['id']} has {len(got)} lots")
        # I8
        data = Path(node.data_dir)
        for a in rows(conn, "SELECT id, sha256 FROM assets"):
            sha = a["sha256"]
            if not (data / "assets" / sha[:2] / sha[2:4] / sha).is_file():
                p.append(f"I8 asset {a['id']} has no file {sha}")
        left = [x.name for x in (data / "assets" / "tmp").iterdir()] if (data / "assets" / "tmp").exists() else []
        if left:
            p.append(f"I8 files left in assets/tmp: {left[:5]}")
        work = [x.name for x in (data / "work").iterdir()] if (data / "work").exists() else []
        if work:
            p.append(f"I8 render scratch left in work/: {work[:5]}")
        # I9
        for name, q in OPEN_QUERIES.items():
            if name in ("job webhooks in flight", "deliveries in flight", "undispatched events"):
                n = scalar(conn, q)
                if n:
                    p.append(f"I9 {n} {name}")
        # I10
        for w in rows(conn, "SELECT job_id, COUNT(*) AS n FROM job_webhooks GROUP BY job_id"):
            if w["job_id"] not in jobs:
                p.append(f"I10 job webhook for unknown job {w['job_id']}")
            if w["n"] != 1:
                p.append(f"I10 job {w['job_id']} has {w['n']} webhook rows")
    return p


def dec(text: str | None) -> Decimal:
    return Decimal(text) if text is not None else Decimal(0)


def credits(node, org_id: str, key: str, client: httpx.Client | None = None) -> dict:
    """One organization's figures: API `available`, `held`, Σ API ledger (every page, after
    the ledger route has written due expiries) and from the DB the lots (amount per source,
    expired), Σ captured by completed jobs. Decimal credits."""
    c = client or httpx.Client(timeout=30)
    try:
        h = {"Authorization": f"Bearer {key}"}
        ledger = Decimal(0)
        by_kind: dict[str, Decimal] = {}
        offset, total = 0, None
        while total is None or offset < total:
            r = c.get(node.url + "/v1/billing/ledger", headers=h, params={"limit": 500, "offset": offset})
            r.raise_for_status()
            body = r.json()
            total = body["total"]
            for e in body["data"]:
                ledger += dec(e["amount"])
                by_kind[e["kind"]] = by_kind.get(e["kind"], Decimal(0)) + dec(e["amount"])
            offset += len(body["data"])
            if not body["data"]:
                break
        r = c.get(node.url + "/v1/billing/balance", headers=h)
        r.raise_for_status()
        bal = r.json()["data"]
    finally:
        if client is None:
            c.close()
    with closing(connect(node.db_path)) as conn:
        lots = rows(conn, "SELECT * FROM credit_lots WHERE organization_id = ?", (org_id,))
        captured = scalar(conn, "SELECT COALESCE(SUM(actual_uc), 0) FROM jobs WHERE organization_id = ? "
                          "AND status = 'completed'", (org_id,))
    by_source: dict[str, Decimal] = {}
    for lot in lots:
        by_source[lot["source"]] = by_source.get(lot["source"], Decimal(0)) + Decimal(lot["amount_uc"]) / UC
    return {
        "available": dec(bal["available"]), "held": dec(bal["held"]), "ledger": ledger, "ledger_by_kind": by_kind,
        "granted": by_source, "lots": lots,
        "expired": sum((Decimal(lot["expired_uc"]) for lot in lots), Decimal(0)) / UC,
        "captured": Decimal(captured) / UC,
    }


def model_balance(granted: Decimal, fig: dict) -> Decimal:
    """What the organization should have: granted (signup + grants + paid top-ups, as the
    caller's model counts them) - Σ captured by completed jobs - expired."""
    return granted - fig["captured"] - fig["expired"]


def drift(fig: dict, model: Decimal) -> Decimal:
    """|model - (available + held)| + |Σ ledger - available|: exactly 0 when all agree."""
    return abs(model - (fig["available"] + fig["held"])) + abs(fig["ledger"] - fig["available"])


def job_webhook_bodies(receiver) -> dict[str, int]:
    """request_id -> how many job-webhook POSTs the receiver got for it."""
    out: dict[str, int] = {}
    for r in receiver.snapshot():
        if r.header("X-Service-Delivery") is None:
            try:
                rid = json.loads(r.body)["request_id"]
            except (ValueError, KeyError, TypeError):
                continue
            out[rid] = out.get(rid, 0) + 1
    return out


def delivery_ids(receiver) -> dict[str, int]:
    """X-Service-Delivery id -> how many account-webhook POSTs carried it."""
    out: dict[str, int] = {}
    for r in receiver.snapshot():
        d = r.header("X-Service-Delivery")
        if d is not None:
            out[d] = out.get(d, 0) + 1
    return out


def webhook_checks(node, receiver) -> list[str]:
    """Outbox rows against what the receiver got: nothing twice; `delivered` arrived exactly
    once; `unknown` at most once; `pending`/`failed`-before-send never; every POST has a row."""
    p: list[str] = []
    got_jobs = job_webhook_bodies(receiver)
    got_deliveries = delivery_ids(receiver)
    with closing(connect(node.db_path)) as conn:
        hooks = {w["job_id"]: w for w in rows(conn, "SELECT job_id, state, url FROM job_webhooks")}
        dels = {d["id"]: d for d in rows(conn, "SELECT id, status FROM webhook_deliveries")}
    for rid, n in got_jobs.items():
        if n > 1:
            p.append(f"job webhook of {rid} arrived {n} times")
        w = hooks.get(rid)
        if w is None:
            p.append(f"job webhook of {rid} arrived without an outbox row")
        elif w["state"] not in ("delivered", "unknown"):
            p.append(f"job webhook of {rid} arrived but its row is {w['state']}")
    for rid, w in hooks.items():
        if w["state"] == "delivered" and got_jobs.get(rid, 0) != 1 and receiver_url(w["url"], receiver):
            p.append(f"job webhook of {rid} recorded delivered but arrived {got_jobs.get(rid, 0)} times")
    for did, n in got_deliveries.items():
        if n > 1:
            p.append(f"delivery {did} arrived {n} times")
        d = dels.get(did)
        if d is None:
            p.append(f"delivery {did} arrived without a row")
        elif d["status"] not in ("delivered", "unknown"):
            p.append(f"delivery {did} arrived but its row is {d['status']}")
    for did, d in dels.items():
        if d["status"] == "delivered" and got_deliveries.get(did, 0) != 1:
            p.append(f"delivery {did} recorded delivered but arrived {got_deliveries.get(did, 0)} times")
    return p


def receiver_url(url: str, receiver) -> bool:
    return url.startswith(f"https://127.0.0.1:{receiver.port}/")
