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
final when polling / with streams, at the largest N both ran), `poll_rate_ok` (whether every
poller kept at least 0.95 requests per period there) and `kb_per_stream` (at `streams_max`).

    .venv/bin/python bench/streams.py [--sizes 100,1000,5000] [--render 30] [--poll-max 1000]
                                      [--poll-procs 4] [--baseline]

Loopback only; every client is a raw socket. The streams run in this trio process; the
pollers in --poll-procs client processes, each poller on a fixed schedule (request k at its
start + k periods, at once when behind), their starts spread evenly over one period, so at
1,000 clients the node gets a true 1,000 requests/s. Each poller's kept rate is measured
(requests sent / requests its schedule called for between its first request and its final
answer, per period), printed as a histogram, and any below 0.95/s is
flagged: then polling was under-driven and `cpu_vs_polling` is a lower bound.

The stream row also gives `open_cpu_ms_per_stream`, the node's CPU from the first connect
until every stream has its current status (before any job ends). `--baseline` first runs the
same N jobs with nobody following (mode `none`, `cpu_ms_per_job`): the jobs' own ends, which
both modes' CPU a final include.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
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
        self.reconnects = 0
        self.first_sent: float | None = None   # poller: trio clock of its first and last request
        self.last_sent: float | None = None
        self.answered: float | None = None     # trio clock of the final answer

    def asked_per_s(self, every: float) -> float | None:
        """The rate this poller kept: the requests it sent over those its schedule called for
        from its first request to the final answer (one every `every` s), per `every`. A poller
        stuck behind slow answers (one request in 40 s) reads 1/40 per `every`."""
        if self.first_sent is None or self.answered is None:
            return None
        due = int((self.answered - self.first_sent) / every) + 1
        return min(self.polls, due) / due / every


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


async def _status_once(sock, request: bytes) -> tuple[bytes, bytes]:
    """One GET on a keep-alive connection: (head, body). ConnectionError if the server
    closed the connection before the whole answer (it may, e.g. at its keep-alive limits)."""
    async def more() -> bytes:
        chunk = await sock.receive_some(65536)
        if not chunk:
            raise ConnectionError("closed by the server")
        return chunk

    await sock.send_all(request)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += await more()
    head, body = buf.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += await more()
    return head, body


async def poll_follower(setup: Setup, f: Follower, every: float, first_at: float, sock=None) -> None:
    """Asks at a fixed rate: request k is sent at `first_at + k * every` (trio clock), or at
    once when the previous answer came later than that, so a client that fell behind catches
    up instead of drifting to a lower rate (what `asked_per_s` then checks). A connection
    the server closes is opened again and the request sent again (a GET: safe to repeat),
    as an HTTP client does; those are counted (`reconnects`)."""
    await trio.sleep_until(first_at)
    request = (f"GET /v1/generation/requests/{f.job_id}/status HTTP/1.1\r\nHost: {setup.host}\r\n"
               f"Authorization: Bearer {setup.key}\r\n\r\n").encode()
    try:
        while True:
            now = trio.current_time()
            if f.first_sent is None:
                f.first_sent = now
            f.last_sent = now
            for attempt in range(3):
                if sock is None:
                    sock = await trio.open_tcp_stream(setup.host, setup.port)
                try:
                    _head, body = await _status_once(sock, request)
                    break
                except (ConnectionError, trio.BrokenResourceError):
                    await sock.aclose()
                    sock = None
                    f.reconnects += 1
                    if attempt == 2:
                        raise
            f.attached.set()
            f.polls += 1
            if any(final in body for final in FINAL):  # parse only the final answer
                f.arrived, f.finished_at = time.time(), ts(json.loads(body)["finished_at"])
                f.answered = trio.current_time()
                return
            await trio.sleep_until(f.first_sent + f.polls * every)
    except (OSError, trio.BrokenResourceError) as e:
        f.error = repr(e)
        f.attached.set()
    finally:
        if sock is not None:
            await sock.aclose()


def poll_worker() -> None:
    """One client process of pollers (`--poll-worker`): reads its share from stdin (one JSON
    line), says `ready`, waits for `go`, polls, then writes one JSON line per process."""
    conf = json.loads(sys.stdin.readline())
    setup = Setup(conf["url"], conf["key"])
    followers = [Follower(i) for i in conf["ids"]]

    async def main() -> None:
        # connected before `go` (50 at a time across the processes, within the node's listen
        # backlog), so the schedule is not spoiled by SYN retries of a full accept queue; the
        # node's cost of accepting them falls outside the window (in polling's favour)
        limiter = trio.CapacityLimiter(max(1, 50 // conf["procs"]))
        socks: list = [None] * len(followers)

        async def connect(i: int) -> None:
            async with limiter:
                socks[i] = await trio.open_tcp_stream(setup.host, setup.port)

        async with trio.open_nursery() as nursery:
            for i in range(len(followers)):
                nursery.start_soon(connect, i)
        print("ready", flush=True)
        if (await trio.to_thread.run_sync(sys.stdin.readline)).strip() != "go":
            return
        t0 = trio.current_time()
        with trio.move_on_after(600):  # as the streams' side: a poller still waiting then has no final
            async with trio.open_nursery() as nursery:
                for f, phase, sock in zip(followers, conf["phases"], socks):
                    nursery.start_soon(poll_follower, setup, f, conf["every"], t0 + phase, sock)
        for f in followers:
            if f.arrived is None and f.error is None:
                f.error = "no final status within 600 s"

    trio.run(main)
    print(json.dumps([[f.job_id, f.arrived, f.finished_at, f.polls, f.asked_per_s(conf["every"]), f.error, f.reconnects]
                      for f in followers]),
          flush=True)


def poll_in_processes(setup: Setup, pid: int, followers: list[Follower], every: float, procs: int) -> tuple:
    """The pollers in `procs` client processes (one Python process cannot keep 1,000 clients
    at 1/s beside the node on two cores). Client j first asks at j/N of a period after `go`,
    so the node sees an even N/every requests per second. Returns the node's CPU seconds and
    the wall time from `go` until every process has its final statuses."""
    n = len(followers)
    workers = []
    for g in range(procs):
        share = list(range(g, n, procs))
        if not share:
            continue
        p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--poll-worker"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        p.stdin.write(json.dumps({"url": setup.url, "key": setup.key, "every": every, "procs": procs,
                                  "ids": [followers[j].job_id for j in share],
                                  "phases": [j / n * every for j in share]}) + "\n")
        p.stdin.flush()
        workers.append((p, share))
    for p, _ in workers:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("a poller process did not start")
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    for p, _ in workers:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p, share in workers:
        rows = json.loads(p.stdout.readline())
        p.wait(timeout=60)
        for j, (job_id, arrived, finished_at, polls, rate, error, reconnects) in zip(share, rows):
            f = followers[j]
            f.arrived, f.finished_at, f.polls, f.rate, f.error = arrived, finished_at, polls, rate, error
            f.reconnects = reconnects
    return cpu_seconds(pid) - cpu0, time.monotonic() - t0


def rate_check(followers: list[Follower], every: float) -> dict:
    """Did each poller ask at the rate it was told (at least 0.95 of 1/every)?"""
    rates = sorted(f.rate for f in followers if getattr(f, "rate", None) is not None)
    floor = 0.95 / every
    slow = sum(1 for r in rates if r < floor)
    buckets: dict[str, int] = {}
    for r in rates:  # the rate each client kept, as a histogram (from each 0.05 of the asked rate)
        b = f"{min(int(r * every * 20), 24) / 20:.2f}"
        buckets[b] = buckets.get(b, 0) + 1
    print("pollers by rate kept (x 1/every, bucket lower bounds): " + ", ".join(f"{k}: {v}" for k, v in sorted(buckets.items())))
    for f in sorted((f for f in followers if getattr(f, "rate", None) is not None and f.rate < floor),
                    key=lambda f: f.rate)[:20]:
        print(f"  slow poller {f.job_id}: {f.rate:.3f}/s over {f.polls} requests")
    return {"asked_per_s_p50": round(pct(rates, 0.5), 3), "asked_per_s_min": round(rates[0], 3) if rates else None,
            "asked_per_s_p5": round(pct(rates, 0.05), 3), "pollers_below_0_95": slow,
            "poll_rate_ok": bool(rates) and slow == 0}


async def run_mode(setup: Setup, pid: int, n: int, mode: str, render_s: float, every: float,
                   procs: int = 4) -> dict:
    # every job renders render_s after its submit, and each client attaches within the first
    # part of that (submitting and attaching N take about N/100 s here)
    ids = await submit_jobs(setup, n, render_s + n / 100)
    if mode == "none":  # nobody follows: the jobs' own ends, in a window as long as the others
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        await trio.sleep(render_s + n / 100 + 2)
        cpu1, t1 = cpu_seconds(pid), time.monotonic()
        return {"n": n, "mode": mode, "node_cpu_s": round(cpu1 - cpu0, 3), "window_s": round(t1 - t0, 1),
                "cpu_ms_per_job": round((cpu1 - cpu0) * 1000 / n, 3), "load1": round(os.getloadavg()[0], 2)}
    rss_before = rss_kb(pid)
    followers = [Follower(i) for i in ids]
    if mode == "poll":
        cpu, wall = await trio.to_thread.run_sync(poll_in_processes, setup, pid, followers, every, procs)
        ok = [f for f in followers if f.arrived is not None]
        latencies = [f.arrived - f.finished_at for f in ok]
        out = {"n": n, "mode": mode, "procs": procs, "delivered": len(ok),
               "errors": sum(1 for f in followers if f.error),
               "reconnects": sum(f.reconnects for f in followers),
               "final_p50_s": round(pct(latencies, 0.5), 4), "final_p99_s": round(pct(latencies, 0.99), 4),
               "node_cpu_s": round(cpu, 3), "window_s": round(wall, 1),
               "cpu_ms_per_final": round(cpu * 1000 / max(1, len(ok)), 3), **rate_check(followers, every),
               "load1": round(os.getloadavg()[0], 2)}
        if not out["poll_rate_ok"]:
            print(f"WARNING: {out['pollers_below_0_95']} of {n} pollers asked below {0.95 / every:.2f}/s "
                  f"(min {out['asked_per_s_min']}/s, p5 {out['asked_per_s_p5']}/s): polling was under-driven, "
                  "its CPU per final is a lower bound")
        return out
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            limiter = trio.CapacityLimiter(50)  # connects at once (within the listen backlog)

            async def attach(f: Follower) -> None:
                async with limiter:
                    nursery.start_soon(stream_follower, setup, f)
                    await f.attached.wait()

            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            async with trio.open_nursery() as attaching:
                for f in followers:
                    attaching.start_soon(attach, f)
            cpu_open = cpu_seconds(pid)
            rss_open = rss_kb(pid)
        cpu1, t1 = cpu_seconds(pid), time.monotonic()
    ok = [f for f in followers if f.arrived is not None]
    latencies = [f.arrived - f.finished_at for f in ok]
    out = {"n": n, "mode": mode, "delivered": len(ok), "errors": sum(1 for f in followers if f.error),
           "final_p50_s": round(pct(latencies, 0.5), 4), "final_p99_s": round(pct(latencies, 0.99), 4),
           "node_cpu_s": round(cpu1 - cpu0, 3), "window_s": round(t1 - t0, 1),
           "cpu_ms_per_final": round((cpu1 - cpu0) * 1000 / max(1, len(ok)), 3),
           # the opening of every stream (connect, request, current status), before any job ends
           "open_cpu_ms_per_stream": round((cpu_open - cpu0) * 1000 / n, 3)}
    out["kb_per_stream"] = round((rss_open - rss_before) / n, 2)
    out["load1"] = round(os.getloadavg()[0], 2)
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
        rows = [await run_mode(setup, node.pid, n, "none", args.render, args.poll_every)] if args.baseline else []
        rows.append(await run_mode(setup, node.pid, n, "stream", args.render, args.poll_every))
        if n <= args.poll_max:
            rows.append(await run_mode(setup, node.pid, n, "poll", args.render, args.poll_every, args.poll_procs))
        return rows
    finally:
        node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--render", type=float, default=30.0, help="seconds each job renders (at least)")
    parser.add_argument("--poll-every", type=float, default=1.0)
    parser.add_argument("--poll-max", type=int, default=1000, help="largest N also run with pollers")
    parser.add_argument("--poll-procs", type=int, default=4, help="client processes the pollers are spread over")
    parser.add_argument("--baseline", action="store_true",
                        help="first the same jobs with nobody following: the node's CPU a job end by itself")
    parser.add_argument("--poll-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poll_worker:
        poll_worker()
        return
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
    ref = at or best  # the size the split is given at: the one compared, else the largest stream size
    summary.update({
        "streams_max": best["n"] if best else 0,
        "final_p99_s_1000": next((r["final_p99_s"] for r in streams if r["n"] == 1000), None),
        "kb_per_stream": best["kb_per_stream"] if best else None,
        "cpu_vs_polling": round(polls[at["n"]]["cpu_ms_per_final"] / at["cpu_ms_per_final"], 2) if at else None,
        "cpu_vs_polling_at": at["n"] if at else None,
        # the comparison holds only if every poller kept 0.95/s or more (rate_check)
        "poll_rate_ok": polls[at["n"]]["poll_rate_ok"] if at else None,
        "poll_asked_per_s_p50": polls[at["n"]]["asked_per_s_p50"] if at else None,
        "poll_asked_per_s_min": polls[at["n"]]["asked_per_s_min"] if at else None,
        "open_cpu_ms_per_stream": ref["open_cpu_ms_per_stream"] if ref else None,
        "job_end_cpu_ms": next((r["cpu_ms_per_job"] for r in summary["rows"]
                                if r["mode"] == "none" and ref and r["n"] == ref["n"]), None),
        "load_after": round(os.getloadavg()[0], 2),
    })
    print(json.dumps(summary, separators=(",", ":")))


if __name__ == "__main__":
    main()
