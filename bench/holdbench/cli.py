"""Command line of the holds benchmark: environment header, interleaved rounds, summary.

    python bench/holds.py --quick      # CI: under 3 minutes on 2 cores
    python bench/holds.py --full       # longer runs, more rounds, >= 1,000,000 operations

Actor and naive runs of one workload and concurrency alternate (A B A B ...); each figure
is the median over rounds and each ratio is computed per round, then the median taken.
The last line printed is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from holdbench import limits as L
from holdbench import raw as R
from holdbench import workloads as W

ROOT = Path(__file__).resolve().parents[2]


def fsync_probe(base: Path, n: int = 300) -> tuple[float, float]:
    path = base / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"\0" * 4096 * 16)
        os.fsync(fd)
        times = []
        for i in range(n):
            os.pwrite(fd, os.urandom(4096), (i % 16) * 4096)
            t = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    times.sort()
    return times[len(times) // 2] * 1000, times[int(len(times) * 0.99) - 1] * 1000


def machine_load() -> str:
    """Load average and CPU pressure (PSI): other work on the machine skews every figure."""
    parts = []
    try:
        parts.append("loadavg " + " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    except OSError:
        pass
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        parts.append("cpu pressure " + some[1].replace("avg10=", "avg10 ") + "%")
    except (OSError, IndexError):
        pass
    return ", ".join(parts) or "unknown"


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=5).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def header(base: Path, seed: int, mode: str) -> dict:
    p50, p99 = fsync_probe(base)
    env = {"mode": mode, "cpus": os.cpu_count(), "python": platform.python_version(),
           "sqlite": sqlite3.sqlite_version, "trio": trio.__version__, "git": git_sha(), "seed": seed,
           "fsync_p50_ms": round(p50, 3), "fsync_p99_ms": round(p99, 3), "platform": platform.platform()}
    print("# holds benchmark")
    print(f"# {env['cpus']} CPUs, Python {env['python']}, SQLite {env['sqlite']}, trio {env['trio']}, "
          f"git {env['git']}, seed {seed}, mode {mode}")
    print(f"# fsync probe (300 x 4 KiB): p50 {p50:.3f} ms, p99 {p99:.3f} ms   [{env['platform']}]")
    env["load_start"] = machine_load()
    print(f"# machine at start: {env['load_start']}")
    return env


def fmt_run(s: dict) -> str:
    return (f"{s['workload']:<3} n={s['requesters']:<3} {s['engine']:<5} pairs/s {s['pairs_per_s']:>9,.0f}  "
            f"holds/s {s['holds_per_s']:>9,.0f}  402s {s['refused']:>6}  p50 {s['p50_ms']:>7.3f}  "
            f"p99 {s['p99_ms']:>8.3f}  max {s['max_ms']:>8.2f} ms  cpu/op {s['cpu_us_per_op']:>6.1f} us  "
            f"ops/commit {s['ops_per_commit']:>6.1f}  viol {s['violations']}")


def med(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


class CountingHandler(logging.Handler):
    """The service logs every failed commit and reload (W6 injects them on purpose): count
    them instead of printing tracebacks; the checks decide whether anything went wrong."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="CI size (default)")
    g.add_argument("--full", action="store_true", help="longer runs, more rounds")
    ap.add_argument("--seed", type=int, default=20260921)
    ap.add_argument("--dir", type=Path, default=None, help="where the run databases go (default: a temp dir)")
    ap.add_argument("--jsonl", type=Path, default=None, help="also write one JSON line per run here")
    ap.add_argument("--only", default=None, help="comma-separated workloads (W1,W2,W3,W4,W6,WL)")
    ap.add_argument("--limit-rounds", type=int, default=1000, help="WL: rounds of 64 submitters at a limit")
    ap.add_argument("--levels", default=None, help="comma-separated W1 requester counts (default 1,16,64)")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    mode = "full" if args.full else "quick"
    if mode == "full":
        rounds, dur, levels, w4_orgs = 5, 6.0, (1, 16, 64, 256), 1000
    else:
        rounds, dur, levels, w4_orgs = 3, 2.0, (1, 16, 64), 1000
    only = set(args.only.split(",")) if args.only else {"W1", "W2", "W3", "W4", "W6", "WL"}
    if args.levels:
        levels = tuple(int(x) for x in args.levels.split(","))
    if args.rounds:
        rounds = args.rounds
    base = args.dir or Path(tempfile.mkdtemp(prefix="holdbench-"))
    base.mkdir(parents=True, exist_ok=True)
    env = header(base, args.seed, mode)
    logs = CountingHandler()
    service_log = logging.getLogger("service")
    service_log.addHandler(logs)
    service_log.propagate = False
    jsonl = args.jsonl.open("w") if args.jsonl else None
    t_begin = time.perf_counter()
    runs: list[dict] = []
    violations: list[str] = []

    def record(res: W.Result) -> dict:
        gc.collect()  # the next run does not pay for this one's garbage
        res.extra["logged"] = logs.count
        logs.count = 0
        s = res.summary()
        runs.append(s)
        violations.extend(f"{res.workload}/{res.engine}/n={res.requesters}: {v}" for v in res.violations)
        print(fmt_run(s), flush=True)
        if jsonl:
            jsonl.write(json.dumps({"env": env["git"], **s}) + "\n")
        return s

    table: dict[tuple, dict] = {}

    def compare(name: str, n: int, fn_actor, fn_naive, fn_raw=None) -> None:
        a_runs, n_runs, ratios, lat_ratios, r_runs, raw_ratios = [], [], [], [], [], []
        for r in range(rounds):
            seed = args.seed + r * 101 + n
            a = record(fn_actor(seed))
            b = record(fn_naive(seed))
            a_runs.append(a)
            n_runs.append(b)
            ratios.append(a["pairs_per_s"] / b["pairs_per_s"] if b["pairs_per_s"] else None)
            if fn_raw is not None:  # A B R per round: the raw limit of the same rows (holdbench/raw.py)
                x = record(fn_raw(seed))
                r_runs.append(x)
                raw_ratios.append(a["pairs_per_s"] / x["pairs_per_s"] if x["pairs_per_s"] else None)
        table[(name, n)] = {
            "actor_pairs_per_s": med([x["pairs_per_s"] for x in a_runs]),
            "naive_pairs_per_s": med([x["pairs_per_s"] for x in n_runs]),
            "actor_holds_per_s": med([x["holds_per_s"] for x in a_runs]),
            "actor_p50_ms": med([x["p50_ms"] for x in a_runs]), "actor_p99_ms": med([x["p99_ms"] for x in a_runs]),
            "actor_max_ms": max(x["max_ms"] for x in a_runs),
            "naive_p50_ms": med([x["p50_ms"] for x in n_runs]), "naive_p99_ms": med([x["p99_ms"] for x in n_runs]),
            "naive_max_ms": max(x["max_ms"] for x in n_runs),
            "ratio": med(ratios), "ratios": [round(x, 2) for x in ratios if x is not None],
            "actor_402": med([x["refused"] for x in a_runs]), "naive_402": med([x["refused"] for x in n_runs]),
            "actor_topups": med([x.get("topups") for x in a_runs]),
            "naive_topups": med([x.get("topups") for x in n_runs]),
            "extra_actor": {k: v for k, v in a_runs[-1].items() if k.endswith("org_p99_ms") or k == "hot_p99_ms"},
            "extra_naive": {k: v for k, v in n_runs[-1].items() if k.endswith("org_p99_ms") or k == "hot_p99_ms"},
            "raw_pairs_per_s": med([x["pairs_per_s"] for x in r_runs]),
            "vs_raw": med(raw_ratios), "raw_ratios": [round(x, 3) for x in raw_ratios if x is not None],
        }

    if "W1" in only:
        for n in levels:
            compare("W1", n, lambda s, n=n: W.w1(base, "actor", n, dur, s), lambda s, n=n: W.w1(base, "naive", n, dur, s),
                    (lambda s: R.raw(base, dur, s)) if n == R.BATCH else None)
    if "W2" in only:
        compare("W2", 16, lambda s: W.w2(base, "actor", 16, dur, s), lambda s: W.w2(base, "naive", 16, dur, s))
    if "W4" in only:
        compare("W4", 64, lambda s: W.w4(base, "actor", 64, dur, s, w4_orgs),
                lambda s: W.w4(base, "naive", 64, dur, s, w4_orgs))
    single = {}
    if "W3" in only:
        single["W3"] = record(W.w3(base, 16, dur * 1.5, args.seed))
    if "W6" in only:
        single["W6"] = record(W.w6(base, 32, dur * 1.5, args.seed))

    wl: dict = {}
    if "WL" in only:
        ratios = []
        for r in range(rounds):
            seed = args.seed + r * 101 + 64
            p = record(L.plain(base, 64, dur, seed))
            lim = record(L.w1_limited(base, 64, dur, seed))
            ratios.append(lim["holds_per_s"] / p["holds_per_s"] if p["holds_per_s"] else None)
        exact = L.exact_rounds(base, args.limit_rounds, 64, args.seed)
        if exact["wrong_count"] or exact["overspend_uc"] or exact["figure_mismatch"]:
            violations.append(f"WL: {exact}")
        wl = {"limits_vs_plain_64": med(ratios), "ratios": [round(x, 2) for x in ratios if x is not None],
              **exact}
        print(f"WL limits vs plain holds/s at 64: {wl['limits_vs_plain_64']} {wl['ratios']}; {exact['rounds']} "
              f"rounds of 64 at a 20-hold limit: accepted {exact['accepted']}, refused {exact['refused']}, "
              f"rounds not exactly 20: {exact['wrong_count']}, overspend {exact['overspend']}, "
              f"figure mismatches {exact['figure_mismatch']}", flush=True)

    total_ops = sum(r["ops"] for r in runs)
    print()
    print("## Summary (medians over rounds; ratio = median of per-round actor/naive pairs/s)")
    print()
    print("| workload | n | actor pairs/s | naive pairs/s | ratio | actor p50 / p99 / max ms | naive p50 / p99 / max ms |")
    print("|---|---|---|---|---|---|---|")
    for (name, n), t in table.items():
        print(f"| {name} | {n} | {t['actor_pairs_per_s']:,.0f} | {t['naive_pairs_per_s']:,.0f} | {t['ratio']:.2f}x "
              f"{t['ratios']} | {t['actor_p50_ms']} / {t['actor_p99_ms']} / {t['actor_max_ms']} | "
              f"{t['naive_p50_ms']} / {t['naive_p99_ms']} / {t['naive_max_ms']} |")
    for name, s in single.items():
        print(f"| {name} | {s['requesters']} | {s['pairs_per_s']:,.0f} | - | - | {s['p50_ms']} / {s['p99_ms']} / "
              f"{s['max_ms']} | - |")
    for (name, n), t in table.items():
        if t["vs_raw"] is not None:
            print(f"{name} n={n} against the raw limit (same rows, executemany, one commit per {R.BATCH} pairs): "
                  f"raw {t['raw_pairs_per_s']:,.0f} pairs/s, actor {t['actor_pairs_per_s']:,.0f}, "
                  f"vs_raw {t['vs_raw']} {t['raw_ratios']}")
        if name == "W2":
            print(f"W2 402s per run: actor {t['actor_402']}, naive {t['naive_402']}; top-ups per run: actor "
                  f"{t['actor_topups']}, naive {t['naive_topups']}")
        if name == "W4":
            print(f"W4 per-org p99 (ms): actor {t['extra_actor']}, naive {t['extra_naive']}")
    for name, s in single.items():
        extra = {k: v for k, v in s.items() if k in ("lots", "restarts", "abandoned", "retried", "commit_faults",
                                                       "ledger_rows", "logged", "lot_expiries", "expired_under_holds",
                                                       "charged_from_expired", "returned_to_expired", "refusals")}
        print(f"{name}: {extra}")
    print(f"total operations {total_ops:,}; wall time {time.perf_counter() - t_begin:.0f} s; "
          f"violations {len(violations)}; machine at end: {machine_load()}")
    if mode == "full" and not args.only and total_ops < 1_000_000:
        print(f"NOTE: full mode ran {total_ops:,} operations, fewer than 1,000,000 (slow machine?)")
    for v in violations[:30]:
        print("VIOLATION", v)
    if jsonl:
        jsonl.close()
    if args.dir is None:
        import shutil
        shutil.rmtree(base, ignore_errors=True)

    def get(name, n, key):
        t = table.get((name, n))
        return t[key] if t else None

    final = {
        "mode": mode, "git": env["git"], "cpus": env["cpus"], "fsync_p50_ms": env["fsync_p50_ms"],
        "fsync_p99_ms": env["fsync_p99_ms"],
        "pairs_per_s_64": get("W1", 64, "actor_pairs_per_s"), "p99_ms_64": get("W1", 64, "actor_p99_ms"),
        "vs_naive_64": get("W1", 64, "ratio"), "vs_naive_16": get("W1", 16, "ratio"),
        "vs_naive_1": get("W1", 1, "ratio"), "pairs_per_s_1": get("W1", 1, "actor_pairs_per_s"),
        "naive_pairs_per_s_1": get("W1", 1, "naive_pairs_per_s"),
        "naive_pairs_per_s_64": get("W1", 64, "naive_pairs_per_s"),
        "naive_p99_ms_64": get("W1", 64, "naive_p99_ms"),
        "raw_pairs_per_s_64": get("W1", 64, "raw_pairs_per_s"), "vs_raw_64": get("W1", 64, "vs_raw"),
        "w2_vs_naive": get("W2", 16, "ratio"), "w4_vs_naive": get("W4", 64, "ratio"),
        "w4_pairs_per_s": get("W4", 64, "actor_pairs_per_s"),
        "limit_overspend": wl.get("overspend"), "limits_vs_plain_64": wl.get("limits_vs_plain_64"),
        "limit_rounds_not_20": wl.get("wrong_count"),
        "total_ops": total_ops, "violations": len(violations), "load_start": env["load_start"],
        "load_end": machine_load(),
    }
    print(json.dumps(final))
    return 1 if violations else 0
