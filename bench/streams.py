"""Event streams against polling: N clients each follow one job to its final status.

For each N in --sizes: a fresh `genservice serve` (test mode, a catalog whose image model
takes any number of jobs at once), N jobs submitted that each render --render seconds plus
N/100 (`[[delay:S]] [[fail:internal]]`: a render that takes that long, then ends by itself),
and N clients attach, one per job: a job event stream (`GET .../events`), or (at N up to
--poll-max) a poller of the status route every --poll-every seconds. Each client stops at its
job's final status.

Printed per N and mode: delivery latency of the final status from its commit (`finished_at`,
service time) to the client, p50 and p99; the node's RSS growth per open stream; the node's
CPU (user + system, /proc) per delivered final status over the following window (first
connect -> every final received: connecting, following and the jobs' own endings, the same
jobs in both modes). Last line: JSON with
`streams_max` (largest N that ran clean), `final_p99_s_1000`, `cpu_vs_polling` (node CPU per
final when polling / with streams, at the largest N both ran) and `kb_per_stream` (at
`streams_max`).

    .venv/bin/python bench/streams.py [--sizes 100,1000,5000] [--render 30] [--poll-max 1000]

Loopback only; every client is a raw socket in one trio process (bounded in count and time).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import start_server  # noqa: E402

CATALOG = """
[[models]]
id = "bench-image"
capability = "image.generate"
backend = "procedural_image"
description = "The procedural image model, any number of jobs at once (bench only)."
resolutions = ["1k"]
concurrency = 100000
prices = [{ resolution = "1k", credits = "0.01" }]
"""
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Setup:
    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port


async def submit_jobs(setup: Setup, n: int, render_s: float) -> list[str]:
    ids: list[str] = []
    headers = {"Authorization": f"Bearer {setup.key}"}
    async with httpx.AsyncClient(base_url=setup.url, headers=headers, timeout=60,
                                 limits=httpx.Limits(max_connections=32)) as client:
        async def worker(count: int) -> None:
            for _ in range(count):
                r = await client.post("/v1/generation/models/bench-image", json={"prompt": f"x [[delay:{render_s:.0f}]] [[fail:internal]]"})
                r.raise_for_status()
                ids.append(r.json()["request_id"])

        async with trio.open_nursery() as nursery:
            for i in range(32):
                nursery.start_soon(worker, n // 32 + (1 if i < n % 32 else 0))
    return ids


class Follower:
    """One client following one job; `arrived` is the wall time the final status came."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.attached = trio.Event()
        self.arrived: float | None = None
        self.finished_at: float | None = None
        self.error: str | None = None
        self.polls = 0


FINAL = (b'"status":"failed"', b'"status":"completed"', b'"status":"canceled"')


def _final_in(buf: bytes) -> dict | None:
    for line in buf.split(b"\n"):
        if line.startswith(b"data: ") and any(f in line for f in FINAL):
            return json.loads(line[6:])
        if line.startswith(b"{") and any(f in line for f in FINAL):  # a status route body
            return json.loads(line)
    return None


async def stream_follower(setup: Setup, f: Follower) -> None:
    try:
        sock = await trio.open_tcp_stream(setup.host, setup.port)
        request = (f"GET /v1/generation/requests/{f.job_id}/events HTTP/1.1\r\nHost: {setup.host}\r\n"
                   f"Authorization: Bearer {setup.key}\r\n\r\n").encode()
        async with sock:
            await sock.send_all(request)
            buf = b""
            while True:
                chunk = await sock.receive_some(65536)
                if not chunk:
                    f.error = "closed early"
                    return
                buf += chunk
                if not f.attached.is_set() and b"event: status" in buf:
                    f.attached.set()
                final = _final_in(buf)
                if final is not None:
                    f.arrived, f.finished_at = time.time(), ts(final["finished_at"])
                    return
                buf = buf[buf.rfind(b"\n\n") + 2:] if b"\n\n" in buf else buf
    except (OSError, trio.BrokenResourceError) as e:
        f.error = repr(e)
        f.attached.set()


async def poll_follower(setup: Setup, f: Follower, every: float) -> None:
    try:
        sock = await trio.open_tcp_stream(setup.host, setup.port)
        request = (f"GET /v1/generation/requests/{f.job_id}/status HTTP/1.1\r\nHost: {setup.host}\r\n"
                   f"Authorization: Bearer {setup.key}\r\n\r\n").encode()
        async with sock:
            while True:
                await sock.send_all(request)
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += await sock.receive_some(65536)
                head, body = buf.split(b"\r\n\r\n", 1)
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(body) < length:
                    body += await sock.receive_some(65536)
                f.attached.set()
                f.polls += 1
                if any(final in body for final in FINAL):  # parse only the final answer
                    f.arrived, f.finished_at = time.time(), ts(json.loads(body)["finished_at"])
                    return
                await trio.sleep(every)
    except (OSError, trio.BrokenResourceError) as e:
        f.error = repr(e)
        f.attached.set()


async def run_mode(setup: Setup, pid: int, n: int, mode: str, render_s: float, every: float) -> dict:
    # every job renders render_s after its submit, and each client attaches within the first
    # part of that (submitting and attaching N take about N/100 s here)
    ids = await submit_jobs(setup, n, render_s + n / 100)
    rss_before = rss_kb(pid)
    followers = [Follower(i) for i in ids]
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            limiter = trio.CapacityLimiter(50)  # connects at once (within the listen backlog)

            async def attach(f: Follower) -> None:
                async with limiter:
                    if mode == "stream":
                        nursery.start_soon(stream_follower, setup, f)
                    else:
                        nursery.start_soon(poll_follower, setup, f, every)
                    await f.attached.wait()

            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            async with trio.open_nursery() as attaching:
                for f in followers:
                    attaching.start_soon(attach, f)
            rss_open = rss_kb(pid)
        cpu1, t1 = cpu_seconds(pid), time.monotonic()
    ok = [f for f in followers if f.arrived is not None]
    latencies = [f.arrived - f.finished_at for f in ok]
    out = {"n": n, "mode": mode, "delivered": len(ok), "errors": sum(1 for f in followers if f.error),
           "final_p50_s": round(pct(latencies, 0.5), 4), "final_p99_s": round(pct(latencies, 0.99), 4),
           "node_cpu_s": round(cpu1 - cpu0, 3), "window_s": round(t1 - t0, 1),
           "cpu_ms_per_final": round((cpu1 - cpu0) * 1000 / max(1, len(ok)), 3)}
    if mode == "stream":
        out["kb_per_stream"] = round((rss_open - rss_before) / n, 2)
    else:  # how often the pollers managed to ask (1.0 = every --poll-every seconds)
        out["polls_per_s_each"] = round(sum(f.polls for f in followers) / n / max(t1 - t0, 1e-9), 2)
    return out


async def one_size(n: int, args) -> list[dict]:
    catalog = Path(tempfile.mkdtemp(prefix="genservice-bench-")) / "catalog.toml"
    catalog.write_text(CATALOG)
    # thousands of streams of one key: past the per-key and per-organization bounds (docs/streams.md)
    node, url, token, _data = start_server({"GENSERVICE_CATALOG_FILE": str(catalog),
                                            "GENSERVICE_MAX_STREAMS_PER_KEY": "0", "GENSERVICE_MAX_STREAMS_PER_ORG": "0"})
    try:
        op = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=url, headers=op, timeout=60) as c:
            org = (await c.post("/operator/v1/organizations", json={"name": f"Bench{n}",
                                                                      "owner_email": f"b{n}@bench.test"})).json()["data"]
            r = await c.post(f"/operator/v1/organizations/{org['organization_id']}/grants",
                             json={"credits": "100000.00", "reason": "bench"})
            r.raise_for_status()
        setup = Setup(url, org["api_key"])
        rows = [await run_mode(setup, node.pid, n, "stream", args.render, args.poll_every)]
        if n <= args.poll_max:
            rows.append(await run_mode(setup, node.pid, n, "poll", args.render, args.poll_every))
        return rows
    finally:
        node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--render", type=float, default=30.0, help="seconds each job renders (at least)")
    parser.add_argument("--poll-every", type=float, default=1.0)
    parser.add_argument("--poll-max", type=int, default=1000, help="largest N also run with pollers")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the server inherits it too
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, open files {hard}")
    summary: dict = {"rows": []}
    for n in [int(x) for x in args.sizes.split(",")]:
        try:
            rows = trio.run(one_size, n, args)
        except Exception as e:  # noqa: BLE001 - a size that fails is reported, the rest still run
            print(f"N={n}: failed: {e!r}")
            continue
        for row in rows:
            print(" ".join(f"{k}={v}" for k, v in row.items()))
            summary["rows"].append(row)
    streams = [r for r in summary["rows"] if r["mode"] == "stream" and r["delivered"] == r["n"] and not r["errors"]]
    polls = {r["n"]: r for r in summary["rows"] if r["mode"] == "poll" and r["delivered"] == r["n"]}
    best = max(streams, key=lambda r: r["n"], default=None)
    both = [r for r in streams if r["n"] in polls]
    at = max(both, key=lambda r: r["n"], default=None)
    summary.update({
        "streams_max": best["n"] if best else 0,
        "final_p99_s_1000": next((r["final_p99_s"] for r in streams if r["n"] == 1000), None),
        "kb_per_stream": best["kb_per_stream"] if best else None,
        "cpu_vs_polling": round(polls[at["n"]]["cpu_ms_per_final"] / at["cpu_ms_per_final"], 2) if at else None,
        "cpu_vs_polling_at": at["n"] if at else None,
        "load_after": round(os.getloadavg()[0], 2),
    })
    print(json.dumps(summary, separators=(",", ":")))


if __name__ == "__main__":
    main()
