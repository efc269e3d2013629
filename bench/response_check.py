"""What the response check (service/http/responses/check.py) costs on a hot route.

An in-process node (test mode, temp data dir, Quart's test client: no socket, so the
app's own time is all that is measured and the check's share is at its largest) with one
completed job. Then alternating rounds of GET /v1/generation/requests/<id>/status with the
check on and off (`app.config["CHECK_RESPONSES"]`), and the check alone on that answer.
Last line: a JSON object with per-request medians (µs) and the ratio on/off.

The status route now declares its shape by its return annotation (mypy holds it), so the
check skips it and on/off should be equal; `check_alone_us` still gives what checking one
JobStatus answer costs, the figure for the routes the check still covers.

    python bench/response_check.py [--rounds 5] [--requests 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from service.clock import Clock  # noqa: E402
from service.config import Settings  # noqa: E402
from service.http.app import create_app  # noqa: E402
from service.http.responses import JobStatus  # noqa: E402
from service.http.responses.check import check  # noqa: E402
from service.node import build  # noqa: E402
from service.storage.db import Store  # noqa: E402
from service.storage.migrate import apply_all  # noqa: E402

OPERATOR = "bench-operator"


async def main(rounds: int, requests: int) -> dict:
    data = Path(tempfile.mkdtemp(prefix="genservice-bench-"))
    settings = Settings(data_dir=data, operator_token=OPERATOR, base_url="http://testserver",
                        rate_limit_per_key=0, max_active_jobs_per_org=0, test_mode=True)
    apply_all(settings.db_path)
    store = Store(settings.db_path)
    parts = build(settings, store, Clock())
    async with trio.open_nursery() as nursery:
        await parts.start(nursery)
        app = create_app(parts)
        client = app.test_client()
        op = {"Authorization": f"Bearer {OPERATOR}"}
        r = await client.post("/operator/v1/organizations", headers=op,
                              json={"name": "Bench", "owner_email": "b@bench.test", "approved": True})
        key = (await r.get_json())["data"]["api_key"]
        auth = {"Authorization": f"Bearer {key}"}
        r = await client.post("/v1/generation/capabilities/image.generate", headers=auth, json={"prompt": "a fox"})
        path = f"/v1/generation/requests/{(await r.get_json())['request_id']}/status"
        while True:
            r = await client.get(path, headers=auth)
            body = await r.get_data()
            if json.loads(body)["status"] == "completed":
                break
            await trio.sleep(0.05)
        per = {True: [], False: []}
        for _ in range(50):  # warm-up
            await client.get(path, headers=auth)
        for rnd in range(rounds):
            for on in (False, True):
                app.config["CHECK_RESPONSES"] = on
                started = time.perf_counter()
                for _ in range(requests):
                    r = await client.get(path, headers=auth)
                    assert r.status_code == 200
                us = (time.perf_counter() - started) / requests * 1e6
                per[on].append(us)
                print(f"round {rnd} check={'on ' if on else 'off'} {us:8.1f} µs/request")
        n = 20000
        started = time.perf_counter()
        for _ in range(n):
            check(JobStatus, body)
        alone = (time.perf_counter() - started) / n * 1e6
        await parts.aclose()
        nursery.cancel_scope.cancel()
    store.close()
    off, on = statistics.median(per[False]), statistics.median(per[True])
    return {"status_route_off_us": round(off, 1), "status_route_on_us": round(on, 1),
            "on_vs_off": round(on / off, 3), "check_alone_us": round(alone, 1), "answer_bytes": len(body)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    print(f"# cpus={os.cpu_count()} python={platform.python_version()} load={os.getloadavg()}")
    print(json.dumps(trio.run(main, args.rounds, args.requests)))
