"""Soak (reliability.md R11, R12): a mixed workload at half of the measured capacity for a
duration, on loopback, bounded, never in CI.

    .venv/bin/python bench/soak.py [--minutes 10] [--rate OPS] [--model-concurrency 32]
                                   [--orgs 4] [--seed N] [--sample 5] [--json FILE]

Starts a fresh test-mode `genservice serve` (bench/server.py), creates `--orgs`
organizations with 1,000,000 granted credits each, then:

1. Capacity. (a) HTTP: 10 s of closed-loop load with the mix below on 16 concurrent
   clients; the jobs it queued are canceled and waited for. (b) Jobs: a burst of 100
   `[[delay:1]]` submits, timed until all are final. Capacity = min(HTTP ops/s, job
   throughput / 0.2), since a fifth of the operations are submits. The rate is half of that
   (`--rate` sets it instead).
2. Load. Open loop at that rate for `--minutes` (default 10): each operation starts on
   schedule in its own task (at most 256 in flight; a late start is counted, not queued).
   Mix: 70% reads (balance 25, projects 15, status of a recent job 20, job list 10), 20%
   image submits with `[[delay:1]]`, 10% cancels of a recent job (5) and small PNG uploads
   (5). Every `--sample` seconds: the server's RSS and peak RSS, open descriptors and
   threads (/proc/<pid>), the sizes of the database file and its WAL, jobs not yet final.
3. Quiesce. After the load stops: seconds until every job is final.

Verdicts (exit status 1 if any fails): zero 5xx and zero transport errors; all jobs final
within 10 s after the load stops (R11); after warm-up (the first quarter of the run, at
most 2 minutes) RSS grows by at most 20 MiB, and open descriptors stay within +-5 (R12):
compared with no client connection open, before the load and after it, and as the lowest
count in the first and last thirds of the run (the count under load follows the client
connections of the moment);
the WAL is bounded (at most 64 MiB, and it grows by at most 16 MiB after warm-up: SQLite's
automatic checkpoints keep reusing it).

The built-in catalog lets the image model render 2 jobs at a time, so jobs would queue at
any useful rate (~1.6 jobs/s with `[[delay:1]]`); by default the soak runs the node with a
copy of the catalog where `proc-image` renders 32 at a time, so that the CPU bounds job
throughput instead (`--model-concurrency 2` keeps the shipped value).

Prints progress lines, a summary and, last, one JSON object.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict, deque
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import server_pid  # noqa: E402
from server import running_server  # noqa: E402

MiB = 1024 * 1024
FINAL = ("completed", "failed", "nsfw", "canceled")
IMAGE = "/v1/generation/capabilities/image.generate"
MIX = [  # (kind, weight in percent)
    ("balance", 25), ("projects", 15), ("status", 20), ("list", 10),
    ("submit", 20), ("cancel", 5), ("upload", 5),
]
MAX_IN_FLIGHT = 256


def catalog_with_concurrency(n: int) -> Path:
    text = (Path(__file__).resolve().parent.parent / "service" / "catalog" / "default.toml").read_text()
    text, count = re.subn(r'(id = "proc-image"(?:.|\n)*?concurrency = )\d+', lambda m: m.group(1) + str(n), text,
                          count=1)
    if count != 1:
        raise SystemExit("could not find proc-image's concurrency in the default catalog")
    path = Path(tempfile.mkdtemp(prefix="soak-catalog-")) / "catalog.toml"
    path.write_text(text)
    return path


def pngs(count: int) -> list[bytes]:
    from PIL import Image

    out = []
    rnd = random.Random(7)
    for _ in range(count):
        im = Image.new("RGB", (64, 48), tuple(rnd.randrange(256) for _ in range(3)))
        for _ in range(40):
            im.putpixel((rnd.randrange(64), rnd.randrange(48)), tuple(rnd.randrange(256) for _ in range(3)))
        buf = io.BytesIO()
        im.save(buf, "PNG")
        out.append(buf.getvalue())
    return out


class Proc:
    """The server process as /proc shows it."""

    def __init__(self, pid: int, data_dir: Path) -> None:
        self.pid = pid
        self.data_dir = data_dir
        self.db = data_dir / "genservice.db"

    def status(self) -> dict[str, int]:
        out = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                out[key] = int(value.split()[0])
        return out

    def sample(self) -> dict:
        st = self.status()
        wal = self.db.with_name(self.db.name + "-wal")
        return {
            "rss_mib": round(st["VmRSS"] / 1024, 1), "peak_rss_mib": round(st["VmHWM"] / 1024, 1),
            "threads": st["Threads"], "fds": len(list(Path(f"/proc/{self.pid}/fd").iterdir())),
            "db_mib": round(self.db.stat().st_size / MiB, 2),
            "wal_mib": round(wal.stat().st_size / MiB, 2) if wal.exists() else 0.0,
            "open_jobs": self.open_jobs(),
        }

    def open_jobs(self) -> int:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
        try:
            marks = ",".join("?" * len(FINAL))
            return conn.execute(f"SELECT COUNT(*) FROM jobs WHERE status NOT IN ({marks})", FINAL).fetchone()[0]
        finally:
            conn.close()


class Workload:
    def __init__(self, url: str, token: str, orgs: list[dict], seed: int) -> None:
        self.url = url
        self.token = token
        self.orgs = orgs
        self.rnd = random.Random(seed)
        self.kinds = [k for k, w in MIX for _ in range(w)]
        self.recent: dict[str, deque] = {o["organization_id"]: deque(maxlen=200) for o in orgs}
        self.files = pngs(16)
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.errors: list[str] = []
        self.submitted = 0
        self.client: httpx.AsyncClient | None = None

    async def __aenter__(self):
        self.new_client()
        return self

    async def __aexit__(self, *exc):
        await self.client.aclose()

    def new_client(self) -> None:
        # idle connections let go before the node's 5 s keep-alive closes them (docs/clients.md):
        # with httpx's default (also 5 s) a request can meet that close and get a reset
        self.client = httpx.AsyncClient(base_url=self.url, timeout=30,
                                        limits=httpx.Limits(max_connections=64, max_keepalive_connections=64,
                                                            keepalive_expiry=4.0))

    async def idle_sample(self, proc: "Proc") -> dict:
        """The server with no client connection open (ours closed, a moment to notice)."""
        await self.client.aclose()
        # Hypercorn may keep a connection the client closed until its keep-alive timeout
        # (5 s, service/main.py) has passed: wait that out.
        await trio.sleep(6.0)
        sample = await trio.to_thread.run_sync(proc.sample)
        self.new_client()
        return sample

    def reset_stats(self) -> None:
        self.latencies.clear()
        self.statuses.clear()
        self.errors.clear()

    async def one(self, kind: str | None = None) -> None:
        kind = kind or self.rnd.choice(self.kinds)
        org = self.rnd.choice(self.orgs)
        oid = org["organization_id"]
        h = {"Authorization": f"Bearer {org['api_key']}"}
        recent = self.recent[oid]
        t0 = time.perf_counter()
        try:
            if kind == "balance":
                r = await self.client.get("/v1/billing/balance", headers=h)
            elif kind == "projects":
                r = await self.client.get("/v1/projects", headers=h)
            elif kind == "list":
                r = await self.client.get("/v1/generation/requests?limit=20", headers=h)
            elif kind == "status" and recent:
                r = await self.client.get(f"/v1/generation/requests/{self.rnd.choice(recent)}/status", headers=h)
            elif kind == "cancel" and recent:
                r = await self.client.post(f"/v1/generation/requests/{self.rnd.choice(recent)}/cancel", headers=h)
            elif kind == "upload":
                r = await self.client.post("/v1/generation/uploads", headers=h,
                                           files={"file": ("soak.png", self.rnd.choice(self.files), "image/png")})
            else:  # submit (also a status/cancel before any job exists)
                kind = "submit"
                r = await self.client.post(IMAGE, headers=h, json={"prompt": f"soak [[delay:1]] {self.submitted}"})
                self.submitted += 1
                if r.status_code == 202:
                    recent.append(r.json()["request_id"])
        except (httpx.TransportError, trio.TooSlowError) as e:
            self.errors.append(f"{kind}: {type(e).__name__}: {e}")
            return
        self.latencies[kind].append((time.perf_counter() - t0) * 1000)
        self.statuses[kind][r.status_code] += 1

    def five_xx(self) -> int:
        return sum(n for per in self.statuses.values() for s, n in per.items() if s >= 500)

    def summary(self) -> dict:
        out = {}
        for kind, xs in sorted(self.latencies.items()):
            xs = sorted(xs)
            out[kind] = {"count": len(xs), "p50_ms": round(xs[len(xs) // 2], 1),
                         "p99_ms": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 1),
                         "statuses": {str(k): v for k, v in sorted(self.statuses[kind].items())}}
        return out


async def closed_loop(w: Workload, clients: int, seconds: float) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def client():
        nonlocal done
        while time.perf_counter() < deadline:
            await w.one()
            done += 1

    t0 = time.perf_counter()
    async with trio.open_nursery() as n:
        for _ in range(clients):
            n.start_soon(client)
    return done / (time.perf_counter() - t0)


async def cancel_open_jobs(w: Workload, proc: Proc) -> None:
    conn = sqlite3.connect(f"file:{proc.db}?mode=ro", uri=True, timeout=5)
    try:
        marks = ",".join("?" * len(FINAL))
        rows = conn.execute(f"SELECT id, organization_id FROM jobs WHERE status NOT IN ({marks})", FINAL).fetchall()
    finally:
        conn.close()
    keys = {o["organization_id"]: o["api_key"] for o in w.orgs}
    limiter = trio.CapacityLimiter(16)

    async def cancel(job_id, org_id):
        async with limiter:
            await w.client.post(f"/v1/generation/requests/{job_id}/cancel",
                                headers={"Authorization": f"Bearer {keys[org_id]}"})

    async with trio.open_nursery() as n:
        for job_id, org_id in rows:
            n.start_soon(cancel, job_id, org_id)


async def wait_all_final(proc: Proc, timeout: float) -> float | None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc.open_jobs() == 0:
            return time.perf_counter() - t0
        await trio.sleep(0.1)
    return None


async def job_throughput(w: Workload, proc: Proc, burst: int) -> float:
    t0 = time.perf_counter()
    async with trio.open_nursery() as n:
        for _ in range(burst):
            n.start_soon(w.one, "submit")
    waited = await wait_all_final(proc, 600)
    if waited is None:
        raise SystemExit("the calibration jobs did not finish within 10 minutes")
    return burst / (time.perf_counter() - t0)


async def open_loop(w: Workload, proc: Proc, rate: float, seconds: float, sample_every: float,
                    samples: list[dict]) -> dict:
    limiter = trio.CapacityLimiter(MAX_IN_FLIGHT)
    late = started = 0
    t_start = trio.current_time()

    async def op():
        async with limiter:
            await w.one()

    async def sampler(task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        while True:
            s = await trio.to_thread.run_sync(proc.sample)
            s["t"] = round(trio.current_time() - t_start, 1)
            s["5xx"] = w.five_xx()
            s["errors"] = len(w.errors)
            samples.append(s)
            print(f"  t={s['t']:6.1f}s rss {s['rss_mib']:6.1f} MiB  fds {s['fds']:3d}  threads {s['threads']:3d}"
                  f"  db {s['db_mib']:7.2f} MiB  wal {s['wal_mib']:6.2f} MiB  open jobs {s['open_jobs']:4d}"
                  f"  5xx {s['5xx']}  errors {s['errors']}", flush=True)
            await trio.sleep(sample_every)

    async with trio.open_nursery() as outer:
        await outer.start(sampler)
        async with trio.open_nursery() as n:
            next_t = trio.current_time()
            end = next_t + seconds
            i = 0
            while next_t < end:
                await trio.sleep_until(next_t)
                if limiter.available_tokens == 0:
                    late += 1
                else:
                    started += 1
                    n.start_soon(op)
                i += 1
                next_t = t_start + i / rate
        outer.cancel_scope.cancel()
    return {"started": started, "late": late, "seconds": round(trio.current_time() - t_start, 1)}


def verdicts(samples: list[dict], warmup_s: float, quiesce_s: float | None, w: Workload,
             idle_before: dict, idle_after: dict) -> dict:
    """Open descriptors under load count the client connections of the moment, so a leak is
    judged from the server with no connection open (before the load, after quiescing) and from
    the lowest count early and late in the run."""
    after = [s for s in samples if s["t"] >= warmup_s] or samples[-1:]
    base = after[0]
    rss_growth = round(max(s["rss_mib"] for s in after) - base["rss_mib"], 1)
    rss_end_growth = round(after[-1]["rss_mib"] - base["rss_mib"], 1)
    fds = [s["fds"] for s in after]
    third = max(1, len(fds) // 3)
    fds_trend = min(fds[-third:]) - min(fds[:third])
    fds_idle = idle_after["fds"] - idle_before["fds"]
    wal_max = max(s["wal_mib"] for s in samples)
    wal_growth = round(max(s["wal_mib"] for s in after) - base["wal_mib"], 2)
    checks = {
        "zero_5xx": w.five_xx() == 0,
        "zero_transport_errors": not w.errors,
        "jobs_final_within_10s": quiesce_s is not None and quiesce_s <= 10.0,
        "rss_growth_after_warmup_le_20mib": rss_growth <= 20.0,
        "fds_constant_pm5": abs(fds_idle) <= 5 and fds_trend <= 5,
        "wal_bounded": wal_max <= 64.0 and wal_growth <= 16.0,
    }
    figures = {"warmup_s": warmup_s, "rss_at_warmup_mib": base["rss_mib"], "rss_growth_mib": rss_growth,
               "rss_end_growth_mib": rss_end_growth, "fds_range_under_load": [min(fds), max(fds)], "fds_trend_of_minimum": fds_trend,
               "fds_idle_before_after": [idle_before["fds"], idle_after["fds"]],
               "rss_idle_before_after_mib": [idle_before["rss_mib"], idle_after["rss_mib"]],
               "wal_max_mib": wal_max, "wal_growth_after_warmup_mib": wal_growth,
               "db_end_mib": samples[-1]["db_mib"], "quiesce_s": None if quiesce_s is None else round(quiesce_s, 2)}
    return {"checks": checks, "figures": figures}


async def run(args) -> dict:
    extra = {}
    if args.model_concurrency != 2:
        extra["GENSERVICE_CATALOG_FILE"] = str(catalog_with_concurrency(args.model_concurrency))
    with running_server(extra) as (url, token, data_dir):
        pid = server_pid(url)
        if pid is None:
            raise SystemExit("could not find the server process")
        proc = Proc(pid, Path(data_dir))
        orgs = []
        async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as op:
            for i in range(args.orgs):
                r = await op.post("/operator/v1/organizations", json={"name": f"Soak {i}",
                                                                      "owner_email": f"owner{i}@soak.test"})
                r.raise_for_status()
                org = r.json()["data"]
                r = await op.post(f"/operator/v1/organizations/{org['organization_id']}/grants",
                                  json={"credits": "1000000", "reason": "soak"})
                r.raise_for_status()
                orgs.append(org)
        async with Workload(url, token, orgs, args.seed) as w:
            if args.rate:
                rate, calibration = args.rate, {"rate_given": args.rate}
            else:
                http_cap = await closed_loop(w, 16, args.calibrate)
                await cancel_open_jobs(w, proc)
                if await wait_all_final(proc, 120) is None:
                    raise SystemExit("calibration jobs did not end after their cancel")
                jobs_cap = await job_throughput(w, proc, args.burst)
                capacity = min(http_cap, jobs_cap / 0.2)
                rate = round(capacity / 2, 1)
                calibration = {"http_ops_per_s": round(http_cap, 1), "jobs_per_s": round(jobs_cap, 2),
                               "capacity_ops_per_s": round(capacity, 1), "rate": rate,
                               "calibration_5xx": w.five_xx(), "calibration_errors": len(w.errors)}
                print(f"capacity: HTTP mix {http_cap:.1f} ops/s, jobs {jobs_cap:.2f}/s -> {capacity:.1f} ops/s;"
                      f" soak rate {rate} ops/s", flush=True)
                calibration_5xx, calibration_errors = w.five_xx(), list(w.errors)
                w.reset_stats()
            idle_before = await w.idle_sample(proc)
            seconds = args.minutes * 60
            warmup = min(120.0, seconds / 4)
            samples: list[dict] = []
            print(f"load: {rate} ops/s for {seconds:.0f} s (warm-up {warmup:.0f} s), sampling every {args.sample} s",
                  flush=True)
            load = await open_loop(w, proc, rate, seconds, args.sample, samples)
            stopped = time.perf_counter()
            quiesce = await wait_all_final(proc, 120)
            final_sample = proc.sample()
            final_sample["t"] = round(samples[-1]["t"] + (time.perf_counter() - stopped), 1)
            samples.append(final_sample)
            idle_after = await w.idle_sample(proc)
            result = verdicts(samples, warmup, quiesce, w, idle_before, idle_after)
            if not args.rate:
                result["checks"]["calibration_zero_5xx"] = calibration_5xx == 0 and not calibration_errors
            return {"minutes": args.minutes, "rate": rate, "orgs": args.orgs, "seed": args.seed,
                    "model_concurrency": args.model_concurrency, "calibration": calibration, "load": load,
                    "ops": w.summary(), "jobs_submitted": w.submitted, "errors": w.errors[:10],
                    "samples": samples, **result, "ok": all(result["checks"].values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=None, help="operations per second (default: half the capacity)")
    ap.add_argument("--model-concurrency", type=int, default=32, help="proc-image renders at once (shipped: 2)")
    ap.add_argument("--orgs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--calibrate", type=float, default=10.0, help="seconds of the HTTP capacity run")
    ap.add_argument("--burst", type=int, default=100, help="jobs of the job-throughput run")
    ap.add_argument("--json", help="also write the result (with every sample) to this file")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1_000_000)
    print(f"seed {args.seed}", flush=True)
    result = trio.run(run, args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print("summary:")
    for name, ok in result["checks"].items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    print("  figures:", json.dumps(result["figures"]))
    for kind, s in result["ops"].items():
        print(f"  {kind:9s} {s['count']:7d}  p50 {s['p50_ms']:7.1f} ms  p99 {s['p99_ms']:7.1f} ms  {s['statuses']}")
    compact = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(compact))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
