"""The operator console's pages (issue 26) for bench/pages.py: `--orgs` organizations (one in
ten waiting for approval, each with a grant, one in twenty with a support ticket), then the
console signed in with the operator token reads every page `rounds` times, interleaved with
the API reads each page replaces (the operator API's lists; an organization's balance and
ledger through its own key). Reports server p50/p99 (`X-Process-Time`) and bytes per page.
"""

from __future__ import annotations

import re
import sys

import httpx
import trio

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


async def seed(url: str, op: dict, orgs: int) -> dict:
    """Returns one approved organization (id and key) for the detail page."""
    first: dict = {}
    limiter = trio.CapacityLimiter(8)
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        async def make(i: int) -> None:
            async with limiter:
                body = {"name": f"Org {i:04d}", "owner_email": f"owner{i}@orgs.bench", "approved": i % 10 != 0}
                r = await c.post("/operator/v1/organizations", json=body, headers=op)
                r.raise_for_status()
                org = r.json()["data"]
                oid, key = org["organization_id"], {"Authorization": f"Bearer {org['api_key']}"}
                r = await c.post(f"/operator/v1/organizations/{oid}/grants", headers=op,
                                 json={"credits": "50", "reason": "bench"})
                r.raise_for_status()
                if i % 20 == 1:
                    await c.post("/v1/support/tickets", json={"subject_line": f"Question {i}", "body": "Hello"},
                                 headers=key)
                if i == 1:
                    first.update(org)

        async with trio.open_nursery() as n:
            for i in range(orgs):
                n.start_soon(make, i)
    print(f"  organizations {orgs}", file=sys.stderr, flush=True)
    return first


def sign_in(url: str, token: str) -> httpx.Client:
    c = httpx.Client(base_url=url, timeout=60, transport=httpx.HTTPTransport(local_address="127.0.4.1"))
    page = c.get("/operator/login")
    r = c.post("/operator/login", data={"csrf_token": CSRF.search(page.text).group(1), "token": token,
                                        "next": "/operator"})
    assert r.status_code == 303, r.text[:300]
    return c


def pairs(org: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """(console page, [(auth, API path) it replaces]); auth "op" or "key"."""
    oid = org["organization_id"]
    return [
        ("/operator", [("op", "/operator/v1/organizations?status=pending")]),
        ("/operator/organizations", [("op", "/operator/v1/organizations")]),
        ("/operator/organizations?status=pending", [("op", "/operator/v1/organizations?status=pending")]),
        ("/operator/organizations?q=Org%2000", [("op", "/operator/v1/organizations")]),
        (f"/operator/organizations/{oid}", [("key", "/v1/billing/balance"), ("key", "/v1/billing/ledger?limit=50"),
                                            ("key", "/v1/billing/usage")]),
        ("/operator/support", [("op", "/operator/v1/support/tickets?limit=50")]),
        ("/operator/engines", [("key", "/v1/generation/models")]),
        ("/operator/jobs", [("key", "/v1/generation/models")]),
        ("/operator/catalog", [("key", "/v1/generation/models")]),
        ("/operator/mail", []),
        ("/operator/audit", []),
    ]


def measure(url: str, token: str, org: dict, rounds: int) -> dict:
    console = sign_in(url, token)
    auth = {"op": {"Authorization": f"Bearer {token}"}, "key": {"Authorization": f"Bearer {org['api_key']}"}}
    table = pairs(org)
    page_t: dict[str, list[float]] = {p: [] for p, _ in table}
    api_t: dict[str, list[float]] = {p: [] for p, _ in table}
    size: dict[str, int] = {}
    with httpx.Client(base_url=url, timeout=60) as api:
        for _ in range(rounds):
            for p, reads in table:
                r = console.get(p)
                assert r.status_code == 200, (p, r.status_code)
                page_t[p].append(float(r.headers["X-Process-Time"]))
                size[p] = len(r.content)
                if reads:
                    total = 0.0
                    for who, path in reads:
                        a = api.get(path, headers=auth[who])
                        assert a.status_code == 200, (path, a.status_code)
                        total += float(a.headers["X-Process-Time"])
                    api_t[p].append(total)
    console.close()
    return {"page": page_t, "api": api_t, "size": size, "reads": {p: [r for _, r in reads] for p, reads in table}}
