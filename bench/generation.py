"""Generation over loopback, in one run.

Starts `genservice serve` (test mode, temp data dir, free port), creates an organization
with enough credits, then measures:

1. submit+complete throughput of the image model (`proc-image` 1k, no delay): N jobs
   submitted by C concurrent clients, each polling its job to `completed`;
2. status polls per second (GET /v1/generation/requests/{id}/status, a completed job)
   against GET /healthz, same load generator and connection count, alternating rounds;
   the ratio of medians is `polls_vs_healthz` (target >= 0.7);
3. time to render and encode the 5 s clip of `camera-move` at each resolution (submit ->
   `completed`, from a 1280x720 start frame), median of `--video-runs`.

The LAST line is a JSON object with at least `polls_vs_healthz` and `video_s`.

    python bench/generation.py [--jobs 200] [--clients 16] [--rounds 3] [--requests 3000]
                               [--connections 10] [--video-runs 2]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import time

import httpx
import trio
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))
from loadgen import median, run  # noqa: E402
from server import create_org, running_server  # noqa: E402

FINAL = {"completed", "failed", "nsfw", "canceled"}


async def wait_final(client: httpx.AsyncClient, rid: str, every: float = 0.02) -> dict:
    while True:
        r = await client.get(f"/v1/generation/requests/{rid}/status")
        st = r.json()
        if st["status"] in FINAL:
            return st
        await trio.sleep(every)


async def image_throughput(url: str, key: str, jobs: int, clients: int) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    done: list[float] = []
    statuses: dict[str, int] = {}
    todo = list(range(jobs))
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as client:
        started = time.perf_counter()

        async def worker():
            while todo:
                i = todo.pop()
                t0 = time.perf_counter()
                r = await client.post("/v1/generation/capabilities/image.generate", json={"prompt": f"bench {i}"})
                assert r.status_code == 202, r.text
                st = await wait_final(client, r.json()["request_id"])
                statuses[st["status"]] = statuses.get(st["status"], 0) + 1
                done.append(time.perf_counter() - t0)

        async with trio.open_nursery() as n:
            for _ in range(clients):
                n.start_soon(worker)
        elapsed = time.perf_counter() - started
    return {"jobs": jobs, "clients": clients, "seconds": round(elapsed, 2), "jobs_per_s": round(jobs / elapsed, 1),
            "job_p50_s": round(statistics.median(done), 3), "job_max_s": round(max(done), 3), "statuses": statuses}


async def one_completed(url: str, key: str) -> str:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        r = await c.post("/v1/generation/capabilities/image.generate", json={"prompt": "poll me"})
        rid = r.json()["request_id"]
        await wait_final(c, rid)
        return rid


async def video_times(url: str, key: str, runs: int) -> dict:
    buf = io.BytesIO()
    Image.effect_mandelbrot((1280, 720), (-2.0, -1.2, 1.0, 1.2), 60).convert("RGB").save(buf, "PNG")
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as c:
        r = await c.post("/v1/generation/uploads", files={"file": ("frame.png", buf.getvalue(), "image/png")})
        assert r.status_code == 201, r.text
        frame = r.json()["data"]["id"]
        out: dict[str, list[float]] = {}
        for resolution in ("480p", "720p"):
            for i in range(runs):
                t0 = time.perf_counter()
                r = await c.post("/v1/generation/capabilities/video.generate", json={
                    "prompt": f"slow drift {i}", "resolution": resolution, "inputs": {"start_frame": [frame]}})
                assert r.status_code == 202, r.text
                st = await wait_final(c, r.json()["request_id"], every=0.02)
                assert st["status"] == "completed", st
                out.setdefault(resolution, []).append(time.perf_counter() - t0)
                v = st["video"]
                print(f"video {resolution} run {i}: {out[resolution][-1]:.2f} s "
                      f"({v['width']}x{v['height']}, {v['duration_s']} s)")
    return {res: round(statistics.median(ts), 2) for res, ts in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--connections", type=int, default=10)
    ap.add_argument("--video-runs", type=int, default=2)
    args = ap.parse_args()
    print(f"# cpus={os.cpu_count()} python={platform.python_version()} trio={trio.__version__}")
    with running_server() as (url, token, _):
        org = create_org(url, token)
        key = org["api_key"]
        r = httpx.post(f"{url}/operator/v1/organizations/{org['organization_id']}/grants",
                       json={"credits": "100000.00", "reason": "bench"},
                       headers={"Authorization": f"Bearer {token}"}, timeout=30)
        r.raise_for_status()

        thr = trio.run(image_throughput, url, key, args.jobs, args.clients)
        print(f"image throughput: {thr}")

        rid = trio.run(one_completed, url, key)
        host, port = url.removeprefix("http://").split(":")
        auth = {"Authorization": f"Bearer {key}"}
        polls = {"healthz": [], "status": []}
        trio.run(lambda: run(host, int(port), "/healthz", connections=args.connections, total=500))  # warm-up
        for rnd in range(args.rounds):
            for name, path, headers in (("healthz", "/healthz", None),
                                        ("status", f"/v1/generation/requests/{rid}/status", auth)):
                res = trio.run(lambda: run(host, int(port), path, headers=headers, connections=args.connections,
                                           total=args.requests))
                assert set(res.statuses) == {200}, res.statuses
                polls[name].append(res.summary())
                print(f"round {rnd} {name:8s} {res.summary()}")

        video = trio.run(video_times, url, key, args.video_runs)

    h = median([x["rps"] for x in polls["healthz"]])
    s = median([x["rps"] for x in polls["status"]])
    summary = {
        "image_jobs_per_s": thr["jobs_per_s"],
        "image_job_p50_s": thr["job_p50_s"],
        "healthz_rps": h,
        "status_rps": s,
        "status_p50_ms": median([x["p50_ms"] for x in polls["status"]]),
        "status_p99_ms": median([x["p99_ms"] for x in polls["status"]]),
        "polls_vs_healthz": round(s / h, 3),
        "video_s": video,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
