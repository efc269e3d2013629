"""Login cost and its effect on the API (issue 14), loopback only, never in CI.

    .venv/bin/python bench/login.py [--seconds 8] [--logins 20] [--api 4]

Starts a fresh test-mode `genservice serve` (bench/server.py), creates one organization and
`4 x --logins` members who accept their invitation with a password through the pages (so
their passwords are real argon2id hashes with the node's parameters). Then, in one run:

1. idle: `--api` closed-loop clients call `GET /v1/billing/balance` for `--seconds`;
2. loaded: the same API clients run again while `--logins` clients log in back to back
   through the pages (GET /login for the form's CSRF token, then POST /login; the POST is
   timed), each client from its own loopback address (127.0.0.x) and with its own four
   accounts, so the login throttle (20 per address, 5 per email) does not refuse them.

Prints the argon2 parameters and one hash's time in this process, logins per second with
p50/p99 of the login POST, and the API's p50/p99 without and during the logins, with their
ratio. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from server import create_org, running_server  # noqa: E402

from service import passwords  # noqa: E402

PASSWORD = "bench passphrase 2026"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def accept_invitations(url: str, operator: str, org_id: str, n: int) -> list[str]:
    emails = [f"p{i}@bench.test" for i in range(n)]
    op = {"Authorization": f"Bearer {operator}"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as admin:
        tokens = []
        for e in emails:
            r = await admin.post(f"/operator/v1/organizations/{org_id}/invitations", json={"email": e, "role": "member"},
                                 headers=op)
            r.raise_for_status()
            tokens.append(r.json()["data"]["token"])

    async def accept(token: str, i: int) -> None:
        # ten accepts per source address: the pages' throttle allows 20 at once per address
        transport = httpx.AsyncHTTPTransport(local_address=f"127.0.1.{1 + i // 10}")
        async with httpx.AsyncClient(base_url=url, timeout=60, transport=transport) as c:
            page = await c.get(f"/invitations/accept?token={token}")
            r = await c.post("/invitations/accept", data={"csrf_token": CSRF.search(page.text).group(1),
                                                          "token": token, "password": PASSWORD})
            assert r.status_code == 303, (r.status_code, r.text[:300])

    async with trio.open_nursery() as nursery:
        limiter = trio.CapacityLimiter(8)

        async def one(t, i):
            async with limiter:
                await accept(t, i)

        for i, t in enumerate(tokens):
            nursery.start_soon(one, t, i)
    return emails


async def api_load(url: str, key: str, clients: int, seconds: float) -> list[float]:
    lat: list[float] = []
    end = time.perf_counter() + seconds

    async def loop():
        async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as c:
            while time.perf_counter() < end:
                t = time.perf_counter()
                r = await c.get("/v1/billing/balance")
                lat.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, r.status_code

    async with trio.open_nursery() as nursery:
        for _ in range(clients):
            nursery.start_soon(loop)
    return lat


async def login_load(url: str, accounts: list[list[str]], seconds: float, out: dict) -> None:
    end = time.perf_counter() + seconds

    async def loop(i: int, mine: list[str]):
        transport = httpx.AsyncHTTPTransport(local_address=f"127.0.0.{10 + i}")
        async with httpx.AsyncClient(base_url=url, timeout=60, transport=transport) as c:
            n = 0
            while time.perf_counter() < end and n < 4 * len(mine):
                email = mine[n % len(mine)]
                n += 1
                page = await c.get("/login")
                token = CSRF.search(page.text).group(1)
                t = time.perf_counter()
                r = await c.post("/login", data={"csrf_token": token, "email": email, "password": PASSWORD})
                out["lat"].append((time.perf_counter() - t) * 1000)
                out["statuses"][r.status_code] = out["statuses"].get(r.status_code, 0) + 1

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i, mine in enumerate(accounts):
            nursery.start_soon(loop, i, mine)
    out["elapsed"] = time.perf_counter() - started


async def main(args) -> dict:
    h = passwords.HASHER
    t = time.perf_counter()
    stored = h.hash(PASSWORD)
    hash_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    h.verify(stored, PASSWORD)
    verify_ms = (time.perf_counter() - t) * 1000
    print(f"argon2id t={h.time_cost} m={h.memory_cost} KiB p={h.parallelism}: hash {hash_ms:.1f} ms, "
          f"verify {verify_ms:.1f} ms (one thread, this process)")
    with running_server() as (url, operator, _data):
        org = create_org(url, operator)
        emails = await accept_invitations(url, operator, org["organization_id"], 4 * args.logins)
        accounts = [emails[4 * i:4 * i + 4] for i in range(args.logins)]
        await api_load(url, org["api_key"], args.api, 1.0)  # warm-up
        idle = await api_load(url, org["api_key"], args.api, args.seconds)
        logins: dict = {"lat": [], "statuses": {}}
        loaded: list[float] = []

        async def api_during():
            loaded.extend(await api_load(url, org["api_key"], args.api, args.seconds))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(api_during)
            nursery.start_soon(login_load, url, accounts, args.seconds, logins)
    lat = logins["lat"]
    result = {
        "argon2": {"type": "id", "time_cost": h.time_cost, "memory_kib": h.memory_cost, "parallelism": h.parallelism,
                   "workers": passwords.WORKERS},
        "hash_ms": round(hash_ms, 1), "verify_ms": round(verify_ms, 1),
        "concurrent_logins": args.logins, "logins": len(lat),
        "logins_per_s": round(len(lat) / logins["elapsed"], 1) if lat else 0,
        "login_p50_ms": round(pct(lat, 0.50), 1), "login_p99_ms": round(pct(lat, 0.99), 1),
        "login_statuses": {str(k): v for k, v in sorted(logins["statuses"].items())},
        "api_clients": args.api,
        "api_idle_rps": round(len(idle) / args.seconds, 1), "api_idle_p50_ms": round(pct(idle, 0.5), 2),
        "api_idle_p99_ms": round(pct(idle, 0.99), 2),
        "api_during_rps": round(len(loaded) / args.seconds, 1), "api_during_p50_ms": round(pct(loaded, 0.5), 2),
        "api_during_p99_ms": round(pct(loaded, 0.99), 2),
        "cores": os.cpu_count(), "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }
    result["api_p99_ratio"] = round(result["api_during_p99_ms"] / result["api_idle_p99_ms"], 2)
    print(f"logins: {result['logins']} in {logins['elapsed']:.1f} s with {args.logins} concurrent = "
          f"{result['logins_per_s']}/s, p50 {result['login_p50_ms']} ms, p99 {result['login_p99_ms']} ms, "
          f"statuses {result['login_statuses']}")
    print(f"API GET /v1/billing/balance ({args.api} clients): idle p50 {result['api_idle_p50_ms']} ms "
          f"p99 {result['api_idle_p99_ms']} ms ({result['api_idle_rps']}/s); during logins p50 "
          f"{result['api_during_p50_ms']} ms p99 {result['api_during_p99_ms']} ms ({result['api_during_rps']}/s); "
          f"p99 ratio {result['api_p99_ratio']}x; median idle {statistics.median(idle):.2f} ms")
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--logins", type=int, default=20)
    p.add_argument("--api", type=int, default=4)
    res = trio.run(main, p.parse_args())
    print(json.dumps(res))
