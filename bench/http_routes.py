"""Authenticated read route against /healthz over loopback, in one run.

Starts `genservice serve` (test mode, temp data dir), creates an organization, then
alternates rounds of GET /healthz and GET /v1/projects (valid key) with the same client
and connection count, and reports requests/s and p50/p99 for each, plus the ratio of
medians. Last line: a JSON object with `authed_vs_healthz`.

    python bench/http_routes.py [--rounds 3] [--requests 3000] [--connections 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import trio

sys.path.insert(0, os.path.dirname(__file__))
from loadgen import median, run  # noqa: E402
from server import create_org, running_server  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--connections", type=int, default=10)
    args = ap.parse_args()
    print(f"# cpus={os.cpu_count()} python={platform.python_version()} trio={trio.__version__}")
    with running_server() as (url, token, _):
        org = create_org(url, token)
        host, port = url.removeprefix("http://").split(":")
        auth = {"Authorization": f"Bearer {org['api_key']}"}
        out = {"healthz": [], "projects": []}
        trio.run(run, host, int(port), "/healthz")  # warm-up
        for rnd in range(args.rounds):
            for name, path, headers in (("healthz", "/healthz", None), ("projects", "/v1/projects", auth)):
                res = trio.run(lambda: run(host, int(port), path, headers=headers, connections=args.connections,
                                           total=args.requests))
                assert set(res.statuses) == {200}, res.statuses
                out[name].append(res.summary())
                print(f"round {rnd} {name:9s} {res.summary()}")
    h = median([r["rps"] for r in out["healthz"]])
    p = median([r["rps"] for r in out["projects"]])
    summary = {
        "healthz_rps": h, "projects_rps": p,
        "healthz_p50_ms": median([r["p50_ms"] for r in out["healthz"]]),
        "healthz_p99_ms": median([r["p99_ms"] for r in out["healthz"]]),
        "projects_p50_ms": median([r["p50_ms"] for r in out["projects"]]),
        "projects_p99_ms": median([r["p99_ms"] for r in out["projects"]]),
        "authed_vs_healthz": round(p / h, 3),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
