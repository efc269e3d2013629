"""Product runs survive a restart: a node is stopped mid-run and a new node on the same data
directory resumes every open run where it was (spec "Product run and steps"; DESIGN
"Actors": an actor reloads from SQLite)."""

from __future__ import annotations

from pathlib import Path

import trio

from conftest import OPERATOR, START, Node
from service.actors.runs import facade as products_mod
from service.actors.runs import actor as runs_mod
from service.clock import Clock
from service.config import Settings
from service.http.app import create_app
from service.node import build
from service.storage.db import Store
from service.storage.migrate import apply_all
from conftest import get_run, j, wait_for_run
from waiting import wait_until

FINAL = ("completed", "failed", "canceled")
RUNS = "/v1/workflows/products/text-to-clip/runs"


class Running:
    def __init__(self, node: Node, scope: trio.CancelScope, stopped: trio.Event) -> None:
        self.node, self.scope, self.stopped = node, scope, stopped

    async def stop(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()


async def _serve(data_dir: Path, start: float, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    settings = Settings(data_dir=data_dir, operator_token=OPERATOR, base_url="http://testserver", test_mode=True)
    apply_all(settings.db_path)
    store = Store(settings.db_path, inline=True)
    stopped = trio.Event()
    try:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as n:
                services = build(settings, store, Clock(start=start))
                await services.start(n)
                task_status.started(Running(Node(services, create_app(services)), scope, stopped))
                await trio.sleep_forever()
    finally:
        store.close()
        stopped.set()


async def boot(nursery, data_dir: Path, start: float = START) -> Running:
    return await nursery.start(_serve, data_dir, start)


async def restart(nursery, data_dir: Path, a: Running, monkeypatch=None) -> Running:
    """Stop node `a` and boot the next one on its data at its service time (the test's
    patches undone in between: they stood for the stop, not for the next node)."""
    stopped_at = a.node.clock.now()
    await a.stop()
    if monkeypatch is not None:
        monkeypatch.undo()
    return await boot(nursery, data_dir, stopped_at)


async def boot_and_start(nursery, data_dir: Path, prompt: str) -> tuple[Running, str, str]:
    """A node, an organization's key and a product run started with `prompt`."""
    a = await boot(nursery, data_dir)
    org = await a.node.create_org()
    key = org["api_key"]
    return a, key, await start_run(a.node, key, prompt)


def step(run, key) -> dict:
    return next(s for s in run["steps"] if s["key"] == key)


async def job(node, key, job_id) -> dict:
    r = await node.call("GET", f"/v1/generation/requests/{job_id}/status", key)
    assert r.status_code == 200
    return await j(r)


async def holds(node, key) -> list[dict]:
    return (await j(await node.call("GET", "/v1/billing/holds", key)))["data"]


async def start_run(node, key, prompt) -> str:
    r = await node.call("POST", RUNS, key, json={"inputs": {"prompt": prompt}})
    assert r.status_code == 202
    return (await j(r))["data"]["id"]


async def test_a_run_resumes_after_a_restart_mid_clip(nursery, tmp_path):
    a, key, run_id = await boot_and_start(nursery, tmp_path, "a harbour [[delay:1]]")
    mid = await wait_for_run(a.node, key, run_id, lambda r: step(r, "clip")["status"] == "running")
    assert step(mid, "still")["status"] == "completed"
    b = await restart(nursery, tmp_path, a)
    done = await wait_for_run(b.node, key, run_id, lambda r: r["status"] in FINAL)
    assert done["status"] == "completed", done
    assert [s["status"] for s in done["steps"]] == ["completed"] * 4
    assert step(done, "clip")["request_id"] == step(mid, "clip")["request_id"]  # the same job, resumed
    assert step(done, "still")["outputs"] == step(mid, "still")["outputs"]
    assert set(done["outputs"]) == {"still", "clip", "cover", "thumbnail"}
    assert done["credits"] == {"estimate": "11.00", "actual": "11.00"}
    assert sorted((h["status"], h["amount"]) for h in await holds(b.node, key)) == [
        ("captured", "1.00"), ("captured", "10.00")]
    r = await b.node.call("GET", "/v1/billing/balance", key)
    assert (await j(r))["data"]["available"] == "189.00"
    await b.stop()


async def test_a_step_job_that_finished_while_the_node_was_down(nursery, tmp_path, monkeypatch):
    # the run never hears that its still finished (as if the node stopped right after the job's
    # final commit); the next node picks the ending up from the job's stored status
    monkeypatch.setattr(runs_mod.RunActor, "notifier", lambda self, *a: (lambda status: None))
    a, key, run_id = await boot_and_start(nursery, tmp_path, "a harbour")
    mid = await wait_for_run(a.node, key, run_id, lambda r: step(r, "still")["request_id"] is not None)
    still_job = step(mid, "still")["request_id"]
    async def still_completed() -> bool:
        return (await job(a.node, key, still_job))["status"] == "completed"

    await wait_until(still_completed, 30, every=0.02)
    assert (await get_run(a.node, key, run_id))["steps"][0]["status"] == "running"
    b = await restart(nursery, tmp_path, a, monkeypatch)
    done = await wait_for_run(b.node, key, run_id, lambda r: r["status"] in FINAL)
    assert done["status"] == "completed", done
    assert step(done, "still")["request_id"] == still_job
    assert done["credits"]["actual"] == "11.00"
    await b.stop()


async def test_a_step_whose_job_was_never_created_is_submitted_again(nursery, tmp_path, monkeypatch):
    # stopped after the step was committed `running` with its job id, before the job existed
    async def no_submit(self, key):
        return None

    monkeypatch.setattr(runs_mod.RunActor, "_submit", no_submit)
    a, key, run_id = await boot_and_start(nursery, tmp_path, "a harbour")
    mid = await wait_for_run(a.node, key, run_id, lambda r: step(r, "still")["status"] == "running")
    job_id = step(mid, "still")["request_id"]
    r = await a.node.call("GET", f"/v1/generation/requests/{job_id}/status", key)
    assert r.status_code == 404
    b = await restart(nursery, tmp_path, a, monkeypatch)
    done = await wait_for_run(b.node, key, run_id, lambda r: r["status"] in FINAL)
    assert done["status"] == "completed", done
    assert step(done, "still")["request_id"] == job_id
    st = await job(b.node, key, job_id)
    assert (st["status"], st["source"]) == ("completed", "workflow")
    await b.stop()


async def test_a_resumed_run_submits_its_steps_under_the_key_that_started_it(nursery, tmp_path, monkeypatch):
    # the still's job is first submitted by the next node: it counts against the run's API
    # key as the clip's does (the key is read back with the run)
    async def no_submit(self, key):
        return None

    monkeypatch.setattr(runs_mod.RunActor, "_submit", no_submit)
    a = await boot(nursery, tmp_path)
    org = await a.node.create_org()
    r = await a.node.call("POST", "/v1/api-keys", org["api_key"], json={"name": "ci", "spend_limit": "100"})
    assert r.status_code == 201
    ci = (await j(r))["data"]
    run_id = await start_run(a.node, ci["key"], "a harbour")
    await wait_for_run(a.node, ci["key"], run_id, lambda r: step(r, "still")["status"] == "running")
    b = await restart(nursery, tmp_path, a, monkeypatch)
    done = await wait_for_run(b.node, ci["key"], run_id, lambda r: r["status"] in FINAL)
    assert (done["status"], done["credits"]["actual"]) == ("completed", "11.00")
    r = await b.node.call("GET", f"/v1/api-keys/{ci['id']}", org["api_key"])
    assert (await j(r))["data"]["spent"] == "11.00"
    await b.stop()


async def test_open_step_jobs_of_a_finished_run_are_canceled_at_start(nursery, tmp_path, monkeypatch):
    # stopped after the run's cancel was committed, before its in-flight job was canceled
    async def no_cancel(self, job_id):
        return None

    monkeypatch.setattr(runs_mod.RunActor, "_cancel_job", no_cancel)
    a, key, run_id = await boot_and_start(nursery, tmp_path, "a harbour [[delay:30]]")
    mid = await wait_for_run(a.node, key, run_id, lambda r: step(r, "still")["status"] == "running")
    job_id = step(mid, "still")["request_id"]
    r = await a.node.call("POST", f"/v1/workflows/runs/{run_id}/cancel", key)
    assert (await j(r))["data"]["status"] == "canceled"
    assert (await job(a.node, key, job_id))["status"] in ("queued", "rendering")
    b = await restart(nursery, tmp_path, a, monkeypatch)
    st = await job(b.node, key, job_id)
    assert st["status"] == "canceled"
    async def released() -> bool:
        return [h["status"] for h in await holds(b.node, key)] == ["released"]

    await wait_until(released, 10, every=0.02)
    assert (await get_run(b.node, key, run_id))["status"] == "canceled"
    await b.stop()


async def test_idempotency_and_cursors_survive_a_restart(nursery, tmp_path):
    a = await boot(nursery, tmp_path)
    org = await a.node.create_org()
    key = org["api_key"]
    h = {"Idempotency-Key": "once"}
    body = {"inputs": {"prompt": "x [[fail:internal]]"}}
    r = await a.node.call("POST", RUNS, key, json=body, headers=h)
    first = await j(r)
    r = await a.node.call("POST", RUNS, key, json=body, headers=h)
    assert await j(r) == first
    r = await a.node.call("POST", RUNS, key, json=body)
    assert r.status_code == 202
    cursor = (await j(await a.node.call("GET", "/v1/runs?limit=1", key)))["data"]["next_cursor"]
    b = await restart(nursery, tmp_path, a)
    r = await b.node.call("POST", RUNS, key, json=body, headers=h)
    assert (r.status_code, await j(r)) == (202, first)
    page = (await j(await b.node.call("GET", f"/v1/runs?limit=1&cursor={cursor}", key)))["data"]
    assert [x["id"] for x in page["items"]] == [first["data"]["id"]]
    await b.stop()

