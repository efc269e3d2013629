"""Random kill -9 crash loop (reliability.md R1, §6.1 and §6.3).

    python reliability/crashloop.py --kills 200 --seed N

A seeded driver (the seed is printed first) starts `genservice serve` in test mode as a
subprocess in its own session, creates organizations through the operator API (each with
an account webhook to an HTTPS receiver), then runs K concurrent clients issuing a weighted
mix: image submits (and some video) with `[[delay:S]]`, `[[fail:...]]` and `[[nsfw]]`,
some with a job webhook and some with an Idempotency-Key (retried after an `info`),
cancels, uploads, product runs (text-to-clip, failing often so they end fast) and their
cancels, top-ups paid once and twice (concurrently), grants (some expiring soon), test
clock advances, low-balance thresholds, API key creation and revocation. Organization 0
gets no grants or top-ups: it spends its signup credits down to 402s and low-balance
warnings. Every operation
is logged as `invoke`, then `ok` / `fail` / `info` (info: connection dropped, timeout,
408 or 5xx: it may or may not have happened) to `history.jsonl` in the run directory.

Meanwhile the killer SIGKILLs the process group (`os.killpg`) at random moments (some
during start-up, before the node listens), restarts it on the same data dir, and goes on.
At the end the node is killed and restarted once more, the driver waits until nothing is
in flight, and checks (reliability/checker.py and below):

- I1-I10: no job or run non-final, every final job's hold settled (no `held` hold under
  a final job), lots against the ledger, top-up lots, asset files, outboxes drained;
- credit drift exactly 0 per organization (Decimal): the client's model signup + grants
  + paid top-ups (an `info` grant/pay counts 0 or 1 by the lots it created) - Σ captured -
  expired, against the API's `available + held`, and Σ API ledger against `available`;
  Σ captured (DB) against the API's usage, expired (DB) against the ledger's expiries;
- no acknowledged operation lost or applied twice: every ok submit's job exists exactly
  once (an info one at most once, across its retries); ok uploads exist, info uploads at
  most once; ok runs exist once; ok grants and pays gave exactly one lot; ok cancels left
  the job canceled with its hold released; ok revokes stay revoked (401), ok keys not
  revoked still work; the last uncontended threshold is the stored one;
- no webhook delivered twice (`X-Service-Delivery` ids and job webhooks per job), every
  ok key creation produced its `api_key.created` delivery.

Prints a summary and, last, one JSON line. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checker  # noqa: E402
from receiver import Receiver  # noqa: E402
from scenario import png_bytes  # noqa: E402
from server import Node  # noqa: E402

SIGNUP = Decimal("200.00")
FAILS = ["[[fail:upstream:502]]", "[[fail:unavailable]]", "[[fail:incomplete]]", "[[fail:no-output]]",
         "[[fail:internal]]"]
WEIGHTS = {
    "submit": 30, "submit_video": 4, "cancel": 5, "upload": 5, "run": 6, "cancel_run": 2,
    "topup": 3, "pay": 4, "grant": 4, "clock": 1, "threshold": 4, "key_create": 3, "key_revoke": 2,
    "balance": 3,
}
TIMEOUT = 15.0


# -- history ----------------------------------------------------------------------------------
@dataclass
class Op:
    i: int
    kind: str
    org: int
    client: int
    args: dict
    t0: float
    outcome: str | None = None  # ok, fail, info
    t1: float | None = None
    result: dict = field(default_factory=dict)


class History:
    def __init__(self, path: Path) -> None:
        self.ops: list[Op] = []
        self.f = open(path, "w")  # noqa: SIM115 - closed in close()

    def invoke(self, kind: str, org: int, client: int, **args) -> Op:
        op = Op(len(self.ops), kind, org, client, args, time.monotonic())
        self.ops.append(op)
        self._write({"type": "invoke", "i": op.i, "op": kind, "org": org, "client": client, "args": args})
        return op

    def complete(self, op: Op, outcome: str, **result) -> Op:
        op.outcome, op.t1, op.result = outcome, time.monotonic(), result
        self._write({"type": outcome, "i": op.i, "op": op.kind, "org": op.org, "result": result})
        return op

    def _write(self, rec: dict) -> None:
        rec["t"] = round(time.monotonic(), 4)
        self.f.write(json.dumps(rec, default=str) + "\n")

    def close(self) -> None:
        self.f.close()


# -- the world the clients share --------------------------------------------------------------
@dataclass
class Org:
    n: int
    id: str
    key: str
    project: str
    jobs: list = field(default_factory=list)        # ok submit job ids
    assets: list = field(default_factory=list)      # ok upload asset ids (images)
    runs: list = field(default_factory=list)
    topups: list = field(default_factory=list)      # (id, credits)
    keys: list = field(default_factory=list)        # dicts id, key, revoke_tried
    retries: list = field(default_factory=list)     # submits to send again (info + Idempotency-Key)


class World:
    def __init__(self, node: Node, rx: Receiver, seed: int, clients: int) -> None:
        self.node, self.rx, self.seed, self.n_clients = node, rx, seed, clients
        self.orgs: list[Org] = []
        self.url: str | None = None
        self.up = trio.Event()
        self.stop = False
        self.kills = 0
        self.startup_kills = 0
        self.restarts: list[float] = []
        self.kill_times: list[float] = []
        self.history: History | None = None
        self.open_jobs = 0          # queued + rendering jobs, read from the DB (backpressure)
        self.max_open = 16


def outcome_of(r: httpx.Response | None) -> str:
    if r is None or r.status_code >= 500 or r.status_code == 408:
        return "info"
    return "ok" if r.status_code < 300 else "fail"


async def call(w: World, c: httpx.AsyncClient, method: str, path: str, *, op: bool = False,
               key: str | None = None, **kw) -> httpx.Response | None:
    url = w.url
    if url is None:
        return None
    headers = dict(w.node.op if op else {"Authorization": f"Bearer {key}"})
    headers.update(kw.pop("headers", {}))
    try:
        return await c.request(method, url + path, headers=headers, timeout=TIMEOUT, **kw)
    except Exception:  # noqa: BLE001 - connection refused/reset, timeout, protocol error: unknown
        return None


def body_of(r: httpx.Response | None) -> dict:
    try:
        return r.json() if r is not None else {}
    except ValueError:
        return {}


# -- operations -------------------------------------------------------------------------------
def prompt_for(rng: random.Random, tag: str, long_ok: bool = True) -> str:
    x = rng.random()
    if x < 0.55:
        d = f"[[delay:{rng.uniform(0.05, 1.2 if long_ok else 0.4):.2f}]]"
    elif x < 0.72:
        d = rng.choice(FAILS)
    elif x < 0.82:
        d = "[[nsfw]]"
    else:
        d = ""
    return f"{tag} a lighthouse {d}".strip()


async def op_submit(w: World, c, rng, org: Org, cid: int, video: bool = False, retry: dict | None = None) -> None:
    if retry is not None:
        body, headers, tag, model = retry["body"], retry["headers"], retry["tag"], retry["model"]
        op = w.history.invoke("submit_retry", org.n, cid, tag=tag, first=retry["first"])
    else:
        op = w.history.invoke("submit_video" if video else "submit", org.n, cid)
        tag = f"op{op.i}"
        if video:
            if not org.assets:
                w.history.complete(op, "fail", reason="no start frame yet")
                return
            model = "camera-move"
            body = {"prompt": prompt_for(rng, tag, long_ok=False), "duration": 5,
                    "resolution": rng.choice(["480p", "720p"]) if org.n == 0 else "480p",
                    "inputs": {"start_frame": [rng.choice(org.assets)]}}
        else:
            model = "proc-image"
            body = {"prompt": prompt_for(rng, tag), "resolution": rng.choice(["1k", "1k", "2k"])}
        x = rng.random()
        if x < 0.3:
            body["webhook_url"] = w.rx.url(f"/ok/job/{tag}")
        elif x < 0.35:
            body["webhook_url"] = f"http://127.0.0.1:9/never/{tag}"
        headers = {"Idempotency-Key": f"idem-{tag}"} if rng.random() < 0.4 else {}
        op.args.update(tag=tag, body=body, idempotency=bool(headers))
    r = await call(w, c, "POST", f"/v1/generation/models/{model}", key=org.key, json=body, headers=headers)
    out = outcome_of(r)
    b = body_of(r)
    w.history.complete(op, out, status=None if r is None else r.status_code, job_id=b.get("request_id"),
                       tag=tag)
    if out == "ok":
        org.jobs.append(b["request_id"])
    elif out == "info" and headers:
        org.retries.append({"body": body, "headers": headers, "tag": tag, "model": model,
                            "first": op.args.get("first", op.i) if retry else op.i})


async def op_cancel(w: World, c, rng, org: Org, cid: int) -> None:
    if not org.jobs:
        return
    job_id = org.jobs[-rng.randint(1, min(len(org.jobs), 6))]
    op = w.history.invoke("cancel", org.n, cid, job_id=job_id)
    r = await call(w, c, "POST", f"/v1/generation/requests/{job_id}/cancel", key=org.key)
    w.history.complete(op, outcome_of(r), status=None if r is None else r.status_code,
                       job_status=body_of(r).get("status"))


async def op_upload(w: World, c, rng, org: Org, cid: int) -> None:
    op = w.history.invoke("upload", org.n, cid)
    data = png_bytes(w.seed * 1_000_003 + op.i)
    sha = hashlib.sha256(data).hexdigest()
    op.args["sha256"] = sha
    r = await call(w, c, "POST", "/v1/generation/uploads", key=org.key,
                   files={"file": (f"op{op.i}.png", data, "image/png")})
    out = outcome_of(r)
    asset = body_of(r).get("data") or {}
    w.history.complete(op, out, status=None if r is None else r.status_code, asset_id=asset.get("id"))
    if out == "ok":
        org.assets.append(asset["id"])


async def op_run(w: World, c, rng, org: Org, cid: int) -> None:
    op = w.history.invoke("run", org.n, cid)
    tag = f"op{op.i}"
    d = rng.choice(FAILS) if rng.random() < 0.6 else f"[[delay:{rng.uniform(0, 0.3):.2f}]]"
    body = {"inputs": {"prompt": f"{tag} a clip {d}", "resolution": "480p"}}
    headers = {"Idempotency-Key": f"run-{tag}"} if rng.random() < 0.3 else {}
    op.args.update(tag=tag, body=body)
    r = await call(w, c, "POST", "/v1/workflows/products/text-to-clip/runs", key=org.key, json=body,
                   headers=headers)
    out = outcome_of(r)
    run = body_of(r).get("data") or {}
    w.history.complete(op, out, status=None if r is None else r.status_code, run_id=run.get("id"), tag=tag)
    if out == "ok":
        org.runs.append(run["id"])


async def op_cancel_run(w: World, c, rng, org: Org, cid: int) -> None:
    if not org.runs:
        return
    run_id = org.runs[-rng.randint(1, min(len(org.runs), 3))]
    op = w.history.invoke("cancel_run", org.n, cid, run_id=run_id)
    r = await call(w, c, "POST", f"/v1/workflows/runs/{run_id}/cancel", key=org.key)
    w.history.complete(op, outcome_of(r), status=None if r is None else r.status_code,
                       run_status=(body_of(r).get("data") or {}).get("status"))


async def op_topup(w: World, c, rng, org: Org, cid: int) -> None:
    credits = rng.randint(100, 600)
    op = w.history.invoke("topup", org.n, cid, credits=credits)
    r = await call(w, c, "POST", "/v1/billing/topups", key=org.key, json={"credits": credits})
    out = outcome_of(r)
    t = ((body_of(r).get("data") or {}).get("topup")) or {}
    w.history.complete(op, out, status=None if r is None else r.status_code, topup_id=t.get("id"))
    if out == "ok":
        org.topups.append((t["id"], credits))


async def _pay(w: World, c, org: Org, cid: int, topup_id: str, credits: int, twice: bool) -> None:
    op = w.history.invoke("pay", org.n, cid, topup_id=topup_id, credits=credits, concurrent=twice)
    r = await call(w, c, "POST", f"/operator/v1/topups/{topup_id}/pay", op=True)
    w.history.complete(op, outcome_of(r), status=None if r is None else r.status_code,
                       topup_status=(body_of(r).get("data") or {}).get("status"))


async def op_pay(w: World, c, rng, org: Org, cid: int) -> None:
    if not org.topups:
        return
    topup_id, credits = org.topups[-rng.randint(1, min(len(org.topups), 4))]
    if rng.random() < 0.25:  # the provider confirms twice at once
        async with trio.open_nursery() as n:
            n.start_soon(_pay, w, c, org, cid, topup_id, credits, True)
            n.start_soon(_pay, w, c, org, cid, topup_id, credits, True)
    else:
        await _pay(w, c, org, cid, topup_id, credits, False)


async def op_grant(w: World, c, rng, org: Org, cid: int) -> None:
    credits = Decimal(rng.randint(100, 2500)) / 100
    op = w.history.invoke("grant", org.n, cid, credits=str(credits))
    reason = f"op{op.i}"
    body = {"credits": str(credits), "reason": reason}
    if rng.random() < 0.5:  # expires soon: the loop sees lots expire (alone and under holds)
        at = datetime.now(UTC) + timedelta(seconds=rng.uniform(1, 90))
        body["expires_at"] = at.isoformat()
    op.args.update(reason=reason, expires_at=body.get("expires_at"))
    r = await call(w, c, "POST", f"/operator/v1/organizations/{org.id}/grants", op=True, json=body)
    w.history.complete(op, outcome_of(r), status=None if r is None else r.status_code,
                       lot_id=(body_of(r).get("data") or {}).get("id"))


async def op_clock(w: World, c, rng, org: Org, cid: int) -> None:
    secs = rng.randint(10, 120)
    op = w.history.invoke("clock", org.n, cid, advance_seconds=secs)
    r = await call(w, c, "POST", "/operator/v1/test/clock", op=True, json={"advance_seconds": secs})
    w.history.complete(op, outcome_of(r), status=None if r is None else r.status_code)


async def op_threshold(w: World, c, rng, org: Org, cid: int) -> None:
    value = None if rng.random() < 0.2 else f"{rng.randint(0, 40000) / 100:.2f}"
    op = w.history.invoke("threshold", org.n, cid, value=value)
    r = await call(w, c, "PUT", "/v1/billing/settings", key=org.key, json={"low_balance_threshold": value})
    w.history.complete(op, outcome_of(r), status=None if r is None else r.status_code)


async def op_key_create(w: World, c, rng, org: Org, cid: int) -> None:
    op = w.history.invoke("key_create", org.n, cid)
    r = await call(w, c, "POST", "/v1/api-keys", key=org.key, json={"name": f"op{op.i}"})
    out = outcome_of(r)
    k = body_of(r).get("data") or {}
    w.history.complete(op, out, status=None if r is None else r.status_code, key_id=k.get("id"))
    if out == "ok":
        org.keys.append({"id": k["id"], "key": k["key"]})


async def op_key_revoke(w: World, c, rng, org: Org, cid: int) -> None:
    if not org.keys:
        return
    k = rng.choice(org.keys)
    op = w.history.invoke("key_revoke", org.n, cid, key_id=k["id"])
    r = await call(w, c, "DELETE", f"/v1/api-keys/{k['id']}", key=org.key)
    w.history.complete(op, outcome_of(r), status=None if r is None else r.status_code)


async def op_balance(w: World, c, rng, org: Org, cid: int) -> None:
    op = w.history.invoke("balance", org.n, cid)
    r = await call(w, c, "GET", "/v1/billing/balance", key=org.key)
    w.history.complete(op, outcome_of(r), status=None if r is None else r.status_code)


OPS = {
    "submit": op_submit, "submit_video": lambda *a: op_submit(*a, video=True), "cancel": op_cancel,
    "upload": op_upload, "run": op_run, "cancel_run": op_cancel_run, "topup": op_topup, "pay": op_pay,
    "grant": op_grant, "clock": op_clock, "threshold": op_threshold, "key_create": op_key_create,
    "key_revoke": op_key_revoke, "balance": op_balance,
}


GENERATING = {"submit", "submit_video", "run"}
INFLOW = {"topup", "pay", "grant"}  # never for the poor organization (org 0): it runs dry


async def gauge(w: World) -> None:
    """Keep `w.open_jobs` current: clients stop adding renders while the line is long, so the
    backlog (and the final quiescence) stays bounded however fast they go."""
    def read() -> int:
        try:
            with closing(checker.connect(w.node.db_path)) as conn:
                return checker.scalar(conn, "SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'rendering')")
        except Exception:  # noqa: BLE001 - the file may be mid-recovery; keep the last value
            return w.open_jobs
    while not w.stop:
        w.open_jobs = await trio.to_thread.run_sync(read)
        await trio.sleep(0.25)


async def client(w: World, cid: int) -> None:
    rng = random.Random(w.seed * 7919 + cid)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=4)) as c:
        while not w.stop:
            if not w.up.is_set():
                with trio.move_on_after(0.5):
                    await w.up.wait()
                continue
            org = rng.choice(w.orgs)
            if org.retries and rng.random() < 0.5:
                await op_submit(w, c, rng, org, cid, retry=org.retries.pop(0))
            else:
                kind = rng.choices(kinds, weights)[0]
                if kind in INFLOW and org.n == 0 and len(w.orgs) > 1:
                    kind = rng.choice(["submit", "submit_video", "threshold"])
                if kind in GENERATING and w.open_jobs >= w.max_open:
                    await trio.sleep(0.1)  # the line is long: wait instead of piling on
                    continue
                await OPS[kind](w, c, rng, org, cid)
            await trio.sleep(rng.uniform(0, 0.05))


# -- the killer -------------------------------------------------------------------------------
async def killer(w: World, kills: int, rng: random.Random, min_up: float, max_up: float) -> None:
    for _ in range(kills):
        await trio.sleep(rng.uniform(min_up, max_up) if rng.random() < 0.85 else rng.uniform(0.02, 0.3))
        w.up = trio.Event()
        w.url = None
        status = await trio.to_thread.run_sync(w.node.kill)
        w.kill_times.append(time.monotonic())
        if status != -9:
            raise RuntimeError(f"the node had exited by itself ({status}):\n{w.node.log_tail()}")
        w.kills += 1
        await trio.sleep(rng.uniform(0, 0.2))
        if rng.random() < 0.15:  # a kill during start-up (migrations, recovery), before it listens
            await trio.to_thread.run_sync(start_and_kill, w.node, rng.uniform(0.1, 0.9))
            w.startup_kills += 1
        t = time.monotonic()
        await trio.to_thread.run_sync(w.node.start)
        w.restarts.append(time.monotonic() - t)
        w.url = w.node.url
        w.up.set()


def start_and_kill(node: Node, after: float) -> None:
    """Start the node and SIGKILL it `after` seconds later, listening or not."""
    import subprocess

    from server import StartFailed

    try:
        node.start(timeout=after)
    except StartFailed:
        if node.proc.returncode != -9:  # it died by itself, not by our kill
            raise
        return  # killed while starting (start() kills on its timeout)
    except subprocess.TimeoutExpired:
        pass
    if node.kill() != -9:
        raise RuntimeError(f"the node had exited by itself ({node.proc.returncode}):\n{node.log_tail()}")


# -- setup ------------------------------------------------------------------------------------
def setup_orgs(w: World, n: int) -> None:
    with httpx.Client(timeout=30) as c:
        for i in range(n):
            r = c.post(w.url + "/operator/v1/organizations", headers=w.node.op,
                       json={"name": f"Loop {i}", "owner_email": f"owner{i}@loop.test"})
            r.raise_for_status()
            d = r.json()["data"]
            org = Org(i, d["organization_id"], d["api_key"], d["default_project_id"])
            h = {"Authorization": f"Bearer {org.key}"}
            r = c.post(w.url + "/v1/webhooks", headers=h, json={
                "url": w.rx.url(f"/ok/acct/{i}"),
                "events": ["api_key.created", "api_key.revoked", "billing.credits_low"]})
            r.raise_for_status()
            r = c.post(w.url + "/v1/generation/uploads", headers=h,
                       files={"file": ("start.png", png_bytes(w.seed * 31 + i, 32), "image/png")})
            r.raise_for_status()
            org.assets.append(r.json()["data"]["id"])
            w.orgs.append(org)


# -- checks -----------------------------------------------------------------------------------
def check_all(w: World) -> tuple[list[str], dict]:
    problems = checker.invariants(w.node) + checker.webhook_checks(w.node, w.rx)
    ops = w.history.ops
    by_kind: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_kind[op.kind].append(op)
    figures: dict = {"orgs": {}}
    with closing(checker.connect(w.node.db_path)) as conn, httpx.Client(timeout=30) as c:
        q = lambda sql, p=(): checker.rows(conn, sql, p)  # noqa: E731
        jobs = q("SELECT id, organization_id, status, prompt, source, hold_id, webhook_url FROM jobs")
        jobs_by_id = {j["id"]: j for j in jobs}
        holds = {h["id"]: h for h in q("SELECT id, status FROM credit_holds")}
        # submits: one job per tag when acknowledged, at most one otherwise
        attempts: dict[str, list[Op]] = defaultdict(list)
        for op in by_kind["submit"] + by_kind["submit_video"] + by_kind["submit_retry"]:
            attempts[op.args.get("tag") or op.result.get("tag")].append(op)
        tagged: dict[str, list[dict]] = defaultdict(list)
        for j in jobs:
            if j["source"] == "api":
                tagged[j["prompt"].split(" ", 1)[0]].append(j)
        for tag, its in attempts.items():
            n = len(tagged.get(tag, []))
            outs = {o.outcome for o in its}
            if "ok" in outs and n != 1:
                problems.append(f"acknowledged submit {tag}: {n} jobs")
            elif "info" in outs and n > 1:
                problems.append(f"submit {tag} (info): {n} jobs")
            elif outs <= {"fail"} and n:
                problems.append(f"failed submit {tag}: {n} jobs")
            for o in its:
                if o.outcome == "ok" and (o.result["job_id"] not in jobs_by_id
                                          or not jobs_by_id[o.result["job_id"]]["prompt"].startswith(tag + " ")):
                    problems.append(f"submit {tag}: acknowledged job {o.result['job_id']} missing or not its own")
        for tag in tagged:
            if tag not in attempts:
                problems.append(f"job with tag {tag} that no submit sent")
        # job webhooks: an ok submit to the receiver that ended with a webhook has its row
        hooks = {h["job_id"]: h for h in q("SELECT job_id, state FROM job_webhooks")}
        for j in jobs:
            url = j["webhook_url"] or ""
            if j["status"] in ("completed", "failed", "nsfw") and url and j["id"] not in hooks:
                problems.append(f"job {j['id']} ended {j['status']} with a webhook URL but no webhook row")
            if url.startswith("http://") and j["id"] in hooks and hooks[j["id"]]["state"] != "skipped":
                problems.append(f"job {j['id']}: http:// webhook row is {hooks[j['id']]['state']}")
        # cancels
        for op in by_kind["cancel"]:
            if op.outcome == "ok" and op.result.get("job_status") == "canceled":
                j = jobs_by_id.get(op.args["job_id"])
                if j is None or j["status"] != "canceled" or holds[j["hold_id"]]["status"] != "released":
                    problems.append(f"ok cancel of {op.args['job_id']}: job "
                                    f"{None if j is None else j['status']}, hold "
                                    f"{None if j is None else holds[j['hold_id']]['status']}")
        # uploads
        assets = q("SELECT id, sha256, source FROM assets")
        by_sha = Counter(a["sha256"] for a in assets if a["source"] == "upload")
        ids = {a["id"]: a for a in assets}
        for op in by_kind["upload"]:
            n = by_sha.get(op.args["sha256"], 0)
            if op.outcome == "ok" and (n != 1 or op.result["asset_id"] not in ids):
                problems.append(f"ok upload op{op.i}: {n} assets")
            elif op.outcome == "info" and n > 1:
                problems.append(f"info upload op{op.i}: {n} assets")
            elif op.outcome == "fail" and n:
                problems.append(f"failed upload op{op.i}: {n} assets")
        # runs
        runs = q("SELECT id, status, inputs FROM product_runs")
        run_tags = Counter(json.loads(r["inputs"]).get("prompt", "").split(" ", 1)[0] for r in runs)
        run_ids = {r["id"]: r for r in runs}
        for op in by_kind["run"]:
            n = run_tags.get(op.args["tag"], 0)
            if op.outcome == "ok" and (n != 1 or op.result["run_id"] not in run_ids):
                problems.append(f"ok run {op.args['tag']}: {n} runs")
            elif op.outcome == "info" and n > 1:
                problems.append(f"info run {op.args['tag']}: {n} runs")
            elif op.outcome == "fail" and n:
                problems.append(f"failed run {op.args['tag']}: {n} runs")
        for op in by_kind["cancel_run"]:
            if op.outcome == "ok" and op.result.get("run_status") == "canceled":
                run = run_ids.get(op.args["run_id"])
                if run is None or run["status"] != "canceled":
                    problems.append(f"ok cancel of run {op.args['run_id']}: {run}")
        # keys
        keys = {k["id"]: k for k in q("SELECT id, is_active, revoked_at FROM api_keys")}
        revoke_tried = {op.args["key_id"] for op in by_kind["key_revoke"]}
        revoked_ok = {op.args["key_id"] for op in by_kind["key_revoke"] if op.outcome == "ok"}
        deliveries = q("SELECT event, body FROM webhook_deliveries")
        created_events = {json.loads(d["body"])["data"]["key_id"] for d in deliveries if d["event"] == "api_key.created"}
        for org in w.orgs:
            for k in org.keys:
                if k["id"] not in created_events:
                    problems.append(f"ok key {k['id']}: no api_key.created delivery")
                if k["id"] in revoked_ok:
                    row = keys.get(k["id"])
                    if row is None or row["is_active"] or row["revoked_at"] is None:
                        problems.append(f"ok revoke of key {k['id']}: {row}")
                    r = c.get(w.node.url + "/v1/projects", headers={"Authorization": f"Bearer {k['key']}"})
                    if r.status_code != 401:
                        problems.append(f"revoked key {k['id']} answers {r.status_code}")
                elif k["id"] not in revoke_tried:
                    r = c.get(w.node.url + "/v1/projects", headers={"Authorization": f"Bearer {k['key']}"})
                    if r.status_code != 200:
                        problems.append(f"live key {k['id']} answers {r.status_code}")
        # credits, per organization
        topups = {t["id"]: t for t in q("SELECT id, organization_id, status, credits_uc FROM topups")}
        total_drift = Decimal(0)
        for org in w.orgs:
            fig = checker.credits(w.node, org.id, org.key, c)
            lots = fig["lots"]
            granted = Decimal(0)
            signup = [lot for lot in lots if lot["source"] == "signup"]
            if len(signup) != 1:
                problems.append(f"org {org.n}: {len(signup)} signup lots")
            granted += SIGNUP
            grant_lots = defaultdict(list)
            for lot in lots:
                if lot["source"] == "promo":
                    grant_lots[lot["reason"]].append(lot)
                elif lot["source"] not in ("signup", "topup"):
                    problems.append(f"org {org.n}: lot {lot['id']} of unknown source {lot['source']}")
            seen = set()
            for op in by_kind["grant"]:
                if op.org != org.n:
                    continue
                got = grant_lots.get(op.args["reason"], [])
                seen.add(op.args["reason"])
                amount = Decimal(op.args["credits"])
                if len(got) > 1 or (op.outcome == "ok" and len(got) != 1) or (op.outcome == "fail" and got):
                    problems.append(f"grant {op.args['reason']} ({op.outcome}): {len(got)} lots")
                if got and Decimal(got[0]["amount_uc"]) / checker.UC != amount:
                    problems.append(f"grant {op.args['reason']}: lot of {got[0]['amount_uc']} uc, asked {amount}")
                if op.outcome == "ok" or (op.outcome == "info" and got):
                    granted += amount
            for reason in set(grant_lots) - seen:
                problems.append(f"org {org.n}: grant lot {reason} that no grant sent")
            pays: dict[str, list[Op]] = defaultdict(list)
            for op in by_kind["pay"]:
                if op.org == org.n:
                    pays[op.args["topup_id"]].append(op)
            topup_lots = defaultdict(list)
            for lot in lots:
                if lot["source"] == "topup":
                    topup_lots[lot["grant_id"]].append(lot)
            for topup_id, credits in org.topups:
                got = topup_lots.get(topup_id, [])
                outs = {o.outcome for o in pays.get(topup_id, [])}
                if len(got) > 1 or ("ok" in outs and len(got) != 1) or (not outs - {"fail"} and got):
                    problems.append(f"top-up {topup_id} (pays {sorted(outs)}): {len(got)} lots")
                if got and Decimal(got[0]["amount_uc"]) / checker.UC != credits:
                    problems.append(f"top-up {topup_id}: lot {got[0]['amount_uc']} uc, bought {credits}")
                if "ok" in outs or ("info" in outs and got):
                    granted += Decimal(credits)
            known = {t for t, _ in org.topups}
            for topup_id in set(topup_lots) - known:
                # a top-up whose creation was `info` can only be paid by a pay the driver sent: none
                problems.append(f"org {org.n}: top-up lot for {topup_id} that the driver never paid")
            model = checker.model_balance(granted, fig)
            d = checker.drift(fig, model)
            total_drift += d
            if d != 0:
                problems.append(f"org {org.n}: credit drift {d} (model {model}, available {fig['available']}, "
                                f"held {fig['held']}, ledger {fig['ledger']})")
            usage = c.get(w.node.url + "/v1/billing/usage", headers={"Authorization": f"Bearer {org.key}"}).json()
            used = sum((Decimal(u["credits"]) for u in usage["data"]), Decimal(0))
            if used != fig["captured"]:
                problems.append(f"org {org.n}: API usage {used} != Σ captured {fig['captured']}")
            if -fig["ledger_by_kind"].get("expiry", Decimal(0)) != fig["expired"]:
                problems.append(f"org {org.n}: ledger expiries {fig['ledger_by_kind'].get('expiry')} "
                                f"!= expired {fig['expired']}")
            figures["orgs"][org.n] = {"model": str(model), "available": str(fig["available"]),
                                      "held": str(fig["held"]), "captured": str(fig["captured"]),
                                      "expired": str(fig["expired"]), "granted": str(granted), "drift": str(d)}
            # thresholds: the last uncontended acknowledged one is what is stored
            th = sorted((o for o in by_kind["threshold"] if o.org == org.n), key=lambda o: o.t0)
            stored = checker.rows(conn, "SELECT low_balance_threshold_uc FROM billing_settings "
                                  "WHERE organization_id = ?", (org.id,))
            value = stored[0]["low_balance_threshold_uc"] if stored else None
            if th:
                last = th[-1]
                # another threshold op may have landed after it: one still open when it began,
                # or an `info` one with no kill between them (it may have been applied late)
                overlap = any(o is not last and ((o.t1 or 1e18) > last.t0 or (
                    o.outcome == "info" and not any(o.t0 < k < last.t0 for k in w.kill_times))) for o in th)
                want = None if last.args["value"] is None else int(Decimal(last.args["value"]) * checker.UC)
                if last.outcome == "ok" and not overlap and value != want:
                    problems.append(f"org {org.n}: threshold {value} uc, last acknowledged {want}")
        figures["drift"] = str(total_drift)
        figures["jobs"] = dict(Counter(j["status"] for j in jobs))
        figures["runs"] = dict(Counter(r["status"] for r in runs))
        figures["job_webhooks"] = dict(Counter(h["state"] for h in hooks.values()))
        figures["deliveries"] = dict(Counter(d["status"] for d in q("SELECT status FROM webhook_deliveries")))
        figures["topups"] = dict(Counter(t["status"] for t in topups.values()))
        figures["lots_expired"] = sum(1 for lot in q("SELECT expired_uc FROM credit_lots") if lot["expired_uc"])
    return problems, figures


# -- main -------------------------------------------------------------------------------------
async def run(args, w: World) -> None:
    rng = random.Random(args.seed)
    w.url = await trio.to_thread.run_sync(w.node.start)
    await trio.to_thread.run_sync(setup_orgs, w, args.orgs)
    w.up.set()
    async with trio.open_nursery() as n:
        n.start_soon(gauge, w)
        for cid in range(args.clients):
            n.start_soon(client, w, cid)
        await killer(w, args.kills, rng, args.min_up, args.max_up)
        await trio.sleep(args.min_up)
        w.stop = True
    # once more: a kill after the workload, then a clean restart (recovery is idempotent)
    w.up = trio.Event()
    await trio.to_thread.run_sync(w.node.kill)
    w.kills += 1
    t = time.monotonic()
    w.url = await trio.to_thread.run_sync(w.node.start)
    w.restarts.append(time.monotonic() - t)


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--orgs", type=int, default=3)
    ap.add_argument("--min-up", type=float, default=0.3, help="seconds the node runs before a kill, at least")
    ap.add_argument("--max-up", type=float, default=4.0, help="... at most")
    ap.add_argument("--max-open", type=int, default=16, help="no new renders while this many jobs are open")
    ap.add_argument("--dir", default=None, help="run directory (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory even when every check passed")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "big")
    signal.signal(signal.SIGTERM, _terminate)  # SIGTERM unwinds like ^C: the node is stopped
    print(f"seed {args.seed}", flush=True)
    started = time.monotonic()
    root = Path(args.dir or tempfile.mkdtemp(prefix="genservice-crashloop-"))
    root.mkdir(parents=True, exist_ok=True)
    rx = Receiver(root / "rx").start()
    node = Node(root / "data", env=rx.env())
    w = World(node, rx, args.seed, args.clients)
    w.history = History(root / "history.jsonl")
    w.max_open = args.max_open
    problems: list[str] = []
    figures: dict = {}
    try:
        trio.run(run, args, w)
        print(f"workload done after {time.monotonic() - started:.1f} s; quiescing", flush=True)
        checker.quiesce(node, timeout=120)
        problems, figures = check_all(w)
    except Exception as e:  # noqa: BLE001 - reported as a failed run with its directory kept
        problems.append(f"harness error: {type(e).__name__}: {e}")
        import traceback
        traceback.print_exc()
    finally:
        w.history.close()
        node.stop()
        rx.close()
    ops = w.history.ops
    outcomes = Counter(o.outcome or "open" for o in ops)
    per_kind: dict[str, dict] = defaultdict(dict)
    for o in ops:
        per_kind[o.kind][o.outcome or "open"] = per_kind[o.kind].get(o.outcome or "open", 0) + 1
    wall = time.monotonic() - started
    print(f"kills survived: {w.kills} (of which during start-up: {w.startup_kills}); "
          f"restart to listening: median {sorted(w.restarts)[len(w.restarts) // 2] if w.restarts else 0:.2f} s, "
          f"max {max(w.restarts, default=0):.2f} s")
    print(f"operations: {len(ops)} ({', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))})")
    for kind in sorted(per_kind):
        print(f"  {kind:13s} " + ", ".join(f"{k} {v}" for k, v in sorted(per_kind[kind].items())))
    for key in ("jobs", "runs", "topups", "job_webhooks", "deliveries"):
        if key in figures:
            print(f"{key}: {figures[key]}")
    print(f"receiver requests: {len(rx.requests)}; lots with expired credits: {figures.get('lots_expired')}")
    for n, f in figures.get("orgs", {}).items():
        print(f"org {n}: {f}")
    print(f"credit drift: {figures.get('drift')}")
    print(f"problems: {len(problems)}")
    for p in problems[:50]:
        print("  " + p)
    print(f"wall time {wall:.1f} s; run directory {root}" + ("" if problems or args.keep else " (removed)"))
    summary = {
        "seed": args.seed, "kills": w.kills, "startup_kills": w.startup_kills, "clients": args.clients,
        "orgs": args.orgs, "ops": len(ops), "outcomes": dict(outcomes),
        "ops_by_kind": {k: dict(v) for k, v in sorted(per_kind.items())},
        "jobs": figures.get("jobs"), "runs": figures.get("runs"), "deliveries": figures.get("deliveries"),
        "job_webhooks": figures.get("job_webhooks"), "drift": figures.get("drift"),
        "problems": len(problems), "wall_s": round(wall, 1),
        "restart_median_s": round(sorted(w.restarts)[len(w.restarts) // 2], 2) if w.restarts else None,
    }
    print(json.dumps(summary, sort_keys=True), flush=True)
    if not problems and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
