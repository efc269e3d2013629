"""Engine jobs through the public API, against local engines that answer at once.

Starts, on loopback: a real Cog server with the tests' Pillow predictor
(tests/engines/cog_predictor.py, instant without `[slow]`), the ComfyUI peer
(tests/peers/comfyui.py, EmptyImage -> SaveImage), the OpenAI images peer
(tests/peers/openai_images.py) and, when llama-cpp-python is installed, its real server
with the tests' tiny GGUF model (text.llm; else the peer's instant chat). Then
`genservice serve` (test mode) with a catalog of those models, and measures:

1. image jobs on each engine at 1, 16 and 64 in flight (closed loop): jobs per second, and
   the service's own overhead per job at p50 and p99. A job's time comes from the
   service's own stamps; overhead = (finished_at - started_at) - the engine's time, where
   the engine's time is the p50 of the same exchange sent straight to the engine with as many
   in flight as the node lets reach it (Cog and ComfyUI: one, their models' concurrency; the
   OpenAI-compatible servers: the level itself), so an engine's own queueing under load is the
   engine's, not the node's (for Cog: the async create and its webhook, as the node does). Time a job waits in the node's queue for one of the
   engine's slots (Cog and ComfyUI run one job at a time) is the engine's capacity, not
   overhead, and is printed apart (`queue_p50_ms`).
2. GET /healthz latency (p50, 16 connections, same load generator) in the same run:
   `overhead_p50_vs_healthz_16` = overhead p50 at 16 in flight / healthz p50.
3. `text.llm` at 1 and 16 in flight (24-token replies).
4. the speech built-in (eSpeak NG): jobs per second and the real-time factor, seconds of
   audio per second of CPU (the node process and its children, from /proc).
5. the node's own bound (a node of its own, bench/instant_engine.py): `jobs_per_s_instant_64`,
   jobs completed per second through the public API at 64 in flight against a real Cog
   server whose instant async predictor takes 64 predictions at once (bench/cog_instant.py,
   so the engine is not what bounds it), each job submitted with `Prefer: wait` as the
   project's client's `generate` does (the answer is the final status; bench/jobdriver.py),
   after a warm-up of 64 jobs; and
   `healthz_per_s` on the same node just before (16 connections, closed loop), and
   `jobs_vs_healthz_instant_64`, their ratio: the node's work per job in units of its
   cheapest request; and `node_cpu_ms_per_job`, the node's CPU (every thread, /proc) over the
   measured jobs, steadier than either rate on a shared machine; the CPU per job of the Cog
   server and of this load generator beside it, and how busy the three kept the cores; and
   `cog_alone_per_s_64`, the same Cog server driven alone as the node drives it (async
   creates, completed webhooks to a bare receiver: bench/cog_alone.py), the engine's own
   bound on this machine, with `jobs_vs_cog_alone_64`. Then the same on a fresh node whose
   model has `outcome = "response"` (the PUT answers the prediction's end, no webhook:
   docs/engines.md): the same figures ending in `_response`; and on a node whose hook gate
   receives Cog's webhooks (GENSERVICE_ENGINE_HOOKS_LISTEN, service/hookgate/; the node's CPU
   with the gate process's): `_gate`. Each node also runs a second
   window in which each job is submitted and then followed on its event stream (a client
   that wants every event): the same figures ending in `_stream`. `--quick` runs this part
   only.

Every job runs in an organization of its own level; at the end each organization's
holds and balance are checked: `lost` counts jobs not completed or holds not captured,
`double_charged` holds captured for jobs that did not complete or a balance that is not
200 minus the captured prices. The LAST line is one JSON object.

    python bench/engines.py [--jobs 128] [--levels 1,16,64] [--instant-jobs 640]
    python bench/engines.py --quick        # part 5 only, about a minute
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(TESTS))
import cog_alone
import jobdriver
from instant_engine import MODEL as INSTANT_MODEL
from instant_engine import SLOTS, instant_node
from loadgen import run  # noqa: E402
from server import create_org, start_server  # noqa: E402

PRICE = Decimal("0.01")
GRAPH = {"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
         "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "bench"}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started_peer(cmd: list[str], cwd: Path, log: Path) -> tuple[subprocess.Popen, str]:
    out = open(log, "w")
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=out, text=True, start_new_session=True)
    line = proc.stdout.readline()
    if not line.startswith("ready "):
        raise RuntimeError(f"{cmd} did not start; see {log}")
    return proc, line.split()[1].strip()


def catalog(cog: str, comfy: str, oai: str, llm: str, llm_name: str) -> str:
    def m(id_, cap, backend, res, conc, engine, bind=""):
        return (f'[[models]]\nid = "{id_}"\ncapability = "{cap}"\nbackend = "{backend}"\nresolutions = ["{res}"]\n'
                f'concurrency = {conc}\nprices = [{{ resolution = "{res}", credits = "{PRICE}" }}]\n'
                + (f"[models.engine]\n{engine}\n" if engine else "") + (f"[models.engine.bind]\n{bind}\n" if bind else ""))
    return "\n".join([
        m("cog-image", "image.generate", "cog", "1k", 1, f'urls = ["{cog}"]', 'prompt = "prompt"\nseed = "seed"'),
        m("comfy-image", "image.generate", "comfyui", "1k", 1, f'urls = ["{comfy}"]\nworkflow = "wf.json"',
          'seed = "1.color"'),
        m("oai-image", "image.generate", "openai", "256x256", 64, f'url = "{oai}/v1"\nmodel = "peer-image"'),
        m("llm", "text.llm", "openai", "default", 16, f'url = "{llm}"\nmodel = "{llm_name}"\nmax_tokens = 24'),
        m("espeak-ng", "audio.speech", "espeak_speech", "en-us", 2, ""),
    ])


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


async def run_jobs(url: str, key: str, model: str, jobs: int, level: int, body) -> dict:
    """`jobs` jobs, `level` at a time; the finished status objects and the wall time."""
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=level + 4, max_keepalive_connections=level + 4)
    todo = list(range(jobs))
    done: list[dict] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as c:
        t0 = time.perf_counter()

        async def worker():
            while todo:
                i = todo.pop()
                r = await c.post(f"/v1/generation/models/{model}", json=body(i))
                assert r.status_code == 202, r.text
                rid = r.json()["request_id"]
                while True:
                    st = (await c.get(f"/v1/generation/requests/{rid}/status")).json()
                    if st["status"] in ("completed", "failed", "canceled", "nsfw"):
                        done.append(st)
                        break
                    await trio.sleep(0.02)

        async with trio.open_nursery() as n:
            for _ in range(level):
                n.start_soon(worker)
        wall = time.perf_counter() - t0
    return {"statuses": done, "wall": wall}


def started_at(data_dir: str, ids: list[str]) -> dict[str, str]:
    """When each job began rendering (the jobs table; the status object does not show it)."""
    import sqlite3

    db = sqlite3.connect(f"file:{data_dir}/genservice.db?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(ids))
        return dict(db.execute(f"SELECT id, started_at FROM jobs WHERE id IN ({marks})", ids).fetchall())
    finally:
        db.close()


def figures(result: dict, engine_ms: float, data_dir: str) -> dict:
    sts = [s for s in result["statuses"] if s["status"] == "completed"]
    began = started_at(data_dir, [s["request_id"] for s in sts])
    sts = [{**s, "started_at": began.get(s["request_id"])} for s in sts]
    render = [(ts(s["finished_at"]) - ts(s["started_at"])) * 1000 for s in sts if s.get("started_at")]
    queue = [(ts(s["started_at"]) - ts(s["created_at"])) * 1000 for s in sts if s.get("started_at")]
    total = [(ts(s["finished_at"]) - ts(s["created_at"])) * 1000 for s in sts]
    over = [r - engine_ms for r in render]
    return {"jobs": len(result["statuses"]), "completed": len(sts),
            "jobs_per_s": round(len(sts) / result["wall"], 1),
            "overhead_p50_ms": round(pct(over, 0.5), 2), "overhead_p99_ms": round(pct(over, 0.99), 2),
            "queue_p50_ms": round(pct(queue, 0.5), 1), "job_p50_ms": round(pct(total, 0.5), 1)}


async def engine_alone(kind: str, url: str, n: int = 30, llm_name: str = "", concurrency: int = 1) -> float:
    """p50 ms of the same exchange sent straight to the engine, `concurrency` at a time."""
    times: list[float] = []
    todo = iter(range(n))
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency + 4)) as c:
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(_alone_worker, kind, url, llm_name, c, todo, times)
    return statistics.median(times)


async def _alone_worker(kind, url, llm_name, c, todo, times) -> None:
    for i in todo:
        t0 = time.perf_counter()
        if kind == "cog":  # as the node does it: async create, outcome by webhook
            await cog_async(c, url, f"direct-{i}", {"prompt": f"direct {i}", "seed": i})
        elif kind == "comfy":
            graph = json.loads(json.dumps(GRAPH))
            graph["1"]["inputs"]["color"] = 10_000_000 + i
            pid = (await c.post(f"{url}/prompt", json={"prompt": graph})).json()["prompt_id"]
            while not (await c.get(f"{url}/history/{pid}")).json():
                await trio.sleep(0.002)
        elif kind == "oai":
            r = await c.post(f"{url}/v1/images/generations", json={"prompt": f"direct {i}", "size": "256x256",
                                                                 "response_format": "b64_json"})
            assert r.status_code == 200
        else:
            r = await c.post(f"{url}/chat/completions", json={
                "model": llm_name, "messages": [{"role": "user", "content": f"direct {i}"}], "max_tokens": 24,
                "stream": True, "seed": i})
            assert r.status_code == 200
        times.append((time.perf_counter() - t0) * 1000)


_HOOKS: dict[str, trio.Event] = {}
_HOOK_URL: list[str] = []


def hook_app():
    from quart import request
    from quart_trio import QuartTrio

    app = QuartTrio("bench-hooks")

    @app.post("/hook/<pid>")
    async def hook(pid: str):
        if (await request.get_json()).get("status") in ("succeeded", "failed") and pid in _HOOKS:
            _HOOKS[pid].set()
        return {"ok": True}

    return app


async def cog_async(c: httpx.AsyncClient, url: str, pid: str, inputs: dict) -> None:
    _HOOKS[pid] = trio.Event()
    while True:  # Cog may still say "at capacity" just after the previous one
        r = await c.put(f"{url}/predictions/{pid}", headers={"Prefer": "respond-async"},
                        json={"input": inputs, "webhook": f"{_HOOK_URL[0]}/hook/{pid}",
                              "webhook_events_filter": ["start", "completed"]})
        if r.status_code != 409:
            break
        await trio.sleep(0.005)
    await _HOOKS[pid].wait()


def cpu_s(pid: int) -> float:
    """utime + stime + children's (reaped) times of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The live child processes of `pid`: a node's hook gate (service/hookgate/), whose CPU
    is the node's work too."""
    tasks = Path(f"/proc/{pid}/task")
    return [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]


def children_cpu_s(pid: int) -> float:
    return sum(cpu_s(c) for c in children(pid))


def cpu_marks(node_pid: int | None, engine_pids: list[int]) -> tuple[float, float, float]:
    """CPU seconds so far of the node (with its live child processes), of the engine
    processes together, and of this load generator: take one before a window and one after,
    and `ms_per_job` of the two."""
    node = cpu_s(node_pid) + children_cpu_s(node_pid) if node_pid else 0.0
    return (node, sum(cpu_s(p) for p in engine_pids), time.process_time())


def ms_per_job(before: tuple[float, ...], after: tuple[float, ...], jobs: int) -> list[float]:
    """Each mark's CPU over the window, in ms a job."""
    return [(b - a) * 1000 / max(jobs, 1) for a, b in zip(before, after)]


def ledger_check(url: str, key: str, statuses: list[dict], data_dir: str | None = None) -> tuple[int, int]:
    """(lost, double_charged); the holds from the API (newest 500), or from the database
    (read-only) when `data_dir` is given, for runs of more jobs than that."""
    h = {"Authorization": f"Bearer {key}"}
    if data_dir is None:
        holds = httpx.get(f"{url}/v1/billing/holds?limit=500", headers=h, timeout=30).json()["data"]
    else:
        import sqlite3

        db = sqlite3.connect(f"file:{data_dir}/genservice.db?mode=ro", uri=True)
        try:
            ids = [st["request_id"] for st in statuses]
            rows = db.execute(f"SELECT job_id, status, captured_uc FROM credit_holds WHERE job_id IN "
                              f"({','.join('?' * len(ids))})", ids).fetchall()
        finally:
            db.close()
        holds = [{"job_id": j, "status": st, "amount": str(Decimal(c or 0) / 1_000_000)} for j, st, c in rows]
    by_job = {x["job_id"]: x for x in holds}
    lost = double = 0
    captured = Decimal(0)
    for st in statuses:
        hold = by_job.get(st["request_id"]) or {}
        if st["status"] != "completed" or hold.get("status") != "captured":
            lost += 1
        if hold.get("status") == "captured":
            captured += Decimal(hold["amount"])
            if st["status"] != "completed":
                double += 1
    balance = Decimal(httpx.get(f"{url}/v1/billing/balance", headers=h, timeout=30).json()["data"]["available"])
    if balance != Decimal("200.00") - captured:
        double += 1
    return lost, double


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=64, help="jobs per engine and level (at least 2 x the level)")
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--instant-jobs", type=int, default=640, help="jobs of part 5 (after 64 of warm-up)")
    ap.add_argument("--quick", action="store_true", help="part 5 only (jobs_per_s_instant_64, healthz_per_s)")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    load_start = os.getloadavg()
    if args.quick:
        out = instant_part(tmp / "instant", args.instant_jobs)
        out["machine"] = {"cpus": os.cpu_count(), "load_start": load_start, "load_end": os.getloadavg(),
                          "python": platform.python_version()}
        print(json.dumps(out))
        return
    procs: list = []
    from engine_support import CogServer, LlamaMissing, LlamaServer

    cog = CogServer(tmp / "cog.log").start()
    try:
        comfy_p, comfy = started_peer([sys.executable, str(TESTS / "peers" / "comfyui.py"), "--port", str(free_port()),
                                       "--output-dir", str(tmp / "comfy")], TESTS, tmp / "comfy.log")
        procs.append(comfy_p)
        oai_p, oai = started_peer([sys.executable, "-m", "peers.openai_images", "--port", str(free_port())],
                                  TESTS, tmp / "oai.log")
        procs.append(oai_p)
        try:
            llama = LlamaServer(tmp).start()
            procs.append(llama)
            llm, llm_name, llm_kind = llama.url, "tiny", "llama-cpp-python server, tiny GGUF"
        except LlamaMissing:  # not set up (tests/engine_support.py llama_python); a failed start still fails
            llm, llm_name, llm_kind = f"{oai}/v1", "peer-chat", "the OpenAI peer's instant chat"
        (tmp / "wf.json").write_text(json.dumps(GRAPH))
        (tmp / "catalog.toml").write_text(catalog(cog.url, comfy, oai, llm, llm_name))
        port = free_port()
        node, url, op, _data = start_server({"GENSERVICE_CATALOG_FILE": str(tmp / "catalog.toml"),
                                             "GENSERVICE_PORT": str(port), "GENSERVICE_BASE_URL": f"http://127.0.0.1:{port}"})
        try:
            out = trio.run(measure, url, op, _data, node.pid, cog.url, comfy, oai, llm, llm_name, levels, args.jobs)
        finally:
            node.stop()
    finally:
        for p in procs:
            (p.stop() if hasattr(p, "stop") else os.killpg(p.pid, 9))
        cog.stop()
    out["llm_engine"] = llm_kind
    part5 = instant_part(tmp / "instant", args.instant_jobs)
    out["lost"] += part5.pop("lost")
    out["double_charged"] += part5.pop("double_charged")
    out.update(part5)
    out["machine"] = {"cpus": os.cpu_count(), "load_start": load_start, "load_end": os.getloadavg(),
                      "python": platform.python_version()}
    print(json.dumps(out))


def instant_part(tmp: Path, jobs: int) -> dict:
    """Part 5 (module docstring), on a node of its own in front of the 64-slot instant Cog;
    then again on a fresh node whose model takes the outcome from the PUT's answer
    (`outcome = "response"`, docs/engines.md): the same figures with `_response` appended;
    and on a node whose hook gate receives the webhooks (service/hookgate/): `_gate`."""
    tmp.mkdir(parents=True, exist_ok=True)
    with instant_node(tmp, outcome="webhook") as (node, url, op, _data, _cog):
        alone = trio.run(cog_alone.predictions_per_s, _cog.url, jobs)  # the node idle meanwhile
        out = trio.run(measure_instant, url, op, jobs, _data, node.pid, _cog.proc.pid)
    out.update(alone)
    out["jobs_vs_cog_alone_64"] = round(out["jobs_per_s_instant_64"] / max(alone["cog_alone_per_s_64"], 0.1), 3)
    print(f"the same Cog alone (64 in flight, completed webhooks to a bare receiver): {alone['cog_alone_per_s_64']} "
          f"predictions/s; jobs through the node over that: {out['jobs_vs_cog_alone_64']}")
    print('the same with outcome = "response" (the PUT answers the prediction\'s end; no webhook):')
    with instant_node(tmp / "response", outcome="response") as (node, url, op, _data, _cog):
        resp = trio.run(measure_instant, url, op, jobs, _data, node.pid, _cog.proc.pid)
    out["lost"] += resp.pop("lost")
    out["double_charged"] += resp.pop("double_charged")
    out.update({f"{k}_response": v for k, v in resp.items() if k not in ("instant_jobs", "load_at_start")})
    print("the same with the webhook received by the node's hook gate (GENSERVICE_ENGINE_HOOKS_LISTEN, "
          "service/hookgate/; the node's CPU counts the gate's process):")
    with instant_node(tmp / "gate", outcome="webhook", gate=True) as (node, url, op, _data, _cog):
        gated = trio.run(measure_instant, url, op, jobs, _data, node.pid, _cog.proc.pid)
    out["lost"] += gated.pop("lost")
    out["double_charged"] += gated.pop("double_charged")
    out.update({f"{k}_gate": v for k, v in gated.items() if k not in ("instant_jobs", "load_at_start")})
    return out


async def measure_instant(url: str, op: str, jobs: int, data_dir: str, node_pid: int | None = None,
                          cog_pid: int | None = None) -> dict:
    """Two windows of `jobs` jobs on one node after one `/healthz` run: each job submitted with
    `Prefer: wait` as the client's `generate` does (the figures), then each followed on its
    event stream as a client wanting every event does (the same figures ending in `_stream`)."""
    host, port = url.removeprefix("http://").split(":")
    await run(host, int(port), "/healthz", connections=16, total=500)  # warm-up
    hz = await run(host, int(port), "/healthz", connections=16, total=6000)
    key = (await trio.to_thread.run_sync(create_org, url, op, "bench-instant"))["api_key"]

    def body(i: int) -> dict:
        return {"prompt": f"instant {i}", "seed": i}

    load0 = os.getloadavg()[0]
    statuses: list[dict] = []
    errors = 0
    windows = {}
    for name, wait, first in (("", True, 0), ("_stream", False, jobs + SLOTS)):
        warm = await jobdriver.run_jobs(host, int(port), key, INSTANT_MODEL, SLOTS, SLOTS,
                                        lambda i, first=first: body(first + i), wait=wait)
        before = cpu_marks(node_pid, [cog_pid] if cog_pid else [])
        res = await jobdriver.run_jobs(host, int(port), key, INSTANT_MODEL, jobs, SLOTS,
                                       lambda i, first=first: body(first + SLOTS + i), wait=wait)
        after = cpu_marks(node_pid, [cog_pid] if cog_pid else [])
        statuses += warm["statuses"] + res["statuses"]
        errors += len(warm["errors"]) + len(res["errors"])
        completed = sum(1 for st in res["statuses"] if st["status"] == "completed")
        cpu_ms, cog_ms, driver_ms = ms_per_job(before, after, completed)
        jps = completed / res["wall"]
        windows.update({
            f"jobs_per_s_instant_64{name}": round(jps, 1), f"jobs_vs_healthz_instant_64{name}": round(jps / hz.rps, 4),
            f"instant_completed{name}": completed,
            # the node's CPU (every thread) per measured job: steadier than jobs/s on a shared machine
            f"node_cpu_ms_per_job{name}": round(cpu_ms, 2),
            # who else used the 2 cores meanwhile: the Cog server and this load generator
            f"cog_cpu_ms_per_job{name}": round(cog_ms, 2),
            f"driver_cpu_ms_per_job{name}": round(driver_ms, 2),
            f"machine_busy{name}": round((cpu_ms + cog_ms + driver_ms) * completed / 1000 / res["wall"]
                                         / (os.cpu_count() or 1), 2)})
    # the final status and the capture commit together now (bench/README.md, "Throughput III"),
    # so none should be behind; still read again until the holds settle, and count any that were
    lost, double = await trio.to_thread.run_sync(ledger_check, url, key, statuses, data_dir)
    behind = lost
    for _ in range(20):
        if not (lost or double):
            break
        await trio.sleep(0.5)
        lost, double = await trio.to_thread.run_sync(ledger_check, url, key, statuses, data_dir)
    out = {**windows, "healthz_per_s": round(hz.rps, 1), "instant_jobs": jobs, "instant_errors": errors,
           "lost": lost + 2 * (jobs + SLOTS) - len(statuses), "double_charged": double,
           "captures_behind_final_status": behind, "load_at_start": round(load0, 2)}
    for name, how in (("", "submits that wait"), ("_stream", "submits followed on the stream")):
        print(f"instant Cog (64 slots), 64 in flight, {how}: {out['jobs_per_s_instant_64' + name]} jobs/s; /healthz "
              f"{out['healthz_per_s']} req/s at 16 connections (p50 {hz.pct(0.5):.2f} ms); ratio "
              f"{out['jobs_vs_healthz_instant_64' + name]}; CPU per job: node {out['node_cpu_ms_per_job' + name]} ms, "
              f"Cog {out['cog_cpu_ms_per_job' + name]} ms, this load generator {out['driver_cpu_ms_per_job' + name]} ms "
              f"(the three kept {out['machine_busy' + name]:.0%} of the cores busy)")
    return out


async def measure(url, op, data_dir, node_pid, cog, comfy, oai, llm, llm_name, levels, jobs_n) -> dict:
    host, port = url.removeprefix("http://").split(":")
    from peers.hosting import serving

    async with serving(hook_app()) as hooks:
        _HOOK_URL.append(hooks)
        return await _measure(url, op, data_dir, node_pid, cog, comfy, oai, llm, llm_name, levels, jobs_n, host, port)


async def _measure(url, op, data_dir, node_pid, cog, comfy, oai, llm, llm_name, levels, jobs_n, host, port) -> dict:
    alone = {"cog": await engine_alone("cog", cog), "comfy": await engine_alone("comfy", comfy),
             "oai": await engine_alone("oai", oai), "llm": await engine_alone("llm", llm, 10, llm_name)}
    print("engine alone, p50 ms:", {k: round(v, 2) for k, v in alone.items()})
    await run(host, int(port), "/healthz", connections=16, total=500)  # warm-up
    hz = await run(host, int(port), "/healthz", connections=16, total=4000)
    hz1 = await run(host, int(port), "/healthz", connections=1, total=1000)
    healthz = hz.pct(0.5)
    print(f"healthz p50 {healthz:.2f} ms at 16 connections, {hz1.pct(0.5):.2f} ms at 1")
    table: dict = {}
    lost = double = 0
    runs = [("cog", "cog-image", lv) for lv in levels] + [("comfy", "comfy-image", lv) for lv in levels] + \
           [("oai", "oai-image", lv) for lv in levels] + [("llm", "llm", lv) for lv in levels if lv <= 16]
    for n, (kind, model, level) in enumerate(runs):
        key = (await trio.to_thread.run_sync(create_org, url, op, f"bench{n}"))["api_key"]
        # ComfyUI jobs take ~1 s each here (see bench/README.md): fewer of them
        jobs = {"llm": max(16, 2 * level), "comfy": level + 16}.get(kind, max(jobs_n, 2 * level))
        res = await run_jobs(url, key, model, jobs, level, lambda i, n=n: {"prompt": f"bench {n} {i}", "seed": n * 100000 + i})
        engine_ms = alone[kind]
        if kind in ("oai", "llm") and level > 1:  # these engines get `level` requests at once
            engine_ms = await engine_alone(kind, oai if kind == "oai" else llm, max(32, 2 * level), llm_name, level)
            print(f"{kind} alone at {level} in flight, p50 ms: {engine_ms:.2f}")
        f = figures(res, engine_ms, data_dir)
        lo, do = await trio.to_thread.run_sync(ledger_check, url, key, res["statuses"])
        lost, double = lost + lo, double + do
        table[f"{kind}_{level}"] = f
        print(f"{kind:6} {level:3} in flight: {f}")
    # speech: real-time factor over the node's CPU
    key = (await trio.to_thread.run_sync(create_org, url, op, "bench-speech"))["api_key"]
    text = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."
    c0, t0 = cpu_s(node_pid), time.perf_counter()
    res = await run_jobs(url, key, "espeak-ng", 40, 4, lambda i: {"prompt": f"{text} Number {i}."})
    cpu, wall = cpu_s(node_pid) - c0, time.perf_counter() - t0
    audio = sum(s["outputs"][0]["duration_s"] for s in res["statuses"] if s["status"] == "completed")
    lo, do = await trio.to_thread.run_sync(ledger_check, url, key, res["statuses"])
    lost, double = lost + lo, double + do
    speech = {"jobs_per_s": round(len(res["statuses"]) / wall, 1), "audio_s": round(audio, 1),
              "cpu_s": round(cpu, 2), "rtf_audio_per_cpu_s": round(audio / cpu, 1) if cpu else None}
    print("speech, 4 in flight:", speech)
    o16 = max(table[f"{k}_16"]["overhead_p50_ms"] for k in ("cog", "comfy", "oai") if f"{k}_16" in table)
    o99 = max(table[f"{k}_16"]["overhead_p99_ms"] for k in ("cog", "comfy", "oai") if f"{k}_16" in table)
    j64 = {k: table[f"{k}_64"]["jobs_per_s"] for k in ("cog", "comfy", "oai") if f"{k}_64" in table}
    return {"overhead_p50_ms_16": o16, "overhead_p99_ms_16": o99, "healthz_p50_ms": round(healthz, 2),
            "healthz_p50_ms_1conn": round(hz1.pct(0.5), 2),
            "overhead_p50_vs_healthz_16": round(o16 / healthz, 2), "jobs_per_s_64": j64,
            "engine_alone_p50_ms": {k: round(v, 2) for k, v in alone.items()},
            "runs": table, "speech": speech, "lost": lost, "double_charged": double}


if __name__ == "__main__":
    main()
