"""Load on the hot read routes (reliability.md R11), loopback only, bounded, never in CI.

    .venv/bin/python bench/load.py [--seconds 20] [--connections 16] [--threads 2]
                                   [--tool auto|wrk|loadgen] [--no-pin] [--url URL --key KEY]

Starts a fresh test-mode `genservice serve` on 127.0.0.1 (bench/server.py) unless `--url`
and `--key` name a running one, creates an organization, submits one image job (for the
status route) and waits until it is final. Then, for each route

    GET /v1/billing/balance
    GET /v1/projects
    GET /v1/generation/requests/{id}/status

it warms up for 2 s, then runs `--seconds` of closed-loop load on `--connections`
keep-alive connections, authenticated with the organization's key, and reports requests
per second, p50 and p99 latency, and the count of non-2xx answers.

Tool: `wrk` (`-t THREADS -c CONNECTIONS -d SECONDS --latency`) when it is installed
(`scripts/reliability` installs it with apt when run as root), else the install-free
closed-loop client of bench/loadgen.py (raw trio sockets). `--tool` forces one. With two or
more cores the server is pinned to core 0 and the load generator to the others (`--no-pin`
turns that off), as in the stack notes' throughput figures.

Prints one line per route and, last, one JSON object: {tool, seconds, connections,
routes: {name: {rps, p50_ms, p99_ms, requests, non_2xx}}, capacity_rps (the best route's
rps), server_rss_mib}. Exit status 1 when any answer was not 2xx.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen  # noqa: E402
from server import create_org, running_server  # noqa: E402

ROUTES = {
    "balance": "/v1/billing/balance",
    "projects": "/v1/projects",
    "status": "/v1/generation/requests/{job}/status",
}


# -- install-free client -----------------------------------------------------------------------
async def closed_loop(host: str, port: int, path: str, headers: dict, connections: int, seconds: float) -> dict:
    """The install-free client of bench/loadgen.py for `seconds`, in this script's shape."""
    res = await loadgen.run(host, port, path, headers=headers, connections=connections, seconds=seconds)
    return {"rps": round(res.rps, 1), "p50_ms": round(res.pct(0.50), 2), "p99_ms": round(res.pct(0.99), 2),
            "requests": res.requests,
            "non_2xx": sum(n for s, n in res.statuses.items() if not 200 <= s < 300),
            "statuses": {str(k): v for k, v in sorted(res.statuses.items())}}


def run_loadgen(url: str, path: str, key: str, connections: int, seconds: float) -> dict:
    host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()
    headers = {"Authorization": f"Bearer {key}"}
    trio.run(closed_loop, host, int(port), path, headers, connections, min(2.0, seconds))  # warm-up
    return trio.run(closed_loop, host, int(port), path, headers, connections, seconds)


# -- wrk -------------------------------------------------------------------------------------------
_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_wrk(out: str) -> dict:
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    pcts = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {"rps": round(rps, 1), "p50_ms": round(_ms(pcts["50"]), 2), "p99_ms": round(_ms(pcts["99"]), 2),
            "requests": requests, "non_2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(0) if errors else None}


def run_wrk(url: str, path: str, key: str, connections: int, seconds: float, threads: int, cpus) -> dict:
    def cmd(duration):
        base = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency",
                "-H", f"Authorization: Bearer {key}", url + path]
        return (["taskset", "-c", ",".join(map(str, cpus))] + base) if cpus and shutil.which("taskset") else base

    subprocess.run(cmd(max(1, min(2, int(seconds)))), capture_output=True, text=True, check=True)  # warm-up
    out = subprocess.run(cmd(int(seconds)), capture_output=True, text=True, check=True).stdout
    return parse_wrk(out)


# -- setup -------------------------------------------------------------------------------------------
def finished_job(url: str, key: str) -> str:
    h = {"Authorization": f"Bearer {key}"}
    r = httpx.post(url + "/v1/generation/capabilities/image.generate", json={"prompt": "load bench"}, headers=h,
                   timeout=30)
    r.raise_for_status()
    job = r.json()["request_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = httpx.get(url + f"/v1/generation/requests/{job}/status", headers=h, timeout=30).json()
        if st["status"] in ("completed", "failed", "nsfw", "canceled"):
            return job
        time.sleep(0.1)
    raise RuntimeError("the status job did not finish")


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def pin(server_pid: int | None, enabled: bool):
    """Server on core 0, this process (and wrk) on the others; None when not pinned."""
    cpus = sorted(os.sched_getaffinity(0))
    if not enabled or server_pid is None or len(cpus) < 2:
        return None
    os.sched_setaffinity(server_pid, {cpus[0]})
    rest = set(cpus[1:])
    os.sched_setaffinity(0, rest)
    return sorted(rest)


def measure(url: str, key: str, args, server_pid: int | None) -> dict:
    tool = args.tool
    if tool == "auto":
        tool = "wrk" if shutil.which("wrk") else "loadgen"
    if tool == "wrk" and not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install -y wrk, or scripts/reliability as root)")
    cpus = pin(server_pid, not args.no_pin)
    job = finished_job(url, key)
    results = {}
    for name, template in ROUTES.items():
        path = template.format(job=job)
        if tool == "wrk":
            res = run_wrk(url, path, key, args.connections, args.seconds, args.threads, cpus)
        else:
            res = run_loadgen(url, path, key, args.connections, args.seconds)
        results[name] = res
        print(f"{name:9s} {path:55s} {res['rps']:8.1f} req/s  p50 {res['p50_ms']:7.2f} ms  p99 {res['p99_ms']:7.2f} ms"
              f"  non-2xx {res['non_2xx']}  ({res['requests']} requests)", flush=True)
    return {"tool": tool, "seconds": args.seconds, "connections": args.connections, "pinned": cpus is not None,
            "routes": results, "capacity_rps": max(r["rps"] for r in results.values()),
            "server_rss_mib": rss_mib(server_pid)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="measured seconds per route (default 20)")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--tool", choices=["auto", "wrk", "loadgen"], default="auto")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the server and the client to cores")
    ap.add_argument("--url", help="a running server (loopback) instead of a fresh one")
    ap.add_argument("--key", help="an API key of an organization on --url")
    args = ap.parse_args(argv)
    if args.url:
        if not args.key:
            ap.error("--url needs --key")
        if not re.match(r"http://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$", args.url.rstrip("/")):
            ap.error("loopback only: --url must be http://127.x.x.x:PORT")
        summary = measure(args.url.rstrip("/"), args.key, args, None)
    else:
        with running_server() as (url, token, _data):
            org = create_org(url, token, "Load")
            pid = server_pid(url)
            summary = measure(url, org["api_key"], args, pid)
    print(json.dumps(summary))
    return 1 if any(r["non_2xx"] for r in summary["routes"].values()) else 0


def server_pid(url: str) -> int | None:
    """The pid of the `genservice serve` child this process started (bench/server.py)."""
    me, children = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me and b"serve" in cmdline:
                children.append(int(entry.name))
    return children[0] if len(children) == 1 else None


if __name__ == "__main__":
    sys.exit(main())
