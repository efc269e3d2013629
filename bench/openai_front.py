"""The OpenAI-compatible front door's overhead per call, against the same job through `/v1`,
in one run.

Starts `genservice serve` (test mode, temp data dir, free port), creates an organization,
then times, one call at a time and alternating, the same `proc-image` 1k job:

- front door: `POST /openai/v1/images/generations` (`response_format` `url`): one request
  that answers once the job has completed;
- `/v1`: `POST /v1/generation/models/proc-image`, then its event stream
  (`GET /v1/generation/requests/{id}/events`) read to the final status: the way a `/v1`
  client waits without polling.

Both with one keep-alive httpx client. Prints the p50 (and p90) of each in ms and
`front_vs_v1` (p50 ratio; goal <= 1.2). The LAST line is a JSON object.

    python bench/openai_front.py [--calls 60] [--warmup 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from server import create_org, running_server  # noqa: E402

FINAL = ("completed", "failed", "nsfw", "canceled")


def front_call(c: httpx.Client) -> float:
    t = time.perf_counter()
    r = c.post("/openai/v1/images/generations",
               json={"model": "proc-image", "prompt": "a red fox", "size": "1024x1024", "response_format": "url"})
    r.raise_for_status()
    assert r.json()["data"][0]["url"]
    return time.perf_counter() - t


def v1_call(c: httpx.Client) -> float:
    t = time.perf_counter()
    r = c.post("/v1/generation/models/proc-image", json={"prompt": "a red fox", "aspect_ratio": "1:1"})
    r.raise_for_status()
    rid = r.json()["request_id"]
    with c.stream("GET", f"/v1/generation/requests/{rid}/events") as s:
        for line in s.iter_lines():
            if line.startswith("data:") and json.loads(line[5:]).get("status") in FINAL:
                break
    return time.perf_counter() - t


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    with running_server() as (url, token, _):
        org = create_org(url, token)
        headers = {"Authorization": f"Bearer {org['api_key']}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
            for _ in range(args.warmup):
                front_call(c)
                v1_call(c)
            front, v1 = [], []
            for _ in range(args.calls):  # alternating: both see the same moment of the machine
                front.append(front_call(c))
                v1.append(v1_call(c))
    out = {"calls": args.calls,
           "front_p50_ms": round(statistics.median(front) * 1000, 2), "front_p90_ms": round(pct(front, 90) * 1000, 2),
           "v1_p50_ms": round(statistics.median(v1) * 1000, 2), "v1_p90_ms": round(pct(v1, 90) * 1000, 2)}
    out["front_vs_v1"] = round(out["front_p50_ms"] / out["v1_p50_ms"], 3)
    print(f"front door p50 {out['front_p50_ms']} ms (p90 {out['front_p90_ms']}), "
          f"/v1 submit+stream p50 {out['v1_p50_ms']} ms (p90 {out['v1_p90_ms']}), ratio {out['front_vs_v1']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
