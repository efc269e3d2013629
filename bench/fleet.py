"""Jobs through one node in front of a fleet of Cog servers.

`--servers` real Cog servers of `--slots` each with the instant predictor
(bench/cog_instant.py), one model over all their URLs, servers x slots jobs in flight
through the public API, each submitted with `Prefer: wait` as the Python client's
`generate` does. The default, 64 single-slot servers,
is the shape of a GPU fleet where each GPU runs one prediction at a time; `--servers 1
--slots 64` is `engines.py --quick`'s one server. Prints, for each window of `--jobs` jobs:
jobs/s, the node's CPU a job (every thread), the Cog servers' CPU a job together, this load
generator's; then lost and double-charged jobs over all windows (0 and 0, or the node is
wrong). The machine's two cores carry all of it: compare runs, not machines.

    .venv/bin/python bench/fleet.py [--servers 64] [--slots 1] [--jobs 1280] [--windows 3] [--seconds 0] [--gate]

`--seconds S` makes each prediction take S seconds (an asyncio sleep in the predictor): jobs/s
is then bounded by the fleet (servers x slots / S), and the node's CPU a job adds what a
longer job costs it (health checks while it waits, timers). `--gate`: the servers' webhooks
go to the node's hook gate (service/hookgate/), whose process's CPU the node's figure counts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jobdriver  # noqa: E402
from engines import cpu_marks, ledger_check, ms_per_job  # noqa: E402
from instant_engine import MODEL, InstantCog, catalog_entry, free_port, gate_env  # noqa: E402
from server import create_org, start_server  # noqa: E402


async def windows(url: str, op: str, level: int, jobs: int, count: int, pids: tuple[int, list[int]],
                  data_dir: str) -> dict:
    host, port = url.removeprefix("http://").split(":")
    key = (await trio.to_thread.run_sync(create_org, url, op, "bench-fleet"))["api_key"]
    node_pid, cog_pids = pids
    statuses: list[dict] = []
    errors: list[str] = []
    done = 0

    def body(i: int) -> dict:
        return {"prompt": f"fleet {done + i}", "seed": i}

    async def batch(n: int) -> dict:
        nonlocal done
        res = await jobdriver.run_jobs(host, int(port), key, MODEL, n, level, body, wait=True)
        done += n
        statuses.extend(res["statuses"])
        errors.extend(res["errors"])
        return res

    await batch(level * 2)  # warm-up: every server's connection made, every path run once
    out: list[dict] = []
    for _ in range(count):
        before = cpu_marks(node_pid, cog_pids)
        res = await batch(jobs)
        completed = sum(1 for st in res["statuses"] if st["status"] == "completed")
        node_ms, cogs_ms, driver_ms = ms_per_job(before, cpu_marks(node_pid, cog_pids), completed)
        out.append({"jobs_per_s": round(completed / res["wall"], 1), "completed": completed,
                    "node_cpu_ms_per_job": round(node_ms, 2), "cogs_cpu_ms_per_job": round(cogs_ms, 2),
                    "driver_cpu_ms_per_job": round(driver_ms, 2)})
        print(json.dumps(out[-1]), flush=True)
    lost, double = await trio.to_thread.run_sync(ledger_check, url, key, statuses, data_dir)
    return {"windows": out, "lost": lost, "double_charged": double, "errors": len(errors)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=64, help="Cog servers")
    ap.add_argument("--slots", type=int, default=1, help="predictions each server runs at once")
    ap.add_argument("--jobs", type=int, default=1280, help="jobs a window")
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--outcome", choices=("webhook", "response"), default="webhook")
    ap.add_argument("--gate", action="store_true", help="the webhooks to the node's hook gate (service/hookgate/)")
    ap.add_argument("--in-flight", type=int, default=0,
                    help="jobs in flight (default servers x slots; more keeps a backlog queued in the node)")
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="each prediction's length (a GPU's time; 0: instant, the node's own bound)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    cogs: list[InstantCog] = []
    while len(cogs) < args.servers:
        cog = InstantCog(tmp / f"cog-{len(cogs)}.log", slots=args.slots, seconds=args.seconds)
        if all(c.port != cog.port for c in cogs):  # a port handed out twice before either is bound
            cogs.append(cog)
    try:
        for cog in cogs:
            cog.launch()
        for cog in cogs:
            cog.ready_within(120.0)
        (tmp / "catalog.toml").write_text(catalog_entry([c.url for c in cogs], outcome=args.outcome,
                                                        slots=args.slots))
        port = free_port()
        node, url, op, data = start_server({"GENSERVICE_CATALOG_FILE": str(tmp / "catalog.toml"),
                                            "GENSERVICE_PORT": str(port),
                                            "GENSERVICE_BASE_URL": f"http://127.0.0.1:{port}",
                                            # one key's submits wait as streams: past the default 20
                                            "GENSERVICE_MAX_STREAMS_PER_KEY": "0",
                                            "GENSERVICE_MAX_STREAMS_PER_ORG": "0",
                                            **gate_env(args.gate)})
        try:
            load0 = os.getloadavg()
            level = args.in_flight or args.servers * args.slots
            res = trio.run(windows, url, op, level, args.jobs, args.windows,
                           (node.pid, [c.proc.pid for c in cogs]), data)
        finally:
            node.stop()
    finally:
        for cog in cogs:
            cog.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    jps = sorted(w["jobs_per_s"] for w in res["windows"])
    cpu = sorted(w["node_cpu_ms_per_job"] for w in res["windows"])
    print(json.dumps({"servers": args.servers, "slots": args.slots, "outcome": args.outcome,
                      "seconds": args.seconds, "jobs_per_s_median": jps[len(jps) // 2],
                      "node_cpu_ms_per_job_median": cpu[len(cpu) // 2], **res,
                      "machine": {"cpus": os.cpu_count(), "load_start": load0, "load_end": os.getloadavg()}}))


if __name__ == "__main__":
    main()
