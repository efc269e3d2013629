"""Production figures of issue 17, against real `genservice serve` nodes on loopback:

- backup: a node holding --jobs jobs (one real job's row cloned into the database while
  the node is stopped), then API p99 for --seconds without a backup and while
  `genservice admin backup` runs; the backup's time; `genservice admin restore`'s time.
- retention: a node keeping finished rows --retention seconds, under a steady load that
  writes events, webhook deliveries, job webhooks and idempotency keys for --minutes; every
  10 s the rows of the tables retention bounds (flat once the retention age has passed),
  those of the business records kept forever (jobs, keys: they grow with the load), and the
  database size (file + WAL).
- flood: limits on (50/s per key, bursts of 200); key A floods from 16 clients while key B
  asks 10 times a second; B's p99 alone and during the flood, and A's 429s.

    .venv/bin/python reliability/production.py [--only backup,retention,flood] [--jobs 100000]

Loopback only, bounded in count and time. The last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from server import start_server  # noqa: E402

OP = {"Authorization": "Bearer bench-operator"}


def p99(values: list[float]) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(0.99 * len(values)))] * 1000, 2) if values else float("nan")


def make_org(url: str, name: str) -> str:
    r = httpx.post(url + "/operator/v1/organizations", json={"name": name, "owner_email": f"{name}@p.test"},
                   headers=OP, timeout=30)
    r.raise_for_status()
    return r.json()["data"]["api_key"]


def timed_gets(url: str, key: str, path: str, stop: threading.Event, every: float = 0.0) -> list[float]:
    out = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        while not stop.is_set():
            t = time.perf_counter()
            c.get(path)
            out.append(time.perf_counter() - t)
            if every:
                time.sleep(every)
    return out


def during(fn, url: str, key: str, path: str, every: float = 0.05) -> tuple[list[float], object]:
    """Latencies of GETs while fn() runs, and fn's result."""
    stop, box = threading.Event(), {}
    t = threading.Thread(target=lambda: box.setdefault("lat", timed_gets(url, key, path, stop, every)))
    t.start()
    try:
        result = fn()
    finally:
        stop.set()
        t.join()
    return box["lat"], result


def part_backup(args) -> dict:
    data = tempfile.mkdtemp(prefix="genservice-prod-")
    env = {"GENSERVICE_DATA_DIR": data}
    node, url, _, _ = start_server(env)
    key = make_org(url, "Backup")
    h = {"Authorization": f"Bearer {key}"}
    rid = httpx.post(url + "/v1/generation/capabilities/image.generate", json={"prompt": "x [[fail:internal]]"},
                     headers=h, timeout=30).json()["request_id"]
    time.sleep(1)
    node.stop()
    db = sqlite3.connect(Path(data) / "genservice.db")
    db.row_factory = sqlite3.Row
    row = dict(db.execute("SELECT * FROM jobs WHERE id = ?", (rid,)).fetchone())
    cols = list(row)
    started = time.perf_counter()
    with db:
        db.executemany(f"INSERT INTO jobs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                       ([str(uuid.uuid4()) if c == "id" else (str(uuid.uuid4()) if c == "hold_id" else row[c])
                         for c in cols] for _ in range(args.jobs - 1)))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    seeded_s = time.perf_counter() - started
    node, url, _, _ = start_server(env)
    try:
        path = "/v1/generation/requests?limit=50"
        stop = threading.Event()
        timer = threading.Timer(args.seconds, stop.set)
        timer.start()
        alone = timed_gets(url, key, path, stop, 0.05)
        dest = Path(tempfile.mkdtemp(prefix="genservice-prod-backup-")) / "b"
        cmd = [sys.executable, "-m", "service", "admin", "backup", str(dest)]

        def run_backup():
            t = time.perf_counter()
            out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
            return time.perf_counter() - t, out

        lat, (backup_s, out) = during(run_backup, url, key, path)
        assert out.returncode == 0, out.stderr
    finally:
        node.stop()
    target = Path(tempfile.mkdtemp(prefix="genservice-prod-restore-")) / "data"
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "service", "admin", "restore", str(dest)],
                         env={**os.environ, "GENSERVICE_DATA_DIR": str(target)}, capture_output=True, text=True,
                         timeout=600)
    restore_s = time.perf_counter() - t
    assert out.returncode == 0, out.stderr
    fig = {"jobs": args.jobs, "seed_s": round(seeded_s, 1), "db_mb": round((dest / "genservice.db").stat().st_size / 2**20, 1),
           "backup_s": round(backup_s, 2), "restore_s": round(restore_s, 2),
           "api_p99_ms_alone": p99(alone), "api_p99_ms_during_backup": p99(lat), "requests_during_backup": len(lat)}
    print("backup:", fig, flush=True)
    return fig


def db_mb(data: str) -> float:
    return round(sum(p.stat().st_size for p in Path(data).glob("genservice.db*")) / 2**20, 2)


MANAGED = ("events", "webhook_deliveries", "job_webhooks")  # what retention bounds
KEPT = ("jobs", "api_keys")  # business records: kept forever, they grow with the load


def row_counts(data: str) -> dict[str, int]:
    db = sqlite3.connect(f"file:{Path(data) / 'genservice.db'}?mode=ro", uri=True)
    try:
        return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in MANAGED + KEPT}
    finally:
        db.close()


def part_retention(args) -> dict:
    data = tempfile.mkdtemp(prefix="genservice-prod-")
    node, url, _, _ = start_server({"GENSERVICE_DATA_DIR": data,
                                    "GENSERVICE_RETENTION_DAYS": str(args.retention / 86400)})
    sizes = []
    try:
        key = make_org(url, "Retention")
        h = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=h, timeout=30) as c:
            hook = c.post("/v1/webhooks", json={"url": "https://127.0.0.1:9/h", "events": ["api_key.created"]}).json()
            started = time.monotonic()
            next_sample, n = started, 0
            while time.monotonic() - started < args.minutes * 60:
                if args.soak_load == "mixed":
                    c.post("/v1/api-keys", json={"name": f"k{n}"})  # an event and a delivery
                    c.post("/v1/generation/capabilities/image.generate", json={
                        "prompt": "x [[fail:internal]]", "webhook_url": "https://127.0.0.1:9/j"},
                        headers={"Idempotency-Key": f"k{n}"})  # a job webhook and an idempotency key
                else:  # only rows retention bounds: a test delivery each
                    c.post(f"/v1/webhooks/{hook['webhook']['id']}/test")
                n += 1
                if time.monotonic() >= next_sample:
                    sizes.append((round(time.monotonic() - started), db_mb(data), row_counts(data)))
                    next_sample += 10
                time.sleep(0.05)
    finally:
        node.stop()
    after = [(t, mb, rows) for t, mb, rows in sizes if t >= args.retention * 1.5]
    half = max(1, len(after) // 2)
    managed = [sum(rows[m] for m in MANAGED) for _, _, rows in after]
    fig = {"retention_s": args.retention, "minutes": args.minutes, "operations": n,
           "samples": [{"t": t, "db_mb": mb, **rows} for t, mb, rows in sizes],
           "managed_rows_max_first_half": max(managed[:half]) if managed else None,
           "managed_rows_max_second_half": max(managed[half:]) if managed[half:] else None,
           "kept_rows_end": {k: sizes[-1][2][k] for k in KEPT} if sizes else None}
    print("retention:", fig, flush=True)
    return fig


def part_flood(args) -> dict:
    node, url, _, _ = start_server({"GENSERVICE_RATE_LIMIT_PER_KEY": "50", "GENSERVICE_RATE_LIMIT_BURST": "200"})
    try:
        a, b = make_org(url, "Flooder"), make_org(url, "Quiet")
        stop = threading.Event()
        threading.Timer(args.seconds, stop.set).start()
        alone = timed_gets(url, b, "/v1/projects", stop, 0.1)
        # the flood runs in its own process: in this one it would take the GIL from B's client
        flood = subprocess.Popen([sys.executable, __file__, "--flood-child", url, a, str(args.seconds + 2)],
                                 stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        quiet_stop = threading.Event()
        threading.Timer(args.seconds, quiet_stop.set).start()
        loaded = timed_gets(url, b, "/v1/projects", quiet_stop, 0.1)
        codes = json.loads(flood.communicate(timeout=120)[0].strip().splitlines()[-1])
    finally:
        node.stop()
    fig = {"flood_status_counts": codes, "b_requests": [len(alone), len(loaded)],
           "b_p50_ms_alone": round(statistics.median(alone) * 1000, 2),
           "b_p50_ms_during_flood": round(statistics.median(loaded) * 1000, 2),
           "b_p99_ms_alone": p99(alone), "b_p99_ms_during_flood": p99(loaded),
           "b_ratio": round(p99(loaded) / p99(alone), 2)}
    print("flood:", fig, flush=True)
    return fig


def flood_child(url: str, key: str, seconds: float) -> None:
    """16 threads asking as fast as they can for `seconds`; prints {status: count}."""
    codes: dict[int, int] = {}
    deadline = time.monotonic() + seconds

    def one():
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
            while time.monotonic() < deadline:
                code = c.get("/v1/projects").status_code
                codes[code] = codes.get(code, 0) + 1

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(codes))


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--flood-child":
        return flood_child(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="backup,retention,flood")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--retention", type=float, default=60.0, help="seconds finished rows are kept")
    parser.add_argument("--minutes", type=float, default=3.0, help="retention soak length")
    parser.add_argument("--soak-load", choices=("mixed", "outbox"), default="mixed",
                        help="mixed: keys and jobs too (kept forever); outbox: only rows retention bounds")
    args = parser.parse_args()
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.2f}", flush=True)
    summary = {}
    parts = {"backup": part_backup, "retention": part_retention, "flood": part_flood}
    for name in args.only.split(","):
        summary[name] = parts[name](args)
    print(json.dumps(summary, separators=(",", ":")))


if __name__ == "__main__":
    main()
