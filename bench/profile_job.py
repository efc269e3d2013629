"""Where a job's time goes in the node: CPU per job by area, and commits per job.

Jobs go through the public API at 64 in flight against the 64-slot instant Cog server
(bench/instant_engine.py, bench/cog_instant.py; clients as in bench/jobdriver.py: a submit
that waits, `Prefer: wait`; `--stream`: a submit, then the job's event stream), as
`jobs_per_s_instant_64` (and `_stream`) of bench/engines.py. Two passes,
each on a fresh node and after a warm-up of 64 jobs, the node measured over the jobs only
(bench/profiling/sitecustomize.py, signalled at the window's start and end):

1. `cpu`: no profiler. The node's true CPU per job (/proc, every thread), split into the
   trio thread and the other threads (the SQLite writer's commits, `to_thread` work),
   commits per job (`Store.batches`, every store) and the writes they carried
   (`Store.writes`), and a trio Instrument's CPU per task step by task name (cheap: two
   clock reads a step), so the trio thread splits into tasks and the run loop itself.
2. `profile`: cProfile on the trio thread, on a CPU clock (so waiting costs nothing). Each
   function's own time is put in an area by its module (`AREAS` below, first match wins;
   builtins and generic helpers such as contextlib take their callers' areas, in proportion
   to each call edge's time; the measuring hooks are left out); the trio thread's true
   CPU per job from pass 1 is then split in the profile's proportions (a profiler slows
   Python code more than C code, so the split is an estimate; the raw profiled figures are
   printed too). The other threads are one area of their own (cProfile sees one thread).

    .venv/bin/python bench/profile_job.py [--jobs 640] [--top 25] [--sites 40] [--stream] [--healthz 6000]

Pass 1 also splits the trio thread's wall clock over the window: on a core, idle (every task
waiting), waiting for a core (the kernel's run queue) and waiting for the GIL, with how
often it lost its core while it could run (preempted: the kernel's nonvoluntary context
switches); and, with
`--healthz N` (6000 unless 0), measures N `/healthz` requests at 16 connections on the same
node just before its jobs the same way, so `jobs_vs_healthz_instant_64` of bench/engines.py
splits into a job's CPU counted in `/healthz` answers and the trio thread's share of its
core in each window.

`--sites N` also records, in pass 1, where each task step ended (the task's innermost
awaits) and prints the N most frequent: which awaits cost the steps. BENCH_COG_OUTCOME=response
profiles the model with `outcome = "response"` (docs/engines.md) instead of the webhook.

The last line is one JSON object. Needs no profiler installed beyond the standard library.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import jobdriver
import loadgen
from instant_engine import MODEL, SLOTS, instant_node
from engines import children_cpu_s
from server import create_org

# (area, test on (filename, function name)); first match wins; the rest is "other"
AREAS: list[tuple[str, callable]] = [
    ("SQL", lambda f, n: "sqlite3" in n or "/service/storage/" in f),
    ("JSON", lambda f, n: "/json/" in f or "json" in n.lower()),
    ("validation", lambda f, n: "pydantic" in f or "pydantic" in n or "/service/http/schemas" in f
     or "/service/catalog/rules" in f or "/service/catalog/schema" in f),
    ("auth", lambda f, n: "/service/http/auth" in f or "hashlib" in n or "hmac" in f or "/service/roles" in f
     or "/service/actors/credentials" in f or "/service/sealing" in f),
    ("engine client", lambda f, n: "/service/engines/" in f or "/httpx/" in f or "/httpcore/" in f
     or "/anyio/" in f or "/sniffio/" in f),  # h11 serves both sides: counted as HTTP
    ("HTTP", lambda f, n: any(p in f for p in ("/hypercorn/", "/h11/", "/h2/", "/wsproto/", "/quart/", "/quart_trio/",
                                                "/werkzeug/", "/flask/", "/service/http/", "/jinja2/", "/priority/"))),
    ("asset store", lambda f, n: "/service/assets/" in f or "/PIL/" in f or "/service/media/" in f),
    ("streams", lambda f, n: "/service/streams/" in f or "/service/outbox" in f or "/service/senders/" in f),
    ("actor messages", lambda f, n: "/service/actors/runtime" in f or "/service/actors/facades" in f
     or "/trio/_channel" in f or "/trio/_sync" in f),
    ("actors' own logic", lambda f, n: "/service/actors/" in f or "/service/credits/" in f),
    ("trio run loop and I/O", lambda f, n: "/trio/" in f or "/outcome/" in f or "socket" in n or "epoll" in n
     or "select" in n),
    ("logging", lambda f, n: "/logging/" in f or "/service/logs" in f),
]


# time in these is the caller's: builtins and generic helpers take the area of who called them
GENERIC = ("~", "/contextlib.py", "/functools.py", "/abc.py", "/typing.py", "/enum.py", "/collections/",
           "/dataclasses.py", "/copy.py", "/weakref.py", "/_weakrefset.py", "/types.py", "/operator.py",
           "/attr/", "/re/", "/sre_")
MEASUREMENT = "measurement (left out)"


def area_of(filename: str, name: str) -> str | None:
    """The area of a function by itself; None for a generic one (see `resolve`)."""
    if "/bench/profiling/" in filename or "/trio/_core/_instrumentation.py" in filename:
        return MEASUREMENT  # the hooks and trio's calls of them cost nothing without them
    for area, test in AREAS:
        if test(filename, name):
            return area
    if any(g in filename for g in GENERIC):
        return None
    return "other"


def resolve(stats: dict) -> dict[tuple, dict[str, float]]:
    """Each function's own time split over areas: its own area, or for a generic function
    its callers' areas in proportion to the time each call edge took (recursively)."""
    memo: dict[tuple, dict[str, float]] = {}

    def shares(key, seen) -> dict[str, float]:
        if key in memo:
            return memo[key]
        filename, _, name = key
        own = area_of(filename, name)
        if own is not None:
            memo[key] = {own: 1.0}
            return memo[key]
        callers = stats[key][4]
        total = sum(edge[2] for edge in callers.values()) or sum(1 for _ in callers) or 1
        out: dict[str, float] = {}
        for caller, edge in callers.items():
            w = (edge[2] / total) if total else 0.0
            if caller in seen or caller not in stats:
                parts = {"other": 1.0}
            else:
                parts = shares(caller, seen | {key})
            for a, f in parts.items():
                out[a] = out.get(a, 0.0) + w * f
        memo[key] = out or {"other": 1.0}
        return memo[key]

    return {key: shares(key, frozenset()) for key in stats}


def wait_report(out: Path, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "window.json").exists():
            return json.loads((out / "window.json").read_text())
        time.sleep(0.1)
    raise RuntimeError(f"the node wrote no window.json in {out}")


def one_pass(mode: str, tmp: Path, jobs: int, sites: bool = False, stream: bool = False, healthz: int = 0) -> dict:
    out = tmp / mode
    out.mkdir(parents=True)
    env = {"GENSERVICE_BENCH_PROFILE": mode, "GENSERVICE_BENCH_PROFILE_DIR": str(out),
           "GENSERVICE_BENCH_SITES": "1" if sites else "0",
           "PYTHONPATH": os.pathsep.join([str(HERE / "profiling"), os.environ.get("PYTHONPATH", "")])}
    with instant_node(out, env) as (node, url, op, _data, _cog):
        host, port = url.removeprefix("http://").split(":")
        key = create_org(url, op, f"profile-{mode}")["api_key"]

        def body(i):
            return {"prompt": f"profile {i}", "seed": i}

        run_jobs = functools.partial(jobdriver.run_jobs, wait=not stream)
        trio.run(run_jobs, host, int(port), key, MODEL, SLOTS, SLOTS, body)  # warm-up
        health = None
        if healthz:  # the same node's /healthz just before, measured the same way
            os.kill(node.pid, signal.SIGUSR1)
            hres = trio.run(functools.partial(loadgen.run, host, int(port), "/healthz", connections=16,
                                              total=healthz))
            os.kill(node.pid, signal.SIGUSR2)
            health = wait_report(out)
            health["requests"] = hres.requests
            (out / "window.json").unlink()
        gate0 = children_cpu_s(node.pid)  # its child processes: the media check's workers, the hook gate's
        os.kill(node.pid, signal.SIGUSR1)
        res = trio.run(run_jobs, host, int(port), key, MODEL, jobs, SLOTS, lambda i: body(SLOTS + i))
        os.kill(node.pid, signal.SIGUSR2)
        gate_s = children_cpu_s(node.pid) - gate0
        report = wait_report(out)
        report["gate_cpu_s"] = gate_s
    report["jobs"] = sum(1 for s in res["statuses"] if s["status"] == "completed")
    report["errors"] = res["errors"]
    report["client_wall_s"] = res["wall"]
    report["dir"] = str(out)
    report["healthz"] = health
    return report


def thread_split(window: dict) -> tuple[float, float, float, float]:
    """The trio thread's share of a window's wall clock: on a core, idle in epoll (nothing
    to run), waiting for a core (the run queue), and the rest (waiting for the GIL)."""
    wall = window["wall_s"] or 1.0
    busy, idle = window["main_thread_cpu_s_fine"] / wall, window.get("idle_wait_s", 0.0) / wall
    queued = window.get("run_delay_s", 0.0) / wall
    return busy, idle, queued, 1 - busy - idle - queued


def areas(pstats_path: Path) -> tuple[dict[str, float], list[tuple[float, str, str]]]:
    st = pstats.Stats(str(pstats_path))
    by_area: dict[str, float] = {}
    funcs = []
    split = resolve(st.stats)
    for key, (cc, nc, tt, ct, callers) in st.stats.items():
        filename, line, name = key
        for a, f in split[key].items():
            by_area[a] = by_area.get(a, 0.0) + tt * f
        main = max(split[key].items(), key=lambda kv: kv[1])[0]
        funcs.append((tt, main, f"{filename.split('site-packages/')[-1].split('/bench7/')[-1]}:{line}({name})"))
    funcs.sort(reverse=True)
    return by_area, funcs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=640, help="measured jobs per pass (after 64 of warm-up)")
    ap.add_argument("--top", type=int, default=25, help="functions printed, by own CPU")
    ap.add_argument("--stream", action="store_true",
                    help="follow each job on its event stream instead of a submit that waits")
    ap.add_argument("--healthz", type=int, default=6000,
                    help="/healthz requests (16 connections) measured the same way on the same node just before "
                         "pass 1's jobs; 0: none")
    ap.add_argument("--sites", type=int, default=0,
                    help="also print the N places task steps most often suspend at (pass 1, a little slower)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    load0 = os.getloadavg()
    cpu = one_pass("cpu", tmp, args.jobs, sites=args.sites > 0, stream=args.stream, healthz=args.healthz)
    prof = one_pass("profile", tmp, args.jobs, stream=args.stream)
    n = max(cpu["jobs"], 1)
    main_ms = cpu["main_thread_cpu_s"] * 1000 / n
    other_ms = cpu["other_threads_cpu_s"] * 1000 / n
    gate_ms = cpu["gate_cpu_s"] * 1000 / n
    print(f"# {os.cpu_count()} CPUs, load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at the start")
    print(f"pass cpu: {cpu['jobs']} jobs in {cpu['client_wall_s']:.1f} s ({cpu['jobs'] / cpu['client_wall_s']:.1f} "
          f"jobs/s), node CPU per job {main_ms + other_ms:.2f} ms (trio thread {main_ms:.2f}, other threads "
          f"{other_ms:.2f}), commits per job {cpu['commits'] / n:.2f} carrying {cpu['writes'] / n:.2f} writes per job "
          f"(Store.write calls; group commit shares a COMMIT between jobs)")
    if gate_ms:
        print(f"the node's child processes (the media check's workers, service/media/isolated.py, and the hook "
              f"gate's, service/hookgate/, when it runs): {gate_ms:.2f} ms of CPU per job")
    busy, idle, queued, gil = thread_split(cpu)
    print(f"the trio thread over the window (pass 1, wall clock): on a core {busy:.1%}, idle (every task "
          f"waiting, in epoll) {idle:.1%}, runnable but waiting for a core (the kernel's run queue) "
          f"{queued:.1%}, the rest {gil:.1%} (waiting for the GIL another thread held); preempted "
          f"{cpu.get('preempted', 0) / n:.2f} times a job (another thread or process woke and took its core)")
    health = cpu.get("healthz")
    if health:
        h_us = health["main_thread_cpu_s_fine"] * 1e6 / max(health["requests"], 1)
        h_busy, h_idle, h_queued, h_gil = thread_split(health)
        rps = health["requests"] / (health["wall_s"] or 1.0)
        trio_ms = cpu["main_thread_cpu_s_fine"] * 1000 / n
        print(f"/healthz on the same node just before ({health['requests']} at 16 connections, {rps:.0f} req/s): "
              f"trio thread {h_us:.0f} us a request; on a core {h_busy:.1%}, idle {h_idle:.1%}, run queue "
              f"{h_queued:.1%}, GIL {h_gil:.1%}")
        print(f"a job costs the trio thread {trio_ms * 1000 / h_us:.1f} /healthz answers; jobs/s over /healthz/s "
              f"{cpu['jobs'] / cpu['client_wall_s'] / rps:.4f} = (on a core, jobs over /healthz) "
              f"{busy / (h_busy or 1):.3f} x (CPU, /healthz over a job) {h_us / 1000 / trio_ms:.4f}")
    print(f"the cyclic collector (pass 1, whichever thread ran it): {cpu['gc_s'] * 1000 / n:.3f} ms per job, "
          f"runs by generation {cpu['gc_runs']}")
    by_area, funcs = areas(Path(prof["dir"]) / "main.pstats")
    left_out = by_area.pop(MEASUREMENT, 0.0)
    total = sum(by_area.values()) or 1.0
    pn = max(prof["jobs"], 1)
    print(f"pass profile: {prof['jobs']} jobs in {prof['client_wall_s']:.1f} s, trio thread CPU per job "
          f"{prof['main_thread_cpu_s'] * 1000 / pn:.2f} ms under cProfile (profile covers "
          f"{total * 1000 / pn:.2f} ms, and {left_out * 1000 / pn:.2f} ms of the measuring hooks left out), "
          f"commits per job {prof['commits'] / pn:.2f}")
    print()
    print("| area | share of the trio thread | ms per job (true, pass 1) | ms per job (profiled) |")
    print("|---|---|---|---|")
    split = {}
    for a, t in sorted(by_area.items(), key=lambda kv: -kv[1]):
        split[a] = round(main_ms * t / total, 3)
        print(f"| {a} | {t / total:.1%} | {split[a]:.2f} | {t * 1000 / pn:.2f} |")
    print(f"| other threads (SQLite commits, to_thread work) | - | {other_ms:.2f} | - |")
    print()
    print(f"top {args.top} functions by own CPU (profiled, ms per job):")
    for tt, a, where in funcs[:args.top]:
        print(f"  {tt * 1000 / pn:7.3f}  {a:<22} {where}")
    tasks = sorted(cpu["task_cpu_s"].items(), key=lambda kv: -kv[1])
    step_total = sum(cpu["task_cpu_s"].values())
    print()
    print(f"trio Instrument (pass 1, no profiler): {sum(cpu['task_steps'].values()) / n:.1f} task steps per job; "
          f"task steps {step_total * 1000 / n:.2f} ms per job, the run loop outside them (scheduling, epoll, "
          f"the instrument) {(cpu['main_thread_cpu_s_fine'] - step_total) * 1000 / n:.2f} ms per job")
    for name, t in tasks[:12]:
        print(f"  {t * 1000 / n:7.3f} ms/job  {cpu['task_steps'][name] / n:6.2f} steps/job  {name}")
    if args.sites:
        print(f"\nwhere task steps suspend (task @ its innermost awaits), steps per job, top {args.sites}:")
        for where, count in sorted(cpu["sites"].items(), key=lambda kv: -kv[1])[:args.sites]:
            print(f"  {count / n:6.2f}  {where}")
    final = {"jobs_per_s_instant_64": round(cpu["jobs"] / cpu["client_wall_s"], 1),
             "cpu_ms_per_job": round(main_ms + other_ms, 3), "trio_thread_ms_per_job": round(main_ms, 3),
             "other_threads_ms_per_job": round(other_ms, 3), "child_processes_ms_per_job": round(gate_ms, 3),
             "commits_per_job": round(cpu["commits"] / n, 3),
             "writes_per_job": round(cpu["writes"] / n, 3), "gc_ms_per_job": round(cpu["gc_s"] * 1000 / n, 3),
             "areas_ms_per_job": split, "task_steps_per_job": round(sum(cpu["task_steps"].values()) / n, 1),
             "run_loop_ms_per_job": round((cpu["main_thread_cpu_s_fine"] - step_total) * 1000 / n, 3),
             "trio_thread_busy": round(busy, 3), "trio_thread_idle": round(idle, 3),
             "trio_thread_queued": round(queued, 3), "trio_thread_gil_wait": round(gil, 3),
             "trio_thread_preempted_per_job": round(cpu.get("preempted", 0) / n, 2),
             "healthz_trio_us": round(h_us, 1) if health else None,
             "healthz_trio_busy": round(h_busy, 3) if health else None,
             "errors": len(cpu["errors"]) + len(prof["errors"]), "load_start": load0, "load_end": os.getloadavg()}
    print(json.dumps(final))


if __name__ == "__main__":
    main()
