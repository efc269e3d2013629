"""Soak every engine kind at once under faults, through the node's public API.

    python reliability/engine_soak.py --minutes 10

A real `genservice serve` (test mode, reliability/server.py) serves five engine models:
ComfyUI (the in-repo peer), Cog (a real Cog server), llama.cpp (a real llama-cpp-python
server), Replicate and fal (the in-repo peers), each behind a FaultProxy
(reliability/soak_engines.py). Clients submit jobs to every model for N minutes (some
asked to fail on the engine) while a fault every `--fault-every` seconds, in turn:

    engine_kill        Cog or llama.cpp SIGKILLed mid-job and restarted; ComfyUI restarted
    connection_reset   an engine's proxy resets every open and new connection for 3 s
    slow_response      an engine's answers held past the node's per-call timeout for 3 s
    http_5xx           an engine's proxy answers 503 to every request for 3 s
    websocket_drop     ComfyUI drops its websockets while a prompt runs
    node_kill          the node SIGKILLed and restarted on the same port

Then the faults stop, the jobs drain, and every job is checked from outside: its final
status (API) against what the engine says it finished (peer records, Cog's webhooks, the
llama stream seen by the proxy), its charges against the ledger. The last line is one
JSON object: jobs, faults (per class), completed_but_failed, lost, double_charged, stuck,
p99 time-to-final per engine, and more. Exit 0 when the four invariants are 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import shutil
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checker  # noqa: E402
from server import Node  # noqa: E402
from soak_engines import ENGINE_OF, MODEL_TIMEOUT_S, TOKEN, WORKFLOW, Engines, catalog  # noqa: E402

from engine_support import free_port  # noqa: E402  (tests/ is on the path through soak_engines)

FAULTS = ("engine_kill", "connection_reset", "slow_response", "http_5xx", "websocket_drop", "node_kill")
FAILURE = re.compile(r"job ([0-9a-f-]{36}): engine failure \(([A-Za-z]+)\)")
STUCK_GRACE_S = 30  # past the model's timeout_s, a job not yet final is stuck
PRICES = {"soak-comfy": "2.00", "soak-cog": "3.00", "soak-llm": "0.20", "soak-replicate": "2.50", "soak-fal": "1.50"}


class Job:
    def __init__(self, n: int, model: str, t0: float) -> None:
        self.n, self.model, self.t0 = n, model, t0
        self.id: str | None = None
        self.final: dict | None = None
        self.t_final: float | None = None
        self.stuck = False
        self.asked_fail = False


class Soak:
    def __init__(self, args, run_dir: Path) -> None:
        self.args, self.dir = args, run_dir
        self.rng = random.Random(args.seed)
        self.engines = Engines(run_dir)
        self.node: Node | None = None
        self.key = ""
        self.jobs: list[Job] = []
        self.refused: dict[str, int] = {}
        self.faults = {f: 0 for f in FAULTS}
        self.fault_log: list[tuple[float, str, str]] = []  # (seconds into the run, class, target)
        self.counter = itertools.count(1)
        self.http = httpx.AsyncClient(timeout=15)
        self.node_up = trio.Event()

    # -- set-up ---------------------------------------------------------------------------
    async def start(self, nursery: trio.Nursery) -> None:
        await self.engines.start(nursery)
        (self.dir / "soak-workflow.json").write_text(json.dumps(WORKFLOW))
        (self.dir / "catalog.toml").write_text(catalog(self.engines.proxies))
        port = free_port()
        self.node = Node(self.dir / "node", env={
            "GENSERVICE_CATALOG_FILE": str(self.dir / "catalog.toml"), "GENSERVICE_PORT": str(port),
            "GENSERVICE_BASE_URL": self.engines.hooks_url, "SOAK_REPLICATE_TOKEN": TOKEN, "SOAK_FAL_TOKEN": TOKEN})
        await trio.to_thread.run_sync(self.node.start)
        self.engines.hooks.node_url = self.node.url
        self.node_up.set()
        r = await self.http.post(f"{self.node.url}/operator/v1/organizations", headers=self.node.op,
                                 json={"name": "Soak", "owner_email": "owner@soak.test"})
        r.raise_for_status()
        org = r.json()["data"]
        self.key, self.org_id = org["api_key"], org["organization_id"]
        r = await self.http.post(f"{self.node.url}/operator/v1/organizations/{self.org_id}/grants",
                                 headers=self.node.op, json={"credits": "1000000.00", "source": "promo"})
        r.raise_for_status()

    # -- clients --------------------------------------------------------------------------
    def body(self, job: Job) -> dict:
        tag = f"soak-{job.n}"
        fail = self.rng.random() < 0.08 and job.model in ("soak-cog", "soak-replicate", "soak-fal")
        job.asked_fail = fail
        seed = self.rng.randrange(1, 0xFFFFFF)
        if job.model == "soak-llm":
            return {"prompt": f"{tag} tell a short story", "seed": seed, "resolution": "default"}
        if job.model == "soak-comfy":
            return {"prompt": tag, "seed": seed, "resolution": "64x64"}
        return {"prompt": f"{tag} a lighthouse [slow:{self.rng.uniform(0.2, 1.0):.2f}]" + (" [fail]" if fail else ""),
                "seed": seed, "resolution": "96x64"}

    async def client(self, model: str, until: float) -> None:
        while time.monotonic() < until:
            job = Job(next(self.counter), model, time.monotonic())
            body = self.body(job)
            headers = {"Authorization": f"Bearer {self.key}", "Idempotency-Key": f"soak-{job.n}"}
            while time.monotonic() < until + 60:  # an unknown outcome is asked again with the same key
                await self.node_up.wait()
                try:
                    r = await self.http.post(f"{self.node.url}/v1/generation/models/{model}", json=body,
                                             headers=headers)
                except httpx.HTTPError:
                    await trio.sleep(0.5)
                    continue
                if r.status_code == 202:
                    job.id = r.json()["request_id"]
                    self.jobs.append(job)
                elif r.status_code >= 500 and r.status_code != 503:
                    await trio.sleep(0.5)
                    continue
                else:  # 503: every server of the model is down; 4xx: refused. Not a job.
                    self.refused[f"{model} {r.status_code}"] = self.refused.get(f"{model} {r.status_code}", 0) + 1
                    await trio.sleep(0.5)
                break
            await self.wait_final(job)
            await trio.sleep(self.rng.uniform(0, 0.3))

    async def wait_final(self, job: Job, limit: float = MODEL_TIMEOUT_S + 120) -> None:
        while job.id is not None and job.final is None and time.monotonic() - job.t0 < limit:
            await self.poll(job)
            if job.final is None:
                await trio.sleep(0.25)

    async def poll(self, job: Job) -> None:
        await self.node_up.wait()
        try:
            r = await self.http.get(f"{self.node.url}/v1/generation/requests/{job.id}/status",
                                    headers={"Authorization": f"Bearer {self.key}"})
        except httpx.HTTPError:
            return
        if r.status_code != 200:
            return
        st = r.json()
        if st["status"] in ("completed", "failed", "canceled", "nsfw"):
            job.final, job.t_final = st, time.monotonic()
        elif time.monotonic() - job.t0 > MODEL_TIMEOUT_S + STUCK_GRACE_S:
            job.stuck = True

    # -- faults ---------------------------------------------------------------------------
    async def faulter(self, until: float) -> None:
        targets = itertools.cycle(["cog", "llama", "comfyui", "replicate", "fal"])
        killable = itertools.cycle(["cog", "llama", "comfyui"])
        t0 = time.monotonic()
        for kind in itertools.cycle(FAULTS):
            await trio.sleep(self.args.fault_every)
            if time.monotonic() >= until:
                return
            self.faults[kind] += 1
            if kind == "engine_kill":
                target = next(killable)
            elif kind in ("websocket_drop", "node_kill"):
                target = "comfyui" if kind == "websocket_drop" else "node"
            else:
                target = next(targets)
            self.fault_log.append((round(time.monotonic() - t0, 1), kind, target))
            if kind == "engine_kill":
                await self.running_on(target)
                await self.engines.kill_and_restart(target)
            elif kind == "websocket_drop":
                await self.engines.drop_websocket()
            elif kind == "node_kill":
                await self.kill_node()
            else:
                proxy = self.engines.proxies[target]
                proxy.mode = {"connection_reset": "reset", "slow_response": "slow", "http_5xx": "5xx"}[kind]
                if kind == "connection_reset":
                    proxy.reset_all()
                await trio.sleep(3)
                proxy.mode = "pass"

    async def running_on(self, engine: str, limit: float = 5.0) -> None:
        """Until a job of the engine's model runs there (the model list's `queue`), or `limit`."""
        model = next(m for m, e in ENGINE_OF.items() if e == engine)
        with trio.move_on_after(limit):
            while True:
                try:
                    r = await self.http.get(f"{self.node.url}/v1/generation/models",
                                            headers={"Authorization": f"Bearer {self.key}"})
                    queue = next(m["queue"] for m in r.json()["data"] if m["id"] == model)
                    if queue["running"] > 0:
                        return
                except (httpx.HTTPError, ValueError, KeyError, StopIteration):
                    pass
                await trio.sleep(0.05)

    async def kill_node(self) -> None:
        self.node_up = trio.Event()
        await trio.to_thread.run_sync(self.node.kill)
        await trio.sleep(1)
        await trio.to_thread.run_sync(self.node.start)
        self.node_up.set()

    # -- run and check --------------------------------------------------------------------
    async def run(self) -> dict:
        t_start = time.monotonic()
        async with trio.open_nursery() as n:
            await self.start(n)
            until = time.monotonic() + 60 * self.args.minutes
            async with trio.open_nursery() as load:
                load.start_soon(self.faulter, until)
                for model in PRICES:
                    for _ in range(self.args.clients):
                        load.start_soon(self.client, model, until)
            await self.drain()
            result = await trio.to_thread.run_sync(self.check)
            result["wall_s"] = round(time.monotonic() - t_start, 1)
            n.cancel_scope.cancel()
        await self.http.aclose()
        await self.engines.hooks.http.aclose()
        return result

    async def drain(self) -> None:
        """Every job polled until final, or until its stuck deadline has long passed."""
        async with trio.open_nursery() as n:
            for job in self.jobs:
                if job.final is None:
                    n.start_soon(self.wait_final, job)

    def check(self) -> dict:
        finished = self.engines.finished()
        by_tag = {j.n: j for j in self.jobs}
        engine_done: set[str] = set()
        for engine, items in finished.items():
            for item in items:
                if isinstance(item, int):
                    job = by_tag.get(item)
                    if job is not None and job.id is not None:
                        engine_done.add(job.id)
                elif item:
                    engine_done.add(item)
        cbf = [j for j in self.jobs if j.final and j.final["status"] == "failed" and j.id in engine_done]
        lost = [j for j in self.jobs if j.final is None]
        stuck = [j for j in self.jobs if j.stuck]
        charges = self.charges()
        double = [j for j in self.jobs if charges.get(j.id, Decimal(0)) < -Decimal(PRICES[j.model])]
        wrong = [j for j in self.jobs if j.final and charges.get(j.id, Decimal(0))
                 != (-Decimal(PRICES[j.model]) if j.final["status"] == "completed" else Decimal(0))]
        try:
            checker.quiesce(self.node)
            problems = checker.invariants(self.node)
        except Exception as e:  # noqa: BLE001 - reported, not raised: the figures still count
            problems = [f"not quiet: {e}"]
        fig = checker.credits(self.node, self.org_id, self.key)
        granted = sum(fig["granted"].values(), Decimal(0))
        drift = checker.drift(fig, checker.model_balance(granted, fig))
        statuses: dict[str, dict[str, int]] = {}
        p99: dict[str, float | None] = {}
        for model, engine in ENGINE_OF.items():
            mine = [j for j in self.jobs if j.model == model]
            counts: dict[str, int] = {}
            for j in mine:
                key = j.final["status"] if j.final else "open"
                counts[key] = counts.get(key, 0) + 1
            statuses[engine] = counts
            times = sorted(j.t_final - j.t0 for j in mine if j.t_final is not None)
            p99[engine] = round(times[min(len(times) - 1, int(0.99 * len(times)))], 2) if times else None
        details = {"faults": self.fault_log,
                   "completed_but_failed": [(j.model, j.id, j.final["error"]) for j in cbf],
                   "lost": [(j.model, j.id) for j in lost], "stuck": [(j.model, j.id) for j in stuck],
                   "wrong_charge": [(j.model, j.id, str(charges.get(j.id))) for j in wrong],
                   "invariants": problems, "refused": self.refused}
        (self.dir / "soak-details.json").write_text(json.dumps(details, indent=2))
        cbf_by = {e: sum(1 for j in cbf if ENGINE_OF[j.model] == e) for e in ENGINE_OF.values()}
        causes: dict[str, int] = {}
        for cause in self.failure_causes([j.id for j in cbf]).values():
            causes[cause] = causes.get(cause, 0) + 1
        return {"jobs": len(self.jobs), "faults": self.faults, "completed_but_failed": len(cbf),
                "completed_but_failed_by_engine": cbf_by, "completed_but_failed_causes": causes, "lost": len(lost),
                "double_charged": len(double), "stuck": len(stuck), "p99_time_to_final_s": p99,
                "statuses": statuses, "wrong_charge": len(wrong), "credit_drift": str(drift),
                "db_invariant_problems": len(problems), "refused_submits": sum(self.refused.values()),
                "minutes": self.args.minutes, "seed": self.args.seed}

    def failure_causes(self, job_ids: list) -> dict[str, str]:
        """job id -> the error class the node logged for its engine failure (its own log)."""
        wanted, out = set(job_ids), {}
        for log in sorted((self.dir / "node").glob("serve-*.log")):
            for line in log.read_text(errors="replace").splitlines():
                m = FAILURE.search(line)
                if m and m.group(1) in wanted:
                    out[m.group(1)] = m.group(2)
        return out

    def charges(self) -> dict[str, Decimal]:
        """Σ ledger amount per job id (negative: spent), every page of the ledger."""
        out: dict[str, Decimal] = {}
        offset = 0
        with httpx.Client(timeout=30) as c:
            while True:
                r = c.get(f"{self.node.url}/v1/billing/ledger", params={"limit": 500, "offset": offset},
                          headers={"Authorization": f"Bearer {self.key}"})
                r.raise_for_status()
                page = r.json()
                for e in page["data"]:
                    if e.get("job_id"):
                        out[e["job_id"]] = out.get(e["job_id"], Decimal(0)) + Decimal(e["amount"])
                offset += len(page["data"])
                if not page["data"] or offset >= page["total"]:
                    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--fault-every", type=float, default=10.0, help="seconds between faults (default 10)")
    p.add_argument("--clients", type=int, default=2, help="clients per model (default 2)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dir", help="run directory (default: a new temporary one, removed when all is well)")
    p.add_argument("--keep", action="store_true", help="keep the run directory")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    run_dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="engine-soak-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"engine soak: seed {args.seed}, {args.minutes} min, run directory {run_dir}", flush=True)
    soak = Soak(args, run_dir)
    try:
        result = trio.run(soak.run)
    finally:
        if soak.node is not None:
            soak.node.stop()
        soak.engines.stop()
    ok = all(result[k] == 0 for k in ("completed_but_failed", "lost", "double_charged", "stuck"))
    if ok and not args.keep and not args.dir:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        print(f"details: {run_dir / 'soak-details.json'}", flush=True)
    print(json.dumps(result), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
