"""Time the node takes to refuse hostile JSON bodies just under the 1 MiB limit (many members,
a long array, a 500,000-digit number, an overflowing exponent), next to a plain 1 MiB string,
over loopback against a real `genservice serve`. A parse that grew faster than the body would
show here as a ratio far above 1; tests check only that each answer is a 4xx.

    python bench/hostile_json.py [--repeat 5]
Last line: a JSON object with each body's median milliseconds and `worst_vs_plain`.
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

MiB = 1 << 20


def bodies(field: str) -> dict[str, bytes]:
    head = b'{"' + field.encode() + b'":"'
    return {
        "plain_string": head + b"x" * (MiB - len(head) - 2) + b'"}',
        "members_70k": b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(70_000)) + b"}",
        "array_400k": b'{"' + field.encode() + b'":[' + b",".join([b"0"] * 400_000) + b"]}",
        "digits_500k": b'{"' + field.encode() + b'":' + b"9" * 500_000 + b"}",
        "exponent": b'{"' + field.encode() + b'":1e999999}',
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"# cpus={os.cpu_count()}")
    with running_server() as (url, token, _):
        org = create_org(url, token)
        auth = {"Authorization": f"Bearer {org['api_key']}", "Content-Type": "application/json"}
        out = {}
        with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
            for name, raw in bodies("prompt").items():
                times = []
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    r = client.post("/v1/generation/capabilities/image.generate", content=raw)
                    times.append((time.perf_counter() - started) * 1000)
                    assert r.status_code < 500, (name, r.status_code)
                out[name] = round(statistics.median(times), 1)
                print(f"{name:14s} {len(raw):8d} bytes  status {r.status_code}  median {out[name]} ms")
    out["worst_vs_plain"] = round(max(v for k, v in out.items() if k != "plain_string") / out["plain_string"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
