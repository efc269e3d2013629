"""Assets served per second: from disk vs from an S3-compatible store (docs/scaling.md).

    python bench/assets.py [--n 300] [--kib 256]

One in-process node per store (Quart's test client, as tests/conftest.py builds it), one
uploaded asset of KIB KiB, then N sequential `GET /files/<id>?exp&sig` (the link /content
redirects to):
  * file: the node reads and sends the bytes;
  * s3: the node checks the object (HEAD) and answers 302 to a presigned URL; the client
    then fetches the bytes from the store (moto's server on loopback).
Prints one JSON line: node-side requests/s (sequential: latency-bound) and the node's CPU
per request (all its threads; moto is another process) for each, end-to-end fetches/s for s3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conftest import start_node  # noqa: E402
from s3_server import S3Server, clean_env  # noqa: E402
from test_generation_support import local, upload_ok  # noqa: E402
from test_media_samples import image_bytes  # noqa: E402


async def measure(n: int, kib: int, **settings) -> dict:
    data = image_bytes("PNG", 8, 8) + os.urandom(kib * 1024)  # a PNG with trailing bytes
    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, Path(tmp), test_mode=True, **settings)
            org = await node.create_org()
            asset = await upload_ok(node, org["api_key"], data, ctype="image/png")
            r = await node.call("GET", f"/v1/generation/assets/{asset['id']}/content", org["api_key"])
            link = local(r.headers["Location"])
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                r = await node.client.get(link)
                body = await r.get_data()
                assert r.status_code in (200, 302), r.status_code
            node_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
            out = {"node_req_per_s": round(n / node_s, 1), "node_cpu_us_per_req": round(cpu_s / n * 1e6),
                   "status": r.status_code}
            if r.status_code == 302:
                url = r.headers["Location"]
                with httpx.Client() as http:
                    t0 = time.perf_counter()
                    for _ in range(n):
                        r2 = await node.client.get(link)
                        body = http.get(r2.headers["Location"]).content
                    out["end_to_end_per_s"] = round(n / (time.perf_counter() - t0), 1)
                    assert len(body) == len(data) and url
            else:
                assert len(body) == len(data)
            await node.parts.aclose()
            nursery.cancel_scope.cancel()
        node.store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--kib", type=int, default=256)
    args = ap.parse_args()
    os.environ.clear()
    os.environ.update(clean_env())
    server = S3Server().start()
    try:
        bucket = server.bucket()
        file = trio.run(measure, args.n, args.kib)
        s3 = trio.run(lambda: measure(args.n, args.kib, asset_store=f"s3://{bucket}/bench",
                                      s3_endpoint_url=server.endpoint))
    finally:
        server.stop()
    print(json.dumps({"n": args.n, "kib": args.kib, "file": file, "s3": s3,
                      "s3_vs_file_node": round(s3["node_req_per_s"] / file["node_req_per_s"], 2)}))


if __name__ == "__main__":
    main()
