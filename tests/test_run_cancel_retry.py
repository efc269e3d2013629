"""A run that ends its step jobs keeps asking until each job is final (the run actor's
docstring, "The run"): a cancel whose ask fails (ActorGone: the job's actor crashed;
AskTimeout: it did not answer in 10 s) is retried with backoff, and a job that completed
anyway is a completed, charged step, never one shown canceled. On trio's mock clock: the
waits below are virtual."""

from __future__ import annotations

import uuid

import pytest
import trio
from conftest import j, wait_for_run
from waiting import settle, wait_until

from service.actors.balance.messages import PlaceHold
from service.actors.runs import actor as runs_mod
from service.actors.runs import effects as run_effects
from service.catalog import products as P
from service.catalog.product_types import FromInput, FromStep, Input, Product, Step
from service.errors import ActorGone, AskTimeout
from service.storage import generation as gen_sql

RUNS = "/v1/workflows/products/text-to-clip/runs"
OPEN = ("queued", "rendering")


def step(run, key) -> dict:
    return next(s for s in run["steps"] if s["key"] == key)


async def start(node, key, inputs, path=RUNS) -> dict:
    r = await node.call("POST", path, key, json={"inputs": inputs})
    assert r.status_code == 202, await r.get_data(as_text=True)
    return (await j(r))["data"]


async def balance(node, key) -> dict:
    return (await j(await node.call("GET", "/v1/billing/balance", key)))["data"]


def ledger(node, job_id) -> list[tuple[str, int]]:
    """The ledger lines of one job's hold, in order: each hold is placed once (-amount) and
    then captured (what goes back: 0 for a full capture) or released (+amount) once."""
    return [(r["kind"], r["amount_uc"]) for r in node.store.all(
        "SELECT kind, amount_uc FROM credit_ledger WHERE job_id = ? ORDER BY seq", (job_id,))]


def hold_of(node, job_id) -> tuple[str, int]:
    r = node.store.one("SELECT status, amount_uc FROM credit_holds WHERE job_id = ?", (job_id,))
    return r["status"], r["amount_uc"]


class FlakyCancel:
    """The run's cancel asks to jobs fail as told (`fail(call, job row)` gives the error or
    None), then reach the job actor as usual."""

    def __init__(self, node, monkeypatch, fail) -> None:
        self.node, self.fail, self.calls = node, fail, []
        gen = node.parts.generation
        self.real = gen.cancel
        monkeypatch.setattr(gen, "cancel", self.cancel)

    async def cancel(self, org_id, job_id):
        self.calls.append(self.node.clock.now())
        error = self.fail(len(self.calls), gen_sql.get_job(self.node.store, job_id))
        if isinstance(error, AskTimeout):
            await trio.sleep(10)  # what an ask that nobody answers costs
        if error is not None:
            raise error
        return await self.real(org_id, job_id)


@pytest.fixture
async def key(node):
    org = await node.create_org()
    node.org = org
    return org["api_key"]


async def cancel_run(node, key, run_id) -> dict:
    r = await node.call("POST", f"/v1/workflows/runs/{run_id}/cancel", key)
    assert r.status_code == 200
    return (await j(r))["data"]


async def test_a_cancel_refused_once_is_retried_until_the_job_is_canceled(node, key, monkeypatch, autojump_clock):
    flaky = FlakyCancel(node, monkeypatch, lambda n, job: ActorGone("job actor crashed") if n == 1 else None)
    run = await start(node, key, {"prompt": "x [[delay:60]]"})
    mid = await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    job_id = step(mid, "still")["request_id"]
    out = await cancel_run(node, key, run["id"])
    assert [s["status"] for s in out["steps"]] == ["canceled"] * 4
    assert gen_sql.get_job(node.store, job_id)["status"] in OPEN  # the first ask failed
    await wait_until(lambda: gen_sql.get_job(node.store, job_id)["status"] not in OPEN, 30)
    assert len(flaky.calls) == 2 and flaky.calls[1] - flaky.calls[0] == pytest.approx(runs_mod.CANCEL_RETRY_S[0])
    assert gen_sql.get_job(node.store, job_id)["status"] == "canceled"
    await settle()
    done = await wait_for_run(node, key, run["id"], lambda r: r["status"] == "canceled")
    assert [(s["key"], s["status"]) for s in done["steps"]] == [
        ("still", "canceled"), ("clip", "canceled"), ("thumb", "canceled"), ("cover", "canceled")]
    assert (done["credits"]["actual"], done["outputs"], done["error"]) == ("0.00", {}, None)
    assert hold_of(node, job_id) == ("released", 1_000_000)
    assert ledger(node, job_id) == [("hold", -1_000_000), ("release", 1_000_000)]
    assert (await balance(node, key))["available"] == "200.00"
    await trio.sleep(600)  # nothing left to retry: no more asks, the run's actor has stopped
    assert len(flaky.calls) == 2
    assert node.parts.runs.peek(run["id"]) is None


async def test_a_job_that_completes_while_its_cancel_fails_is_a_completed_charged_step(
        node, key, monkeypatch, autojump_clock):
    flaky = FlakyCancel(node, monkeypatch,
                        lambda n, job: ActorGone("job actor crashed") if job["status"] in OPEN else None)
    run = await start(node, key, {"prompt": "x [[delay:5]]"})
    mid = await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    job_id = step(mid, "still")["request_id"]
    out = await cancel_run(node, key, run["id"])
    assert out["status"] == "canceled"
    done = await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] != "canceled", 60)
    assert gen_sql.get_job(node.store, job_id)["status"] == "completed"
    assert (done["status"], done["error"]) == ("canceled", None)
    assert [(s["key"], s["status"]) for s in done["steps"]] == [
        ("still", "completed"), ("clip", "canceled"), ("thumb", "canceled"), ("cover", "canceled")]
    assert len(step(done, "still")["outputs"]) == 1
    assert done["credits"]["actual"] == "1.00"
    assert hold_of(node, job_id) == ("captured", 1_000_000)
    assert ledger(node, job_id) == [("hold", -1_000_000), ("capture", 0)]
    assert (await balance(node, key))["available"] == "199.00"
    calls = len(flaky.calls)
    await trio.sleep(600)
    assert len(flaky.calls) == calls
    assert node.parts.runs.peek(run["id"]) is None
    assert (await j(await node.call("GET", f"/v1/workflows/runs/{run['id']}", key)))["data"] == done


def spend_lab() -> Product:
    """A still, then two clips from it at once: the second's hold can be refused while the
    first renders."""
    clip = {"aspect_ratio": "16:9", "resolution": "480p", "duration": 5, "inputs": {"start_frame": FromStep("still")}}
    return Product(
        slug="spend-lab", name="Spend lab", category="video", description="test only", version=1,
        inputs={"still_prompt": Input("text", "Still", required=True),
                "one_prompt": Input("text", "One", required=True),
                "two_prompt": Input("text", "Two", required=True)},
        steps=(
            Step("still", capability="image.generate", model="proc-image",
                 params={"prompt": FromInput("still_prompt"), "aspect_ratio": "16:9", "resolution": "1k"}),
            Step("one", capability="video.generate", model="camera-move",
                 params={"prompt": FromInput("one_prompt"), **clip}),
            Step("two", capability="video.generate", model="camera-move",
                 params={"prompt": FromInput("two_prompt"), **clip}),
        ),
        outputs={"one": "one", "two": "two"},
    )


async def test_credits_running_out_a_cancel_that_times_out_and_a_job_that_completes(
        node, key, monkeypatch, autojump_clock):
    registry = P.ProductRegistry([*(P.REGISTRY.by_version(p.slug, p.version) for p in P.list_products()),
                                  spend_lab()])
    monkeypatch.setattr(P, "REGISTRY", registry)
    flaky = FlakyCancel(node, monkeypatch, lambda n, job: AskTimeout("job") if job["status"] in OPEN else None)
    run = await start(node, key, {"still_prompt": "a harbour [[delay:1]]", "one_prompt": "waves [[delay:5]]",
                                  "two_prompt": "gulls"}, path="/v1/workflows/products/spend-lab/runs")
    await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    # while the still renders (its hold 1.00), something else takes all but 15.00
    await node.parts.balances.ask(node.org["organization_id"], PlaceHold(str(uuid.uuid4()), 184_000_000))
    done = await wait_for_run(node, key, run["id"], lambda r: r["status"] == "failed"
                              and step(r, "one")["status"] != "canceled", 120)
    assert done["error"] == "two: Not enough credits to start this step (required 10.00, available 5.00)."
    assert [(s["key"], s["status"]) for s in done["steps"]] == [
        ("still", "completed"), ("one", "completed"), ("two", "failed")]
    one = step(done, "one")["request_id"]
    assert gen_sql.get_job(node.store, one)["status"] == "completed"
    assert len(step(done, "one")["outputs"]) == 1
    assert done["credits"]["actual"] == "11.00"
    assert flaky.calls and flaky.calls[0] + 10 <= node.clock.now()  # the first ask timed out
    assert hold_of(node, one) == ("captured", 10_000_000)
    assert ledger(node, one) == [("hold", -10_000_000), ("capture", 0)]
    assert ledger(node, step(done, "still")["request_id"]) == [("hold", -1_000_000), ("capture", 0)]
    assert node.store.scalar("SELECT count(*) FROM jobs WHERE id = ?", (step(done, "two")["request_id"],)) == 0
    assert (await balance(node, key))["available"] == "5.00"
    await trio.sleep(600)
    assert node.parts.runs.peek(run["id"]) is None


async def test_asks_to_a_job_whose_actor_stays_down_stop_after_cancel_tries(node, key, monkeypatch, autojump_clock):
    """A job actor that never answers: the run asks CANCEL_TRIES rounds, then stops (its
    actor ends); the job is left open for the start-up recovery, which releases its hold."""
    flaky = FlakyCancel(node, monkeypatch, lambda n, job: ActorGone("job actor past its restart limit"))
    run = await start(node, key, {"prompt": "x [[delay:3600]]"})
    mid = await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    job_id = step(mid, "still")["request_id"]
    out = await cancel_run(node, key, run["id"])
    assert [s["status"] for s in out["steps"]] == ["canceled"] * 4
    gaps = [runs_mod.CANCEL_RETRY_S[min(i, len(runs_mod.CANCEL_RETRY_S) - 1)] for i in range(runs_mod.CANCEL_TRIES - 1)]
    await trio.sleep(sum(gaps) + 60)  # the job's own 600 s timeout is still ahead
    assert flaky.calls[-1] - flaky.calls[0] == pytest.approx(sum(gaps))
    assert len(flaky.calls) == runs_mod.CANCEL_TRIES
    assert node.parts.runs.peek(run["id"]) is None
    assert gen_sql.get_job(node.store, job_id)["status"] in OPEN
    assert hold_of(node, job_id) == ("held", 1_000_000)
    # the next start's recovery (Products.recover) cancels it; the hold is released once
    monkeypatch.setattr(node.parts.generation, "cancel", flaky.real)
    await node.parts.products.recover()
    await wait_until(lambda: hold_of(node, job_id)[0] == "released", 30)
    assert ledger(node, job_id) == [("hold", -1_000_000), ("release", 1_000_000)]
    done = await wait_for_run(node, key, run["id"], lambda r: r["status"] == "canceled")
    assert [s["status"] for s in done["steps"]] == ["canceled"] * 4
    assert (await balance(node, key))["available"] == "200.00"


async def test_a_run_cancel_answers_without_waiting_for_a_job_that_does_not_answer(
        node, key, monkeypatch, autojump_clock):
    """The owner's cancel request gets its answer within CANCEL_ANSWER_S even when the step
    job's actor does not answer (an ask waits 10 s); the run actor asks again after."""
    flaky = FlakyCancel(node, monkeypatch, lambda n, job: AskTimeout("job") if n == 1 else None)
    run = await start(node, key, {"prompt": "x [[delay:60]]"})
    mid = await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    job_id = step(mid, "still")["request_id"]
    t0 = trio.current_time()
    r = await node.call("POST", f"/v1/workflows/runs/{run['id']}/cancel", key)
    assert trio.current_time() - t0 <= run_effects.CANCEL_ANSWER_S
    assert r.status_code == 200
    out = (await j(r))["data"]
    assert (out["status"], [s["status"] for s in out["steps"]]) == ("canceled", ["canceled"] * 4)
    await wait_until(lambda: hold_of(node, job_id)[0] == "released", 30)
    assert gen_sql.get_job(node.store, job_id)["status"] == "canceled"
    assert len(flaky.calls) == 2
    assert ledger(node, job_id) == [("hold", -1_000_000), ("release", 1_000_000)]
    assert (await balance(node, key))["available"] == "200.00"
    await trio.sleep(600)
    assert node.parts.runs.peek(run["id"]) is None
