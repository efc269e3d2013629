"""Database bytes per job (docs/scaling.md): the growth of the database over N image jobs.

    python bench/dbsize.py [--jobs 400]

One in-process node (tests/conftest.py), one organization; N jobs of the image model
submitted and completed; the database checkpointed and VACUUMed before and after. Every
row a job writes counts: the job, its hold, ledger rows, its output asset row, events.
Prints one JSON line: bytes per job and the extrapolation to a million jobs (GiB).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conftest import start_node  # noqa: E402
from test_generation_support import submit, wait_status  # noqa: E402


def compact_size(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return db.stat().st_size


async def measure(jobs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, Path(tmp), test_mode=True)
            org = await node.create_org()
            await node.op("POST", f"/organizations/{org['organization_id']}/grants",
                          {"credits": "100000", "source": "promo"})
            rid = (await submit(node, org["api_key"], {"prompt": "warm"}))["request_id"]
            await wait_status(node, org["api_key"], rid)
            before = await trio.to_thread.run_sync(compact_size, node.parts.settings.db_path)
            for start in range(0, jobs, 20):
                rids = [(await submit(node, org["api_key"], {"prompt": f"hill {start + i}"}))["request_id"]
                        for i in range(min(20, jobs - start))]
                for r in rids:
                    await wait_status(node, org["api_key"], r, timeout=120)
            after = await trio.to_thread.run_sync(compact_size, node.parts.settings.db_path)
            await node.parts.aclose()
            nursery.cancel_scope.cancel()
        node.store.close()
    per_job = (after - before) / jobs
    return {"jobs": jobs, "bytes_per_job": round(per_job), "gib_per_million_jobs": round(per_job * 1e6 / 2**30, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=400)
    print(json.dumps(trio.run(measure, ap.parse_args().jobs)))


if __name__ == "__main__":
    main()
