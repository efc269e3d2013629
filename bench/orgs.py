"""Request latency with many organizations against few (docs/scaling.md).

    python bench/orgs.py [--many 10000] [--few 10] [--requests 1000]

One in-process node (tests/conftest.py) per size; SIZE organizations created through the
operator API (each with its owner, default project and API key); then REQUESTS requests,
round-robin over 10 of the organizations' keys (after 50 not counted), alternating `GET /v1/billing/balance` and
`GET /v1/projects`. Prints one JSON line: p50 / p99 ms at each size, the p99 ratio, and the
database size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conftest import start_node  # noqa: E402


async def measure(size: int, requests: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, Path(tmp), test_mode=True)
            t0 = time.perf_counter()
            keys = []
            for i in range(size):
                org = await node.create_org(name=f"Org {i}", email=f"owner{i}@x.test")
                if i % max(1, size // 10) == 0:
                    keys.append(org["api_key"])
            created_s = time.perf_counter() - t0
            times = []
            for i in range(-50, requests):  # the first 50 warm up (not counted)
                path = "/v1/billing/balance" if i % 2 else "/v1/projects"
                t = time.perf_counter()
                r = await node.call("GET", path, keys[i % len(keys)])
                await r.get_data()
                if i >= 0:
                    times.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, (r.status_code, await r.get_data(as_text=True))
            db = node.parts.settings.db_path
            await node.parts.aclose()
            nursery.cancel_scope.cancel()
        node.store.close()
        size_mib = db.stat().st_size / 2**20 if db.exists() else 0.0
    times.sort()
    return {"orgs": size, "create_per_s": round(size / created_s, 1), "p50_ms": round(statistics.median(times), 2),
            "p99_ms": round(times[int(len(times) * 0.99) - 1], 2), "db_mib": round(size_mib, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--many", type=int, default=10000)
    ap.add_argument("--few", type=int, default=10)
    ap.add_argument("--requests", type=int, default=1000)
    args = ap.parse_args()
    few = trio.run(measure, args.few, args.requests)
    many = trio.run(measure, args.many, args.requests)
    print(json.dumps({"few": few, "many": many, "p99_many_vs_few": round(many["p99_ms"] / few["p99_ms"], 2)}))


if __name__ == "__main__":
    main()
