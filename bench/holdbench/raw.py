"""The physical limit of the holds' storage: the rows W1 writes, with no decisions at all.

One organization, one lot (as W1). A loop in the benchmark's own process builds 64 hold +
settle pairs at a time (same amount and settlement draws as W1's requesters) and writes
exactly the row changes the balance actor writes for them, by `executemany`, in one
`BEGIN IMMEDIATE ... COMMIT` per batch of 64 pairs, on a connection with the service's own
PRAGMAs (`service.storage.db.connect`: WAL, synchronous=FULL):

    per pair   1 hold INSERT (status held, its slice), 1 `hold` ledger row,
               1 hold UPDATE (captured or released), 1 `capture`/`release` ledger row
    per batch  1 lot UPDATE (the lot's new remaining_uc, as the actor coalesces it)

Nothing else: no reads, no actor, no trio, no thread hop, no waiting caller. Ids and
timestamps are made as the actor makes them (`new_id`, ISO stamps), so building the rows is
counted. `vs_raw_64` = the actor's W1 pairs/s at 64 requesters over this loop's pairs/s:
how close the product's write path comes to what the disk and SQLite allow for the same
rows and the same durability. The checks (I1, I2, quiescence) run on the result, so the
rows are the right ones.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

from holdbench.model import check_db
from holdbench.workloads import HOT, Result, amount, fresh_dir, settlement
from service.clock import iso
from service.storage import billing as sql
from service.storage.db import connect
from service.storage.migrate import apply_all

BATCH = 64
SEED_UC = 10 ** 14


def raw(base: Path, duration: float, seed: int, batch: int = BATCH) -> Result:
    d = fresh_dir(base)
    res = Result("W1", "raw", batch)
    try:
        path = d / "raw.db"
        apply_all(path)
        conn = connect(path)
        try:
            lot_id, remaining = grant(conn)
            rng = random.Random(seed)
            k = 0
            t_start = time.perf_counter()
            cpu0 = time.process_time()
            stop_at = t_start + duration
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                now_iso = iso(time.time())
                inserts, updates, ledger = [], [], []
                for _ in range(batch):
                    hid, amt = f"x{k}", amount(rng)
                    k += 1
                    kind, cap = settlement(rng, amt)
                    charged = 0 if kind == "release" else (amt if cap is None else cap)
                    inserts.append((hid, HOT, None, None, None, None, "held", amt, None,
                                    sql.dump_slices([(lot_id, amt)]), now_iso, None, None))
                    ledger.append((sql.new_id(), HOT, now_iso, "hold", -amt, "topup", lot_id, hid, None, None, None,
                                   None))
                    updates.append(("released" if kind == "release" else "captured",
                                    None if kind == "release" else charged, now_iso, hid))
                    ledger.append((sql.new_id(), HOT, now_iso, kind, amt - charged, "topup", lot_id, hid, None, None,
                                   None, None))
                    remaining -= charged
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(sql.SQL_HOLD_INSERT_KEYED, inserts)
                conn.executemany(sql.SQL_LEDGER_INSERT, ledger)
                conn.executemany(sql.SQL_HOLD_UPDATE, updates)
                conn.execute(sql.SQL_LOT_UPDATE, (remaining, 0, 0, None, lot_id))
                conn.execute("COMMIT")
                res.commits += 1
                res.holds += batch
                res.pairs += batch
                res.pair_lat.append(time.perf_counter() - t0)
            res.elapsed = time.perf_counter() - t_start
            res.cpu_s = time.process_time() - cpu0
            res.hold_lat = list(res.pair_lat)  # one figure per batch: its build + commit time
            check_db(conn, [HOT], res.violations)
        finally:
            conn.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return res


def grant(conn) -> tuple[str, int]:
    """The W1 seed lot and its ledger row, as the actor's Grant writes them."""
    lot_id, now_iso = sql.new_id(), iso(time.time())
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(sql.SQL_LOT_INSERT, (lot_id, HOT, "seed", "topup", SEED_UC, SEED_UC, 0, 0, None, None, None, None,
                                      now_iso))
    conn.execute(sql.SQL_LEDGER_INSERT, (sql.new_id(), HOT, now_iso, "grant", SEED_UC, "topup", lot_id, None, None,
                                         None, None, None))
    conn.execute("COMMIT")
    return lot_id, SEED_UC
