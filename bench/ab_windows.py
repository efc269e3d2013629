"""Two versions of the node compared in short alternating windows, for a change of a few
per cent that whole runs cannot show.

This machine's speed drifts by 15 % or more over minutes (bench/README.md, "This machine's
speed drifts"), so two whole `engines.py` runs a few minutes apart differ by more than most
changes do. Here both versions run at once, each with its own instant Cog server
(bench/instant_engine.py), and each is driven in turn for one window: `--jobs` jobs at 64
in flight, as `jobs_per_s_instant_64` (bench/jobdriver.py). Only the node being driven
works; the other waits idle. The order flips each pair (A B, B A, A B, ...), so a drift
within a pair favours neither.

Per window: jobs/s and the node's CPU per job (/proc: every thread). Printed: each
version's median, and for each figure the median of the pairs' B/A ratios with how many
pairs moved each way. The last line is one JSON object.

    .venv/bin/python bench/ab_windows.py TREE_A TREE_B [--pairs 8] [--jobs 640] [--lead-in 0]
                                         [--outcome-a webhook] [--outcome-b response]
                                         [--healthz 6000] [--wait-a] [--wait-b] [--gate-a] [--gate-b]

`--lead-in N` runs N jobs just before each measured window (not measured). Work a node
leaves for later (a connection it closes at its keep-alive timeout, 5 s on) otherwise falls
in the other version's window, while this node idles unmeasured: a version that does such
work at once looks dearer than one that defers it. With a lead-in of at least 5 s of jobs
(640 at about 100 jobs/s), each window carries the work its lead-in left, as a steady
load does.

`--healthz N` adds, in each pair, a window of N `/healthz` requests on 16 keep-alive
connections to each node (as `healthz_per_s` of bench/engines.py), in the same alternating
order: req/s and the node's CPU a request (µs).

A TREE is a checkout of the project (`git worktree add /tmp/a COMMIT`) with a `.venv`
(a link to this one's will do); its node runs its own code. The same tree twice with
`--outcome-b response` compares the Cog model's two ways of getting a prediction's end
(BENCH_COG_OUTCOME, read by bench/instant_engine.py from 219525b on).

`--gate-b` (or `-a`): that version's Cog reports to the node's hook gate (service/hookgate/);
a node's CPU is its own with its live child processes' (the gate) throughout.

`--wait-b` (or `-a`): B's submits ask `Prefer: wait=60` (the client's `generate`, a node from
f899fb8 on) where A's are followed on their event stream (every version's way): the
client's path then against now, for a tree from before submits could wait.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# Runs in each version's own process, from its tree: its bench code, its service package.
CHILD = r"""
import json, os, sys, tempfile, time
from functools import partial
from pathlib import Path
tree = sys.argv[1]
sys.path[:0] = [f"{tree}/bench", f"{tree}/tests", tree]
os.chdir(tree)
import trio
import jobdriver
from engines import cpu_s
from instant_engine import MODEL, SLOTS, instant_node
from loadgen import run
from server import create_org
try:  # the node's live child processes (its hook gate): a tree from before 2026-11-29 has none
    from engines import children_cpu_s
except ImportError:
    def children_cpu_s(pid):
        return 0.0


def node_cpu_s(pid):
    return cpu_s(pid) + children_cpu_s(pid)

with instant_node(Path(tempfile.mkdtemp(prefix="ab-windows-"))) as (node, url, op, data, cog):
    host, port = url.removeprefix("http://").split(":")
    key = create_org(url, op, "ab")["api_key"]
    n = 0
    # this version's clients: submits that wait (`--wait-b`) or submits followed on the stream
    drive = partial(jobdriver.run_jobs, wait=os.environ.get("BENCH_SUBMIT_WAIT") == "1")

    def body(i):
        return {"prompt": f"window job {i}"}

    def window(jobs, lead_in=0):
        global n
        if lead_in:  # the same load just before: what it leaves for later lands in the window
            trio.run(drive, host, int(port), key, MODEL, lead_in, SLOTS, lambda i: body(n + i))
            n += lead_in
        c0, t0 = node_cpu_s(node.pid), time.perf_counter()
        r = trio.run(drive, host, int(port), key, MODEL, jobs, SLOTS, lambda i: body(n + i))
        wall = time.perf_counter() - t0
        n += jobs
        if r["errors"] or len(r["statuses"]) != jobs:
            raise SystemExit(f"window failed: {r['errors'][:3]}")
        return {"jobs_per_s": jobs / wall, "node_ms_per_job": (node_cpu_s(node.pid) - c0) * 1000 / jobs}

    def healthz(total):
        c0 = node_cpu_s(node.pid)
        r = trio.run(lambda: run(host, int(port), "/healthz", connections=16, total=total))
        return {"healthz_per_s": r.rps, "node_us_per_request": (node_cpu_s(node.pid) - c0) * 1e6 / total}

    window(SLOTS * 2)  # warm-up
    healthz(500)
    print("ready", flush=True)
    for line in sys.stdin:
        what, count, lead_in = line.split()
        print(json.dumps(window(int(count), int(lead_in)) if what == "jobs" else healthz(int(count))), flush=True)
"""


class Version:
    def __init__(self, tree: str, outcome: str, wait: bool = False, gate: bool = False) -> None:
        self.tree = str(Path(tree).resolve())
        self.proc = subprocess.Popen([f"{self.tree}/.venv/bin/python", "-c", CHILD, self.tree], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={**os.environ, "BENCH_COG_OUTCOME": outcome,
                                          "BENCH_SUBMIT_WAIT": "1" if wait else "0",
                                          "BENCH_HOOK_GATE": "1" if gate else "0"})
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"{tree}: the node did not start")
        self.windows: list[dict] = []
        self.healthz: list[dict] = []

    def window(self, jobs: int, what: str = "jobs", lead_in: int = 0) -> dict:
        self.proc.stdin.write(f"{what} {jobs} {lead_in}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.tree}: the window failed")
        w = json.loads(line)
        (self.windows if what == "jobs" else self.healthz).append(w)
        return w

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def compare(a: list[dict], b: list[dict], field: str) -> dict:
    ratios = [y[field] / x[field] for x, y in zip(a, b)]
    return {f"a_{field}": round(statistics.median(w[field] for w in a), 2),
            f"b_{field}": round(statistics.median(w[field] for w in b), 2),
            f"b_vs_a_{field}": round(statistics.median(ratios), 3),
            f"pairs_b_higher_{field}": sum(r > 1 for r in ratios), f"pairs_b_lower_{field}": sum(r < 1 for r in ratios)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a")
    ap.add_argument("tree_b")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=640, help="jobs per window (64 in flight)")
    ap.add_argument("--lead-in", type=int, default=0,
                    help="jobs run just before each window, not measured (see the module docstring)")
    ap.add_argument("--healthz", type=int, default=0,
                    help="also a window of this many /healthz requests (16 connections) per pair")
    for v in ("a", "b"):
        ap.add_argument(f"--outcome-{v}", default="webhook", choices=("webhook", "response"),
                        help=f"how the Cog model of {v.upper()} gets a prediction's end (docs/engines.md)")
        ap.add_argument(f"--wait-{v}", action="store_true",
                        help=f"{v.upper()}'s submits wait for the job's end (Prefer: wait); else followed on the "
                             f"event stream")
        ap.add_argument(f"--gate-{v}", action="store_true",
                        help=f"{v.upper()}'s Cog reports to the node's hook gate (BENCH_HOOK_GATE, service/hookgate/)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    a = Version(args.tree_a, args.outcome_a, args.wait_a, args.gate_a)
    b = Version(args.tree_b, args.outcome_b, args.wait_b, args.gate_b)
    try:
        for i in range(args.pairs):
            first, second = (a, b) if i % 2 == 0 else (b, a)
            w1, w2 = first.window(args.jobs, lead_in=args.lead_in), second.window(args.jobs, lead_in=args.lead_in)
            wa, wb = (w1, w2) if first is a else (w2, w1)
            print(f"pair {i + 1}: A {wa['jobs_per_s']:.1f} jobs/s {wa['node_ms_per_job']:.2f} ms/job | "
                  f"B {wb['jobs_per_s']:.1f} jobs/s {wb['node_ms_per_job']:.2f} ms/job", file=sys.stderr)
            if args.healthz:
                h1, h2 = first.window(args.healthz, "healthz"), second.window(args.healthz, "healthz")
                ha, hb = (h1, h2) if first is a else (h2, h1)
                print(f"        /healthz: A {ha['healthz_per_s']:.0f}/s {ha['node_us_per_request']:.0f} us | "
                      f"B {hb['healthz_per_s']:.0f}/s {hb['node_us_per_request']:.0f} us", file=sys.stderr)
    finally:
        a.stop()
        b.stop()
    out = {"pairs": args.pairs, "jobs_per_window": args.jobs, "lead_in": args.lead_in, "load_at_start": round(load, 2),
           "outcome_a": args.outcome_a, "outcome_b": args.outcome_b, "wait_a": args.wait_a, "wait_b": args.wait_b,
           "gate_a": args.gate_a, "gate_b": args.gate_b,
           **compare(a.windows, b.windows, "jobs_per_s"), **compare(a.windows, b.windows, "node_ms_per_job")}
    if args.healthz:
        out.update(healthz_per_window=args.healthz, **compare(a.healthz, b.healthz, "healthz_per_s"),
                   **compare(a.healthz, b.healthz, "node_us_per_request"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
