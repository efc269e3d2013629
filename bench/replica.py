"""Litestream replica: restore point and restore time (docs/scaling.md).

    python bench/replica.py [--orgs 1000] [--ledger 1000000]

Starts moto's S3 server on loopback, fills a migrated database with ORGS organizations and
LEDGER ledger rows, replicates it with `litestream replicate` (the config service/replica.py
writes), then measures:
  * initial_sync_s: until a restore holds every row (the first snapshot's upload);
  * lag_s: p50 / max over 20 single writes of the time from commit to the new WAL segment
    object in the store (what a disk loss costs); the final restore checks every write is in;
  * restore_s: `litestream restore` of the full database into an empty directory;
  * db_mib: the database's size.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from s3_server import S3Server, client, clean_env  # noqa: E402
from service.config import Settings  # noqa: E402
from service.replica import child_env, config_text, litestream_path, restore  # noqa: E402
from service.storage.migrate import apply_all  # noqa: E402


def fill(db: Path, orgs: int, ledger: int) -> None:
    apply_all(db)
    conn = sqlite3.connect(db)
    now = "2026-11-26T00:00:00.000000Z"
    ids = [str(uuid.uuid4()) for _ in range(orgs)]
    with conn:
        conn.executemany("INSERT INTO organizations (id, name, created_at, approved_at) VALUES (?, ?, ?, ?)",
                         [(i, f"Org {n}", now, now) for n, i in enumerate(ids)])
        conn.executemany(
            "INSERT INTO credit_ledger (id, organization_id, created_at, kind, amount_uc, source, description)"
            " VALUES (?, ?, ?, 'grant', ?, 'promo', 'bench')",
            ((str(uuid.uuid4()), ids[n % orgs], now, 1_000_000 + n) for n in range(ledger)))
    conn.close()


def count(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM credit_ledger").fetchone()[0])
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orgs", type=int, default=1000)
    ap.add_argument("--ledger", type=int, default=1_000_000)
    args = ap.parse_args()
    os.environ.update(clean_env())
    for k in [k for k in os.environ if k.startswith("AWS_") and k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")]:
        del os.environ[k]
    server = S3Server().start()
    proc = None
    work = Path(tempfile.mkdtemp(prefix="replica-bench-"))
    try:
        bucket = server.bucket()
        data = work / "data"
        data.mkdir()
        db = data / "genservice.db"
        fill(db, args.orgs, args.ledger)
        settings = Settings(data_dir=data, replica_url=f"s3://{bucket}/db", s3_endpoint_url=server.endpoint)
        cfg = work / "litestream.yml"
        cfg.write_text(config_text(db.resolve(), settings.replica_url, server.endpoint, "us-east-1"))
        writer = sqlite3.connect(db)
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        started = time.monotonic()
        proc = subprocess.Popen([litestream_path(), "replicate", "-no-expand-env", "-config", str(cfg)],
                                env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        n = 0

        def restored_count() -> int:
            nonlocal n
            n += 1
            out = work / f"r{n}"
            try:
                restore(settings, out)
            except Exception:  # noqa: BLE001 - no snapshot yet
                return -1
            return count(out / "genservice.db")

        while restored_count() < args.ledger:
            time.sleep(0.5)
        initial = time.monotonic() - started
        s3 = client(server.endpoint)

        def keys() -> set[str]:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            return {o["Key"] for page in pages for o in page.get("Contents", [])}

        lags = []
        for _ in range(20):
            time.sleep(1.5)  # let the previous write's segment settle
            seen = keys()
            with writer:
                writer.execute("INSERT INTO credit_ledger (id, organization_id, created_at, kind, amount_uc)"
                               " VALUES (?, 'x', 'now', 'grant', 1)", [str(uuid.uuid4())])
            t0 = time.monotonic()
            while not keys() - seen:  # the write's WAL segment is in the store
                time.sleep(0.02)
            lags.append(time.monotonic() - t0)
        t0 = time.monotonic()
        final = work / "final"
        restore(settings, final)
        restore_s = time.monotonic() - t0
        print(json.dumps({"orgs": args.orgs, "ledger_rows": args.ledger, "db_mib": round(db.stat().st_size / 2**20, 1),
                          "initial_sync_s": round(initial, 1), "lag_p50_s": round(statistics.median(lags), 2),
                          "lag_max_s": round(max(lags), 2), "restore_s": round(restore_s, 2),
                          "restored_rows": count(final / "genservice.db"),
                          "objects": client(server.endpoint).list_objects_v2(Bucket=bucket).get("KeyCount")}))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
