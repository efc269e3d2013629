"""The two engines over the same schema (service/storage/schema_billing.py) and ledger rule.

ActorEngine: the product code. The real `Store` (file DB, WAL, synchronous=FULL, the
writer in its worker thread with group commit across organizations) and the real
`BalanceActor` in a real `Registry`, driven by trio tasks.

NaiveEngine: the baseline. One OS thread per requester, each with its own connection
(same PRAGMAs as the service: WAL, synchronous=FULL, busy_timeout=5000); every operation is
one `BEGIN IMMEDIATE` transaction that reads the organization's lots, decides with the same
rules (spend order, slices, capture/release, expiry due at decision time) and writes the
same rows. It keeps no memory between operations.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections import defaultdict
from types import SimpleNamespace

import trio

from service.actors.balance.actor import BalanceActor
from service.actors.balance.messages import Capture, Grant, PlaceHold, Release, Snapshot, Stop, Sync
from service.actors.runtime import Registry
from service.clock import Clock, iso
from service.errors import InsufficientCredits, ServiceError, SpendLimitReached
from service.storage import billing as sql
from service.storage.db import Store, connect
from service.storage.migrate import apply_all

OK, REFUSED, FAILED = "ok", "402", "failed"


class FaultyStore(Store):
    """The real Store; with `fault_rate` > 0 some batch commits fail (nothing applied, every
    writer of the batch gets the error), as an I/O error or SQLITE_BUSY would."""

    fault_rate = 0.0
    injected = 0

    def __init__(self, path, *, seed: int = 0, **kw) -> None:
        super().__init__(path, **kw)
        self._rng = random.Random(seed)

    def _commit(self, batch) -> None:
        if self.fault_rate and self._rng.random() < self.fault_rate:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            for item in batch:
                try:
                    item.fn(conn)
                except Exception:  # noqa: BLE001
                    pass
            conn.execute("ROLLBACK")
            err = sqlite3.OperationalError("disk I/O error (injected by the benchmark)")
            for item in batch:
                item.error, item.result = err, None
            self.injected += 1
            self.batches += 1
            self.writes += len(batch)
            return
        super()._commit(batch)


class ActorEngine:
    name = "actor"

    def __init__(self, path, *, clock: Clock | None = None, seed: int = 0) -> None:
        self.path = path
        apply_all(path)
        self.store = FaultyStore(path, seed=seed)
        self.clock = clock or Clock()
        self.traces: dict[str, list] = defaultdict(list)
        services = SimpleNamespace(store=self.store, clock=self.clock)
        self.registry = Registry("balances", lambda org: BalanceActor(services, org, trace=self.traces[org]),
                                 self.clock)
        self.scope: tuple[str | None, str | None] = (None, None)  # (project, key) every hold names (WL)

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.store.run)
        await nursery.start(self.registry.run)

    async def hold(self, org: str, hid: str, amount: int):
        try:
            return OK, await self.registry.ask(org, PlaceHold(hid, amount, project_id=self.scope[0],
                                                              api_key_id=self.scope[1]))
        except (InsufficientCredits, SpendLimitReached):
            return REFUSED, None
        except ServiceError as e:
            return FAILED, e

    async def capture(self, org: str, hid: str, amount: int | None):
        try:
            return OK, await self.registry.ask(org, Capture(hid, amount))
        except ServiceError as e:
            return FAILED, e

    async def release(self, org: str, hid: str):
        try:
            return OK, await self.registry.ask(org, Release(hid))
        except ServiceError as e:
            return FAILED, e

    async def grant(self, org: str, gid: str, amount: int, expires_at: float | None = None, source="topup"):
        return await self.registry.ask(org, Grant(gid, amount, source, expires_at))

    async def available(self, org: str) -> int:
        return (await self.registry.ask(org, Sync()))["available_uc"]

    async def restart(self, org: str) -> None:
        await self.registry.ask(org, Stop())

    async def memory_equals_db(self, orgs, out: list[str]) -> None:
        """I7: each live actor's memory equals a fresh load from the DB."""
        services = SimpleNamespace(store=self.store, clock=self.clock)
        for org in orgs:
            mem = await self.registry.ask(org, Snapshot())
            fresh = BalanceActor(services, org)
            fresh._load()
            if fresh.state() != mem:
                out.append(f"I7 {org}: actor memory differs from the DB")

    def close(self) -> None:
        self.store.close()


class NaiveEngine:
    name = "naive"

    def __init__(self, path) -> None:
        self.path = path
        apply_all(path)

    def connect(self) -> sqlite3.Connection:
        return connect(self.path)  # the service's own PRAGMAs (WAL, synchronous=FULL, busy_timeout)

    # Each call is one BEGIN IMMEDIATE transaction.
    def _lots(self, conn, org: str, now: float, now_iso: str) -> list[dict]:
        lots = conn.execute(
            "SELECT id, source, remaining_uc, reserved_uc, expired_uc, expires_ts FROM credit_lots "
            "WHERE organization_id = ? AND expired_at IS NULL AND remaining_uc > 0 "
            "ORDER BY expires_ts IS NULL, expires_ts, created_at, id", (org,)).fetchall()
        live = []
        for lot in lots:
            if lot["expires_ts"] is not None and lot["expires_ts"] <= now:  # expiry due: written now
                free = lot["remaining_uc"] - lot["reserved_uc"]
                conn.execute("UPDATE credit_lots SET expired_uc = expired_uc + ?, expired_at = ? WHERE id = ?",
                             (free, now_iso, lot["id"]))
                if free:
                    self._ledger(conn, org, now_iso, "expiry", -free, lot, None)
            else:
                live.append(lot)
        return live

    @staticmethod
    def _ledger(conn, org, now_iso, kind, amount, lot, hold, description=None):
        conn.execute(sql.SQL_LEDGER_INSERT, (sql.new_id(), org, now_iso, kind, amount, lot["source"], lot["id"],
                                             hold and hold["id"], hold and hold.get("project_id"), None, None,
                                             description))

    def hold(self, conn, org: str, hid: str, amount: int):
        now = time.time()
        now_iso = iso(now)
        conn.execute("BEGIN IMMEDIATE")
        try:
            old = conn.execute("SELECT status FROM credit_holds WHERE id = ?", (hid,)).fetchone()
            if old is not None:
                conn.execute("COMMIT")
                return OK, old
            lots = self._lots(conn, org, now, now_iso)
            available = sum(lot["remaining_uc"] - lot["reserved_uc"] for lot in lots)
            if amount > available:
                conn.execute("COMMIT")  # keeps an expiry it may have written
                return REFUSED, None
            hold = {"id": hid}
            left, slices = amount, []
            for lot in lots:
                free = lot["remaining_uc"] - lot["reserved_uc"]
                take = min(free, left)
                if take <= 0:
                    continue
                conn.execute("UPDATE credit_lots SET reserved_uc = reserved_uc + ? WHERE id = ?", (take, lot["id"]))
                self._ledger(conn, org, now_iso, "hold", -take, lot, hold)
                slices.append((lot["id"], take))
                left -= take
                if not left:
                    break
            conn.execute(sql.SQL_HOLD_INSERT, (hid, org, None, None, None, None, "held", amount, None,
                                               sql.dump_slices(slices), now_iso, None))
            conn.execute("COMMIT")
            return OK, {"status": "held"}
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def settle(self, conn, org: str, hid: str, capture: int | None, release: bool = False):  # noqa: FBT001
        now = time.time()
        now_iso = iso(now)
        conn.execute("BEGIN IMMEDIATE")
        try:
            h = conn.execute("SELECT status, amount_uc, slices FROM credit_holds WHERE id = ?", (hid,)).fetchone()
            want = "released" if release else "captured"
            if h is None or h["status"] != "held":
                conn.execute("COMMIT")
                return (OK, h) if h is not None and h["status"] == want else (FAILED, h)
            self._lots(conn, org, now, now_iso)
            amount = 0 if release else (h["amount_uc"] if capture is None else capture)
            left = amount
            hold = {"id": hid}
            for lot_id, s in sql.load_slices(h["slices"]):
                lot = conn.execute("SELECT id, source, expired_at FROM credit_lots WHERE id = ?", (lot_id,)).fetchone()
                c = min(s, left)
                left -= c
                back = s - c
                expired_part = back if lot["expired_at"] is not None else 0
                conn.execute("UPDATE credit_lots SET remaining_uc = remaining_uc - ?, reserved_uc = reserved_uc - ?, "
                             "expired_uc = expired_uc + ? WHERE id = ?", (c, s, expired_part, lot_id))
                self._ledger(conn, org, now_iso, "release" if release else "capture", back, lot, hold)
                if expired_part:
                    self._ledger(conn, org, now_iso, "expiry", -expired_part, lot, hold)
            conn.execute(sql.SQL_HOLD_UPDATE, (want, None if release else amount, now_iso, hid))
            conn.execute("COMMIT")
            return OK, {"status": want}
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def grant(self, conn, org: str, gid: str, amount: int, expires_at: float | None = None, source="topup"):
        now_iso = iso(time.time())
        conn.execute("BEGIN IMMEDIATE")
        try:
            lot_id = sql.new_id()
            exp_iso = iso(expires_at) if expires_at is not None else None
            conn.execute(sql.SQL_LOT_INSERT, (lot_id, org, gid, source, amount, amount, 0, 0, exp_iso,
                                              expires_at, None, None, now_iso))
            self._ledger(conn, org, now_iso, "grant", amount, {"id": lot_id, "source": source}, None)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def available(self, conn, org: str) -> int:
        return conn.execute("SELECT COALESCE(SUM(remaining_uc - reserved_uc), 0) AS a FROM credit_lots "
                            "WHERE organization_id = ? AND expired_at IS NULL", (org,)).fetchone()["a"]
