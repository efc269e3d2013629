"""Dashboard pages (issue 15): each page's server time (p50, p99 of `X-Process-Time`) and the
bytes it sends, with a realistic organization, against the API calls that feed Billing and
History in the same run. Loopback only, never in CI.

    .venv/bin/python bench/pages.py [--jobs 1000] [--runs 100] [--rounds 40] [--orgs 1000]
                                    [--only dashboard|operator]

Starts a fresh test-mode `genservice serve` (bench/server.py) and builds one organization
through the real API and pages: `--jobs` image jobs spread over 365 days of the service
clock (the operator's test clock moves a day between batches, so usage covers a year),
`--runs` product runs (text-to-clip: four steps each), 20 API keys, 10 members who accepted
their invitation with a password, one webhook and one ticket. Then one logged-in browser
session (httpx with the session cookie) reads every page `--rounds` times, interleaved with
the API reads, and prints per page: server p50/p99 (ms), HTML bytes on the wire, and HTML plus
the page's scripts and stylesheet on a first visit (no cache; gzip accepted, as browsers do), plus
the stored thumbnails of its "My generations" grid (Studio, History). Outputs shown full size are
signed links loaded lazily and are not counted. Studio's p50 is compared with the sum of the API
reads its first screen replaces (capabilities, models with queues, the last 24 jobs, balance);
the issue's bar: under 200 KB, within 3x. Last line: one JSON object.

The operator console (bench/operator_pages.py) is measured on its own server with `--orgs`
organizations: each console page's p50 against the summed p50 of the API reads it replaces,
and its bytes (the issue's bar: under 200 KB, p50 within 3x).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import operator_pages  # noqa: E402
from server import create_org, running_server  # noqa: E402

PASSWORD = "bench passphrase 2026"
RUN_FINAL = ("completed", "failed", "canceled")
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
ASSET = re.compile(r'(?:src|href)="(/static/[^"]+)"')
PAGES = ["/studio", "/products", "/products/text-to-clip", "/history", "/history?source=studio", "/assets",
         "/keys", "/billing", "/members", "/webhooks", "/support", "/settings", "/projects"]
API = {  # what feeds the pages compared (History's page size is 25)
    "GET /v1/runs?limit=25": "/v1/runs?limit=25",
    "GET /v1/billing/balance": "/v1/billing/balance",
    "GET /v1/billing/ledger?limit=50": "/v1/billing/ledger?limit=50",
    "GET /v1/billing/usage": "/v1/billing/usage",
    "GET /v1/billing/holds?status=held": "/v1/billing/holds?status=held",
    "GET /v1/billing/topups": "/v1/billing/topups",
}
STUDIO_API = {  # what Studio's first screen replaces: the catalog, the queues, the balance, the recent jobs
    "GET /v1/generation/capabilities": "/v1/generation/capabilities",
    "GET /v1/generation/models": "/v1/generation/models",
    "GET /v1/generation/requests?limit=24": "/v1/generation/requests?limit=24",
}
API |= STUDIO_API
THUMB = re.compile(r'src="(/studio/thumbs/[^"]+)"')


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def seed(url: str, op: dict, org: dict, jobs: int, runs: int) -> None:
    key = {"Authorization": f"Bearer {org['api_key']}"}
    org_id = org["organization_id"]
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        r = await c.post(f"/operator/v1/organizations/{org_id}/grants", json={"credits": "1000000"}, headers=op)
        r.raise_for_status()
        batches = 73  # five service days each: a year of usage
        limiter = trio.CapacityLimiter(8)

        async def job(i: int) -> None:
            async with limiter:
                body = {"prompt": f"bench still {i}", "resolution": "1k" if i % 3 else "2k"}
                r = await c.post("/v1/generation/capabilities/image.generate", json=body, headers=key)
                r.raise_for_status()
                status_url = f"/v1/generation/requests/{r.json()['request_id']}/status"
                while (await c.get(status_url, headers=key)).json()["status"] in ("queued", "rendering"):
                    await trio.sleep(0.05)

        for b in range(batches):
            async with trio.open_nursery() as n:
                for i in range(b * jobs // batches, (b + 1) * jobs // batches):
                    n.start_soon(job, i)
            r = await c.post("/operator/v1/test/clock", json={"advance_seconds": 5 * 86400}, headers=op)
            r.raise_for_status()
            if b % 10 == 9:
                print(f"  jobs {(b + 1) * jobs // batches}/{jobs}", file=sys.stderr, flush=True)

        async def run(i: int) -> None:
            async with limiter:
                r = await c.post("/v1/workflows/products/text-to-clip/runs", headers=key,
                                 json={"inputs": {"prompt": f"bench clip {i}", "seed": i}})
                r.raise_for_status()
                run_url = f"/v1/workflows/runs/{r.json()['data']['id']}"
                while (await c.get(run_url, headers=key)).json()["data"]["status"] not in RUN_FINAL:
                    await trio.sleep(0.1)

        async with trio.open_nursery() as n:
            for i in range(runs):
                n.start_soon(run, i)
        print(f"  runs {runs}", file=sys.stderr, flush=True)
        for i in range(19):
            (await c.post("/v1/api-keys", json={"name": f"key {i}"}, headers=key)).raise_for_status()
        await c.post("/v1/support/tickets", json={"subject_line": "Bench", "body": "A question"}, headers=key)


def members(url: str, op: dict, org_id: str, n: int) -> str:
    """`n` members accept invitations with a password; returns the first one's email (an owner)."""
    emails = []
    for i in range(n):
        email = f"m{i}@bench.test"
        r = httpx.post(f"{url}/operator/v1/organizations/{org_id}/invitations", headers=op,
                       json={"email": email, "role": "owner" if i == 0 else "member"})
        r.raise_for_status()
        token = r.json()["data"]["token"]
        transport = httpx.HTTPTransport(local_address=f"127.0.2.{1 + i}")
        with httpx.Client(base_url=url, timeout=60, transport=transport) as c:
            page = c.get(f"/invitations/accept?token={token}")
            r = c.post("/invitations/accept", data={"csrf_token": CSRF.search(page.text).group(1), "token": token,
                                                    "password": PASSWORD})
            assert r.status_code == 303, r.text[:300]
        emails.append(email)
    return emails[0]


def login(url: str, email: str) -> httpx.Client:
    c = httpx.Client(base_url=url, timeout=60, transport=httpx.HTTPTransport(local_address="127.0.3.1"))
    page = c.get("/login")
    r = c.post("/login", data={"csrf_token": CSRF.search(page.text).group(1), "email": email, "password": PASSWORD,
                               "next": "/studio"})
    assert r.status_code == 303, r.text[:300]
    return c


def measure(browser: httpx.Client, api: httpx.Client, key: str, rounds: int) -> dict:
    times: dict[str, list[float]] = {p: [] for p in PAGES} | {name: [] for name in API}
    size: dict[str, int] = {}
    for _ in range(rounds):
        for p in PAGES:
            r = browser.get(p)
            assert r.status_code == 200, (p, r.status_code)
            times[p].append(float(r.headers["X-Process-Time"]))
            size[p] = r.num_bytes_downloaded
        for name, path in API.items():
            r = api.get(path, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200, (name, r.status_code)
            times[name].append(float(r.headers["X-Process-Time"]))
    static, thumbs = {}, {}
    for p in PAGES:
        html = browser.get(p).text
        static[p] = sum(browser.get(a).num_bytes_downloaded for a in sorted(set(ASSET.findall(html))))
        # the grid's thumbnails (made on their first view; their bytes on the wire counted)
        thumbs[p] = sum(browser.get(a).num_bytes_downloaded for a in sorted(set(THUMB.findall(html))))
    return {"times": times, "size": size, "static": static, "thumbs": thumbs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--orgs", type=int, default=1000)
    ap.add_argument("--only", choices=("dashboard", "operator"))
    args = ap.parse_args()
    if args.only != "dashboard":
        console(args.orgs, args.rounds)
    if args.only != "operator":
        dashboard(args)


def console(orgs: int, rounds: int) -> None:
    load = os.getloadavg()
    with running_server() as (url, token, _data):
        op = {"Authorization": f"Bearer {token}"}
        started = time.monotonic()
        org = trio.run(operator_pages.seed, url, op, orgs)
        seeded = time.monotonic() - started
        m = operator_pages.measure(url, token, org, rounds)
    print(f"operator console: seeded {orgs} organizations in {seeded:.0f} s; load average at start {load[0]:.2f}, "
          f"{os.cpu_count()} cores; {rounds} rounds")
    print(f"{'console page':42} {'p50 ms':>8} {'p99 ms':>8} {'API p50':>8} {'ratio':>6} {'HTML B':>9}")
    worst = 0.0
    for p, times in m["page"].items():
        api = m["api"][p]
        ratio = pct(times, .5) / pct(api, .5) if api else float("nan")
        worst = max(worst, ratio) if api else worst
        api_p50 = f"{pct(api, .5):8.2f}" if api else f"{'-':>8}"
        print(f"{p:42} {pct(times, .5):8.2f} {pct(times, .99):8.2f} {api_p50} {ratio:6.2f} {m['size'][p]:9d}")
    print(json.dumps({"operator_max_page_bytes": max(m["size"].values()), "operator_worst_ratio": worst,
                      "organizations": orgs, "load_avg_start": load[0]}))


def dashboard(args) -> None:
    load = os.getloadavg()
    with running_server() as (url, token, _data):
        op = {"Authorization": f"Bearer {token}"}
        org = create_org(url, token)
        started = time.monotonic()
        trio.run(seed, url, op, org, args.jobs, args.runs)
        email = members(url, op, org["organization_id"], 10)
        seeded = time.monotonic() - started
        browser = login(url, email)
        with httpx.Client(base_url=url, timeout=60) as api:
            m = measure(browser, api, org["api_key"], args.rounds)
        browser.close()
    t = m["times"]
    print(f"seeded in {seeded:.0f} s: {args.jobs} jobs over 365 days, {args.runs} runs, 20 keys, 10 members; "
          f"load average at start {load[0]:.2f}, {os.cpu_count()} cores; {args.rounds} rounds")
    print(f"{'page / call':42} {'p50 ms':>8} {'p99 ms':>8} {'HTML B':>9} {'+static B':>10} {'+thumbs B':>10}")
    for p in PAGES:
        total = m["size"][p] + m["static"][p]
        print(f"{p:42} {pct(t[p], .5):8.2f} {pct(t[p], .99):8.2f} {m['size'][p]:9d} {total:10d} "
              f"{total + m['thumbs'][p]:10d}")
    for name in API:
        print(f"{name:42} {pct(t[name], .5):8.2f} {pct(t[name], .99):8.2f}")
    billing_api = [sum(v) for v in zip(*(t[n] for n in API if "billing" in n))]
    studio_api = [sum(v) for v in zip(*(t[n] for n in (*STUDIO_API, "GET /v1/billing/balance")))]
    out = {
        "history_p50_ms": pct(t["/history"], .5), "runs_api_p50_ms": pct(t["GET /v1/runs?limit=25"], .5),
        "history_vs_api": pct(t["/history"], .5) / pct(t["GET /v1/runs?limit=25"], .5),
        "billing_p50_ms": pct(t["/billing"], .5), "billing_api_sum_p50_ms": pct(billing_api, .5),
        "billing_vs_api_sum": pct(t["/billing"], .5) / pct(billing_api, .5),
        "billing_vs_ledger": pct(t["/billing"], .5) / pct(t["GET /v1/billing/ledger?limit=50"], .5),
        "max_page_bytes_with_static": max(m["size"][p] + m["static"][p] for p in PAGES),
        "studio_p50_ms": pct(t["/studio"], .5), "studio_api_sum_p50_ms": pct(studio_api, .5),
        "studio_vs_api_sum": pct(t["/studio"], .5) / pct(studio_api, .5),
        "studio_bytes_first_load": m["size"]["/studio"] + m["static"]["/studio"] + m["thumbs"]["/studio"],
        "load_avg_start": load[0],
    }
    print(f"History / GET /v1/runs: {out['history_vs_api']:.2f}x; Billing / sum of its five API reads: "
          f"{out['billing_vs_api_sum']:.2f}x (/ the ledger read alone: {out['billing_vs_ledger']:.2f}x)")
    print(f"Studio ({args.jobs} jobs in History): {out['studio_bytes_first_load']} bytes with scripts, stylesheet and "
          f"thumbnails; p50 {out['studio_p50_ms']:.2f} ms = {out['studio_vs_api_sum']:.2f}x the sum of the API reads "
          f"it replaces (capabilities, models, requests?limit=24, balance)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
