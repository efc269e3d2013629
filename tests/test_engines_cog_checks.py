"""The jobs waiting on one Cog server share its health checks (service/engines/cog.py,
`Cog.status`): on trio's mock clock against a scripted Cog (httpx.MockTransport), eight
jobs waiting together ask the server about once per `poll_s` rather than eight times, each
job still sees a new answer each turn, and a check whose job is cancelled holds up no one.
And every server, of one slot or several, is asked for the `completed` webhook only."""

from __future__ import annotations

import base64
import json
from io import BytesIO

import httpx
import trio
from PIL import Image

from service.backends.base import RenderRequest
from service.catalog.engines import CogEngine
from service.engines import cog, common
from service.engines.context import Context
from service.engines.drive import drive


def png() -> str:
    buf = BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 10)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


class Scripted:
    """A Cog server that takes every PUT, answers its health check with `status` (after
    `delay` seconds), and counts the checks."""

    def __init__(self, status: str = "BUSY", delay: float = 0.0) -> None:
        self.status, self.delay = status, delay
        self.checks = 0
        self.in_flight = self.most_in_flight = 0
        self.created: list[dict] = []

    async def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health-check":
            self.checks += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                await trio.sleep(self.delay)
            finally:
                self.in_flight -= 1
            return httpx.Response(200, json={"status": self.status})
        self.created.append(json.loads(request.content))
        return httpx.Response(202, json={"id": request.url.path.split("/")[-1], "status": "starting"})


def request(tmp_path, job_id: str) -> RenderRequest:
    return RenderRequest(job_id=job_id, capability="image.generate", model="m", backend="cog", prompt="a fox",
                         seed=7, aspect_ratio=None, resolution="1k", duration=None, inputs={},
                         work_dir=tmp_path / job_id, test_mode=True)


async def test_jobs_on_one_server_share_its_health_checks(tmp_path, autojump_clock):
    server = Scripted()
    ctx = Context(httpx.AsyncClient(transport=httpx.MockTransport(server.handler)), lambda: "http://node",
                  b"hook-secret", lambda *args: None)
    client = cog.Cog(ctx)
    cfg = CogEngine(urls=["http://cog"], poll_s=1.0, timeout_s=5.0)
    ids = [f"job-{i}" for i in range(8)]
    done: list[str] = []

    async def one(job_id: str) -> None:
        result = await drive(client, cfg, ctx, request(tmp_path, job_id), "http://cog", 8)
        assert len(result.outputs) == 1
        done.append(job_id)

    async with ctx.http, trio.open_nursery() as n:
        for job_id in ids:
            n.start_soon(one, job_id)
        await trio.sleep(10.5)  # ten turns of every job's wait
        assert server.checks == 10, server.checks  # one per turn, not one per job and turn (80)
        for job_id in ids:
            ctx.deliver(job_id, ctx.token(job_id), {"status": "succeeded", "output": png()})
    assert sorted(done) == ids


async def test_a_single_slot_job_still_sees_a_new_answer_each_turn(tmp_path, autojump_clock):
    """A single-slot server that says READY five times in a row without an outcome has lost
    the job: with another job's checks of the same server in between, each job still takes
    five turns of its own (answers to checks begun within the turn) before it gives up."""
    server = Scripted(status="READY")
    ctx = Context(httpx.AsyncClient(transport=httpx.MockTransport(server.handler)), lambda: "http://node",
                  b"hook-secret", lambda *args: None)
    client = cog.Cog(ctx)
    cfg = CogEngine(urls=["http://cog"], poll_s=1.0, timeout_s=5.0)
    lost_after: list[float] = []

    async def one(job_id: str) -> None:
        start = trio.current_time()
        try:
            await drive(client, cfg, ctx, request(tmp_path, job_id), "http://cog", 1)
        except cog.Incomplete:
            lost_after.append(trio.current_time() - start)

    async with ctx.http, trio.open_nursery() as n:
        n.start_soon(one, "job-a")
        await trio.sleep(0.5)  # the second job's turns fall between the first one's
        n.start_soon(one, "job-b")
    assert len(lost_after) == 2
    assert all(5 <= t < 6 for t in lost_after), lost_after
    assert server.checks == cog.LOST_AFTER, server.checks  # the second job took the first one's answers


async def test_a_slow_server_gets_one_check_at_a_time(tmp_path, autojump_clock):
    """A check that outlasts `poll_s` (a slow or hanging server) is still the one check:
    jobs that ask meanwhile wait for its answer instead of starting others beside it."""
    server = Scripted(status="BUSY", delay=4.0)
    ctx = Context(httpx.AsyncClient(transport=httpx.MockTransport(server.handler)), lambda: "http://node",
                  b"hook-secret", lambda *args: None)
    client = cog.Cog(ctx)
    answers: list = []

    async def asking(start: float) -> None:
        await trio.sleep(start)
        for _ in range(5):
            answers.append(await client.status("http://cog", 5.0, 1.0))
            await trio.sleep(1.0)

    async with ctx.http, trio.open_nursery() as n:
        for i in range(8):
            n.start_soon(asking, i * 0.6)
    assert len(answers) == 40 and set(answers) == {(True, "BUSY")}
    assert server.most_in_flight == 1


async def test_a_check_whose_job_is_cancelled_holds_up_no_one(tmp_path, autojump_clock):
    server = Scripted(status="BUSY", delay=3.0)
    ctx = Context(httpx.AsyncClient(transport=httpx.MockTransport(server.handler)), lambda: "http://node",
                  b"hook-secret", lambda *args: None)
    client = cog.Cog(ctx)
    async with ctx.http, trio.open_nursery() as n:
        first = trio.CancelScope()

        async def cancelled() -> None:
            with first:
                await client.status("http://cog", 5.0, 1.0)

        n.start_soon(cancelled)
        await trio.sleep(0.5)  # its check is under way
        answers: list = []

        async def waiting() -> None:
            answers.append(await client.status("http://cog", 5.0, 1.0))

        n.start_soon(waiting)
        await trio.sleep(0.5)
        first.cancel()
    assert answers == [(True, "BUSY")]
    assert server.checks == 2  # the second asked anew once the first check was given up


async def test_every_server_is_asked_only_for_the_completed_webhook(tmp_path, autojump_clock):
    """No `start` webhook, for a single-slot server either: its lost-job rule reads the
    health check, which Cog answers BUSY while it holds the prediction
    (tests/test_engines_cog.py checks that against the real server)."""
    server = Scripted()
    ctx = Context(httpx.AsyncClient(transport=httpx.MockTransport(server.handler)), lambda: "http://node",
                  b"hook-secret", lambda *args: None)
    client = cog.Cog(ctx)
    cfg = CogEngine(urls=["http://cog"], poll_s=1.0, timeout_s=5.0)

    async def one(job_id: str, slots: int) -> None:
        await drive(client, cfg, ctx, request(tmp_path, job_id), "http://cog", slots)

    async with ctx.http, trio.open_nursery() as n:
        n.start_soon(one, "job-1", 1)
        n.start_soon(one, "job-8", 8)
        await trio.sleep(2)
        for job_id in ("job-1", "job-8"):
            ctx.deliver(job_id, ctx.token(job_id), {"status": "succeeded", "output": png()})
    filters = {body["id"]: body["webhook_events_filter"] for body in server.created}
    assert filters == {"job-1": ["completed"], "job-8": ["completed"]}


async def test_response_mode_sends_no_webhook_and_no_prefer(tmp_path, autojump_clock):
    """`outcome = "response"`: the PUT asks for no webhook and no async answer, and its
    answer is the outcome (no health check was needed)."""
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        await trio.sleep(3)  # the prediction runs; the PUT's answer waits for it (within poll_s:
        # no health check; a mock transport applies no timeout: the real-Cog test covers timeout_s)
        return httpx.Response(200, json={"id": "job-1", "status": "succeeded", "output": png()})

    ctx = Context(httpx.AsyncClient(transport=httpx.MockTransport(handler)), lambda: "http://node",
                  b"hook-secret", lambda *args: None)
    cfg = CogEngine(urls=["http://cog"], poll_s=5.0, outcome="response")
    async with ctx.http:
        result = await drive(cog.Cog(ctx), cfg, ctx, request(tmp_path, "job-1"), "http://cog", 8)
    assert len(result.outputs) == 1
    [put] = seen
    assert (put.method, put.url.path) == ("PUT", "/predictions/job-1")
    assert "prefer" not in put.headers
    assert json.loads(put.content) == {"id": "job-1", "input": {}}


async def test_response_mode_a_hung_server_fails_the_job_as_unreachable(tmp_path, autojump_clock):
    """A server that hangs keeps the PUT's connection open and never answers it: its failing
    health checks end the job as unreachable after sum(RETRY_S), as in webhook mode."""
    calls = {"put": 0, "checks": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health-check":
            calls["checks"] += 1
            raise httpx.ConnectTimeout("timed out", request=request)
        calls["put"] += 1
        await trio.sleep_forever()

    ctx = Context(httpx.AsyncClient(transport=httpx.MockTransport(handler)), lambda: "http://node",
                  b"hook-secret", lambda *args: None)
    cfg = CogEngine(urls=["http://cog"], poll_s=1.0, timeout_s=5.0, outcome="response")
    start = trio.current_time()
    async with ctx.http:
        try:
            await drive(cog.Cog(ctx), cfg, ctx, request(tmp_path, "job-1"), "http://cog", 1)
        except cog.Unreachable:
            took = trio.current_time() - start
        else:
            raise AssertionError("the job did not fail")
    assert sum(common.RETRY_S) <= took < sum(common.RETRY_S) + 2, took
    assert calls["put"] == 1 and calls["checks"] >= cog.DOWN_AFTER
