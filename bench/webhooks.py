"""Account-webhook delivery latency with one slow organization.

Starts `genservice serve` (a subprocess on 127.0.0.1, port 0, fresh data dir) that trusts a
local HTTPS receiver (trustme CA, loopback allowed). Creates ORGS organizations with HOOKS
webhooks each, all subscribed to `api_key.created`; organization 0's receiver answers only
after SLOW seconds (the service gives up at 10). Then, for ROUNDS rounds, every organization
creates an API key at once, and the receiver notes when each delivery arrives.

Latency of a delivery = arrival at the receiver - the moment the API-key POST was sent (an
upper bound on commit-to-receipt: it also holds the request's own handling and commit).
Printed: p50/p90/p99/max for the healthy organizations, the slow organization's count, and
as the LAST line a JSON object with at least `p99_ms` (healthy receivers; target < 1000).

    .venv/bin/python bench/webhooks.py [--rounds 20] [--interval 0.2] [--orgs 10] [--hooks 10]
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import tempfile
from functools import partial
from pathlib import Path

import httpx
import trio
import trustme

from server import ServeProcess  # tests/serve_process.py (bench/server.py puts tests/ on the path)

OPERATOR = "bench-operator-token"


class Receiver:
    def __init__(self, ca: trustme.CA, slow_seconds: float) -> None:
        self.ca = ca
        self.slow_seconds = slow_seconds
        self.port = 0
        self.arrivals: list[tuple[float, str, dict]] = []  # (trio time, path, body)
        self.arrived = trio.Event()

    async def start(self, nursery) -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1").configure_cert(ctx)
        listeners = await nursery.start(partial(trio.serve_ssl_over_tcp, self.handle, 0, ctx,
                                                host="127.0.0.1", backlog=1024))
        self.port = listeners[0].transport_listener.socket.getsockname()[1]

    async def handle(self, stream) -> None:
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
            head, _, body = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = 0
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            while len(body) < length:
                data = await stream.receive_some(65536)
                if not data:
                    return
                body += data
            self.arrivals.append((trio.current_time(), path, json.loads(body)))
            self.arrived.set()
            self.arrived = trio.Event()
            if path.startswith("/slow/"):
                await trio.sleep(self.slow_seconds)
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
            pass


def server(tmp: Path, ca_file: str) -> ServeProcess:
    """Not in test mode, unlike bench/server.py's: it trusts the receiver's CA and may send
    to loopback."""
    return ServeProcess(tmp / "data", {"GENSERVICE_HOST": "127.0.0.1", "GENSERVICE_WEBHOOK_ALLOW_PRIVATE": "1",
                                       "GENSERVICE_WEBHOOK_CA_FILE": ca_file},
                        operator_token=OPERATOR, log_dir=tmp, cwd=Path(__file__).resolve().parent.parent)


def breakdown(db_path: Path) -> dict:
    """Where the time goes, from the service's own records (healthy deliveries only): event
    commit -> fan-out row, fan-out -> POST started, POST duration."""
    import sqlite3
    from datetime import datetime

    def ts(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT e.created_at, d.created_at, d.sent_at, d.duration_ms FROM webhook_deliveries d "
        "JOIN events e ON e.seq = d.event_seq JOIN webhooks w ON w.id = d.webhook_id "
        "WHERE d.status = 'delivered' AND w.url LIKE '%/ok/%'").fetchall()
    conn.close()
    out = {}
    for name, values in (("outbox_to_fanout_ms", [(ts(b) - ts(a)) * 1000 for a, b, _, _ in rows]),
                         ("fanout_to_send_ms", [(ts(c) - ts(b)) * 1000 for _, b, c, _ in rows]),
                         ("post_ms", [float(d) for *_, d in rows])):
        values.sort()
        out[name] = {"p50": round(pct(values, 50), 1), "p99": round(pct(values, 99), 1)}
    return out


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[i]


async def run(args, base: str, rx: Receiver) -> dict:
    op = {"Authorization": f"Bearer {OPERATOR}"}
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        orgs = []
        for i in range(args.orgs):
            r = await client.post("/operator/v1/organizations", headers=op,
                                  json={"name": f"Org {i}", "owner_email": f"owner{i}@bench.test"})
            r.raise_for_status()
            key = r.json()["data"]["api_key"]
            for h in range(args.hooks):
                path = f"/slow/{i}/{h}" if i == 0 else f"/ok/{i}/{h}"
                r = await client.post("/v1/webhooks", headers={"Authorization": f"Bearer {key}"},
                                      json={"url": f"https://127.0.0.1:{rx.port}{path}",
                                            "events": ["api_key.created"]})
                r.raise_for_status()
            orgs.append(key)

        sent_at: dict[str, float] = {}  # key_id -> when its POST started

        async def create_key(org_index: int, key: str, n: int) -> None:
            t0 = trio.current_time()
            r = await client.post("/v1/api-keys", headers={"Authorization": f"Bearer {key}"},
                                  json={"name": f"bench-{org_index}-{n}"})
            r.raise_for_status()
            sent_at[r.json()["data"]["id"]] = t0

        started = trio.current_time()
        for n in range(args.rounds):
            async with trio.open_nursery() as nursery:
                for i, key in enumerate(orgs):
                    nursery.start_soon(create_key, i, key, n)
            await trio.sleep(args.interval)

        healthy_expected = args.rounds * (args.orgs - 1) * args.hooks
        with trio.move_on_after(60):
            while sum(1 for _, p, _ in rx.arrivals if p.startswith("/ok/")) < healthy_expected:
                await rx.arrived.wait()
        await trio.sleep(0.5)
        elapsed = trio.current_time() - started

    latencies, slow = [], 0
    for at, path, body in rx.arrivals:
        if path.startswith("/slow/"):
            slow += 1
            continue
        t0 = sent_at.get(body["data"]["key_id"])
        if t0 is not None:
            latencies.append((at - t0) * 1000)
    latencies.sort()
    healthy = sum(1 for _, p, _ in rx.arrivals if p.startswith("/ok/"))
    return {
        "bench": "webhooks",
        "organizations": args.orgs, "webhooks": args.orgs * args.hooks, "rounds": args.rounds,
        "events": args.rounds * args.orgs,
        "healthy_deliveries_expected": healthy_expected, "healthy_deliveries": healthy,
        "duplicates": healthy - len({(p, b["data"]["key_id"]) for _, p, b in rx.arrivals if p.startswith("/ok/")}),
        "slow_org_deliveries_started": slow, "slow_seconds": args.slow,
        "p50_ms": round(pct(latencies, 50), 1), "p90_ms": round(pct(latencies, 90), 1),
        "p99_ms": round(pct(latencies, 99), 1), "max_ms": round(latencies[-1], 1) if latencies else None,
        "elapsed_s": round(elapsed, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between rounds")
    ap.add_argument("--orgs", type=int, default=10)
    ap.add_argument("--hooks", type=int, default=10, help="webhooks per organization")
    ap.add_argument("--slow", type=float, default=10.0, help="seconds organization 0's receiver waits")
    args = ap.parse_args()

    ca = trustme.CA()
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as tmp:
        ca_file = str(Path(tmp) / "ca.pem")
        ca.cert_pem.write_to_path(ca_file)
        node = server(Path(tmp), ca_file)
        base = node.start()
        try:
            async def bench():
                async with trio.open_nursery() as nursery:
                    rx = Receiver(ca, args.slow)
                    await rx.start(nursery)
                    result = await run(args, base, rx)
                    nursery.cancel_scope.cancel()
                return result

            try:
                result = trio.run(bench)
            except BaseException:
                print(node.log_tail(), file=sys.stderr)
                raise
            result["breakdown"] = breakdown(Path(tmp) / "data" / "genservice.db")
        finally:
            node.stop(timeout=30)
    print(f"{result['events']} events -> {result['healthy_deliveries']}/{result['healthy_deliveries_expected']} "
          f"healthy deliveries ({result['duplicates']} duplicates), slow organization: "
          f"{result['slow_org_deliveries_started']} sends started")
    print(f"latency, request start -> receipt (healthy receivers): p50 {result['p50_ms']} ms, "
          f"p90 {result['p90_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms")
    for name, v in result["breakdown"].items():
        print(f"  {name}: p50 {v['p50']} ms, p99 {v['p99']} ms")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
