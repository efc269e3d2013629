"""Post-run verification: an independent serial reference model and the DB invariants.

I1 no overspend      every lot 0 <= reserved <= remaining <= amount; expired part within the
                     free part; at every hold decision the model's available covers it.
I2 exact arithmetic  integers only; Σ amount - Σ remaining = Σ captured; Σ ledger = available;
                     per lot Σ ledger = its free part (remaining - reserved - expired).
I3 serial model      the actor's committed decisions, replayed in commit order through this
                     model, match it: every accept/refuse (no false accepts, no false 402s),
                     every slice (spend order), expiry never early and never late (a lot due
                     at decision time must already be expired), captures of expired lots.
I4 ack => durable    every acknowledged hold/capture/release is in the DB as acknowledged;
                     every hold in the DB (and in the ledger) was requested (no phantoms).
I5 at most once      each hold is settled once (one settle decision, one settle entry per
                     slice); retries return the original result.
I6 402 creates none  a refused hold id has no hold row and no ledger row.
I7 quiescence        held = 0 at the end; actor memory == a fresh load from the DB.
"""

from __future__ import annotations

import json
from collections import defaultdict


class RefModel:
    """Plain Python, independent of service.actors.balance.actor: lots, holds, spend order."""

    def __init__(self) -> None:
        self.lots: dict[str, dict] = {}
        self.holds: dict[str, dict] = {}
        self.settles: dict[str, int] = defaultdict(int)
        self.stats: dict[str, int] = defaultdict(int)   # coverage: what the run exercised

    def live(self):
        return [lot for lot in self.lots.values() if not lot["expired"]]

    def available(self) -> int:
        return sum(lot["remaining"] - lot["reserved"] for lot in self.live())

    def order(self):
        return sorted((lot for lot in self.live() if lot["remaining"] > 0),
                      key=lambda x: (x["exp"] is None, x["exp"] or 0.0, x["created"], x["id"]))

    def replay(self, org: str, trace: list, out: list[str]) -> None:
        def bad(msg):
            if len(out) < 50:
                out.append(f"I3 {org}: {msg}")

        for e in trace:
            kind, now = e[0], e[1]
            if kind == "grant":
                _, _, gid, lot_id, amount, exp, created, source = e
                if type(amount) is not int:
                    bad(f"grant {gid} amount {amount!r} is not an int")
                self.lots[lot_id] = {"id": lot_id, "amount": amount, "remaining": amount, "reserved": 0,
                                     "expired": False, "expired_uc": 0, "exp": exp, "created": created}
            elif kind == "expire":
                _, _, lot_id, free = e
                lot = self.lots.get(lot_id)
                if lot is None or lot["expired"]:
                    bad(f"expiry of unknown or expired lot {lot_id}")
                    continue
                if lot["exp"] is None or lot["exp"] > now:
                    bad(f"lot {lot_id} expired early at {now} (expires {lot['exp']})")
                if free != lot["remaining"] - lot["reserved"]:
                    bad(f"lot {lot_id} expired {free}, model says {lot['remaining'] - lot['reserved']}")
                lot["expired"] = True
                lot["expired_uc"] += lot["remaining"] - lot["reserved"]
                self.stats["lot_expiries"] += 1
                if lot["reserved"]:
                    self.stats["expired_under_holds"] += 1
            elif kind == "hold":
                _, _, hid, amount, slices, avail_before = e
                for lot in self.live():
                    if lot["exp"] is not None and lot["exp"] <= now and lot["remaining"] > 0:
                        bad(f"hold {hid} decided at {now} while lot {lot['id']} (expires {lot['exp']}) was live")
                avail = self.available()
                if avail_before != avail:
                    bad(f"hold {hid}: actor available {avail_before}, model {avail}")
                if slices is None:
                    self.stats["refusals"] += 1
                    if amount <= avail:
                        bad(f"false 402 for hold {hid}: {amount} <= available {avail}")
                    continue
                if amount > avail:
                    bad(f"overspend: hold {hid} of {amount} accepted with available {avail}")
                if hid in self.holds:
                    bad(f"hold {hid} placed twice")
                left, want = amount, []
                for lot in self.order():
                    take = min(lot["remaining"] - lot["reserved"], left)
                    if take > 0:
                        want.append((lot["id"], take))
                        left -= take
                if want != [tuple(s) for s in slices]:
                    bad(f"hold {hid} slices {slices} but spend order gives {want}")
                for lot_id, uc in slices:
                    self.lots[lot_id]["reserved"] += uc
                self.holds[hid] = {"status": "held", "amount": amount, "captured": None, "slices": list(slices)}
            elif kind in ("capture", "release"):
                hid = e[2]
                h = self.holds.get(hid)
                self.settles[hid] += 1
                if h is None or h["status"] != "held":
                    bad(f"{kind} of hold {hid} in status {h and h['status']}")
                    continue
                amount = e[3] if kind == "capture" else 0
                if amount > h["amount"]:
                    bad(f"over-capture of {hid}")
                left = amount
                for lot_id, s in h["slices"]:
                    lot = self.lots[lot_id]
                    c = min(s, left)
                    left -= c
                    lot["remaining"] -= c
                    lot["reserved"] -= s
                    if lot["expired"]:
                        lot["expired_uc"] += s - c
                        self.stats["charged_from_expired" if c else "returned_to_expired"] += 1
                h["status"] = "captured" if kind == "capture" else "released"
                h["captured"] = amount if kind == "capture" else None
            # dup / settings / notify: no state change


def check_db(conn, org_ids: list[str], out: list[str], *, model: dict[str, RefModel] | None = None,
             quiescent: bool = True) -> dict:
    """I1, I2, I5 (ledger side), I7 (held = 0) from the DB; the model's final state if given."""
    stats = {"lots": 0, "holds": 0, "ledger": 0}

    def bad(msg):
        if len(out) < 50:
            out.append(msg)

    orgs = set(org_ids)
    lots = [r for r in conn.execute("SELECT * FROM credit_lots").fetchall() if r["organization_id"] in orgs]
    holds = [r for r in conn.execute("SELECT id, organization_id, status, amount_uc, captured_uc, slices "
                                     "FROM credit_holds").fetchall() if r["organization_id"] in orgs]
    ledger_by_org = {r["organization_id"]: r["s"] for r in conn.execute(
        "SELECT organization_id, SUM(amount_uc) AS s FROM credit_ledger GROUP BY organization_id")}
    ledger_by_lot = {r["lot_id"]: r["s"] for r in conn.execute(
        "SELECT lot_id, SUM(amount_uc) AS s FROM credit_ledger GROUP BY lot_id")}
    settle_rows = defaultdict(int)
    for r in conn.execute("SELECT hold_id, COUNT(*) AS n FROM credit_ledger WHERE kind IN ('capture', 'release') "
                          "GROUP BY hold_id"):
        settle_rows[r["hold_id"]] = r["n"]
    stats["lots"], stats["holds"] = len(lots), len(holds)
    stats["ledger"] = conn.execute("SELECT COUNT(*) AS n FROM credit_ledger").fetchone()["n"]
    avail = defaultdict(int)
    granted = defaultdict(int)
    remaining = defaultdict(int)
    for lot in lots:
        for k in ("amount_uc", "remaining_uc", "reserved_uc", "expired_uc"):
            if type(lot[k]) is not int:
                bad(f"I2 lot {lot['id']} {k} is {type(lot[k]).__name__}")
        if not (0 <= lot["reserved_uc"] <= lot["remaining_uc"] <= lot["amount_uc"]):
            bad(f"I1 lot {lot['id']} out of range {lot}")
        free = lot["remaining_uc"] - lot["reserved_uc"] - lot["expired_uc"]
        if free < 0 or (lot["expired_at"] is not None and free != 0):
            bad(f"I1 lot {lot['id']} free part {free} (expired_at {lot['expired_at']})")
        if ledger_by_lot.get(lot["id"], 0) != free:
            bad(f"I2 lot {lot['id']}: Σ ledger {ledger_by_lot.get(lot['id'])} != free {free}")
        o = lot["organization_id"]
        avail[o] += free
        granted[o] += lot["amount_uc"]
        remaining[o] += lot["remaining_uc"]
    captured = defaultdict(int)
    held = 0
    for h in holds:
        if h["status"] == "captured":
            captured[h["organization_id"]] += h["captured_uc"]
        if h["status"] == "held":
            held += h["amount_uc"]
        nslices = len(json.loads(h["slices"]))
        if settle_rows.get(h["id"], 0) > nslices:
            bad(f"I5 hold {h['id']} has {settle_rows[h['id']]} settle rows for {nslices} slices")
        if h["status"] == "held" and settle_rows.get(h["id"], 0):
            bad(f"I5 held hold {h['id']} has settle rows")
    for o in orgs:
        if granted[o] - remaining[o] != captured[o]:
            bad(f"I2 {o}: Σ amount - Σ remaining = {granted[o] - remaining[o]} but Σ captured = {captured[o]}")
        if ledger_by_org.get(o, 0) != avail[o]:
            bad(f"I2 {o}: Σ ledger {ledger_by_org.get(o, 0)} != available {avail[o]}")
    if quiescent and held:
        bad(f"I7 {held} uc still held at quiescence")
    if model is not None:
        for o, m in model.items():
            if m.available() != avail[o]:
                bad(f"I3 {o}: model available {m.available()} != DB {avail[o]}")
            for r in lots:
                if r["organization_id"] != o:
                    continue
                ml = m.lots.get(r["id"])
                if ml is None or (ml["remaining"], ml["reserved"], ml["expired_uc"]) != (
                        r["remaining_uc"], r["reserved_uc"], r["expired_uc"]):
                    bad(f"I3 {o}: lot {r['id']} DB {(r['remaining_uc'], r['reserved_uc'], r['expired_uc'])} "
                        f"model {ml and (ml['remaining'], ml['reserved'], ml['expired_uc'])}")
            for hid, n in m.settles.items():
                if n > 1:
                    bad(f"I5 hold {hid} settled {n} times")
    stats["available_uc"] = sum(avail.values())
    return stats


def check_client_log(conn, log: "ClientLog", out: list[str]) -> None:
    """I4 (acknowledged => durable, no phantoms) and I6 (a 402 creates nothing)."""
    def bad(msg):
        if len(out) < 50:
            out.append(msg)

    rows = {r["id"]: r for r in conn.execute("SELECT id, status, amount_uc, captured_uc FROM credit_holds")}
    ledger_holds = {r["hold_id"] for r in conn.execute("SELECT DISTINCT hold_id FROM credit_ledger "
                                                       "WHERE hold_id IS NOT NULL")}
    for hid, amount in log.held.items():
        r = rows.get(hid)
        if r is None or r["amount_uc"] != amount:
            bad(f"I4 acknowledged hold {hid} ({amount}) not durable: {r}")
    for hid, amount in log.captured.items():
        r = rows.get(hid)
        if r is None or r["status"] != "captured" or r["captured_uc"] != amount:
            bad(f"I4 acknowledged capture {hid} ({amount}) not durable: {r}")
    for hid in log.released:
        r = rows.get(hid)
        if r is None or r["status"] != "released":
            bad(f"I4 acknowledged release {hid} not durable: {r}")
    for hid in rows:
        if hid not in log.issued:
            bad(f"I4 phantom hold {hid}")
    for hid in ledger_holds:
        if hid not in log.issued:
            bad(f"I4 phantom ledger hold {hid}")
    for hid in log.refused:
        if hid in log.held:
            continue  # refused once, placed by a retry with the same id (W6)
        if hid in rows or hid in ledger_holds:
            bad(f"I6 refused hold {hid} created something")


class ClientLog:
    """What the requesters sent and what was acknowledged to them."""

    def __init__(self) -> None:
        self.issued: set[str] = set()
        self.held: dict[str, int] = {}
        self.captured: dict[str, int] = {}
        self.released: set[str] = set()
        self.refused: set[str] = set()
