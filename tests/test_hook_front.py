"""The engine webhook answered in front of Quart (service/http/hook_front.py): the same answer
and metrics as the route, the hook delivered, and every other case left to the route."""

from __future__ import annotations

import json

import trio
import trio.testing

from service.http import hook_front
from service.http.hook_front import ROUTE, HookFront
from service.metrics import Metrics

HIDDEN = {"date", "server", "x-process-time"}  # the one header whose value is a time, and Hypercorn's


def answered(n, route: bool, passed: list | None = None):
    """Answers by the front (route=False) or by the route with the front taken out; `passed`
    gets each request the front handed on to Quart."""
    front = n.app.asgi_app
    assert isinstance(front, HookFront)
    inner = front.app

    async def spied(scope, receive, send):
        if passed is not None:
            passed.append(scope["path"])
        await inner(scope, receive, send)

    async def post(path: str, body: bytes, headers: dict | None = None):
        if route:
            n.app.asgi_app = inner
        front.app = spied
        try:
            # as an engine sends it (Quart's test client sets no length: the front leaves such a body to Quart)
            return await n.client.post(path, data=body, headers={"Content-Type": "application/json",
                                                                 "Content-Length": str(len(body)), **(headers or {})})
        finally:
            n.app.asgi_app, front.app = front, inner

    return post


def counted(n, status: str) -> float:
    return n.parts.metrics.registry.get_sample_value(
        "genservice_http_requests_total", {"route": ROUTE, "method": "POST", "status": status}) or 0.0


async def test_the_front_answers_as_the_route_does_and_delivers_the_hook(node):
    ctx = node.parts.engines.context
    hooks = ctx.expect_hooks("job-1")
    path = ctx.hook_url("job-1").removeprefix(node.parts.settings.base_url)
    body = json.dumps({"id": "job-1", "status": "succeeded", "output": "data:,x"}).encode()
    try:
        passed: list[str] = []
        by_front = await answered(node, route=False, passed=passed)(path, body)
        assert passed == []  # answered by the front itself
        assert hooks.receive_nowait() == {"id": "job-1", "status": "succeeded", "output": "data:,x"}
        by_route = await answered(node, route=True)(path, body)
        assert hooks.receive_nowait() == {"id": "job-1", "status": "succeeded", "output": "data:,x"}
        for r in (by_front, by_route):
            assert r.status_code == 200
            assert float(r.headers["X-Process-Time"]) >= 0
        assert await by_front.get_data() == await by_route.get_data() == b'{"received":true}\n'
        assert ({k.lower(): v for k, v in by_front.headers.items() if k.lower() not in HIDDEN}
                == {k.lower(): v for k, v in by_route.headers.items() if k.lower() not in HIDDEN})
        assert counted(node, "200") == 2
        assert node.parts.metrics.registry.get_sample_value(
            "genservice_http_request_seconds_count", {"route": ROUTE, "method": "POST"}) == 2
    finally:
        ctx.forget_hooks("job-1")
        await hooks.aclose()


async def test_every_refusal_is_the_routes_own_answer(node):
    ctx = node.parts.engines.context
    path = ctx.hook_url("job-2").removeprefix(node.parts.settings.base_url)
    wrong = path[:-1] + ("0" if path[-1] != "0" else "1")
    hooks = ctx.expect_hooks("job-3", lambda headers, body: False)  # an engine that signs: this one is refused
    signed = ctx.hook_url("job-3").removeprefix(node.parts.settings.base_url)

    def broken(headers, body):
        raise ValueError("a verifier's own fault")

    faulty = ctx.expect_hooks("job-6", broken)
    raising = ctx.hook_url("job-6").removeprefix(node.parts.settings.base_url)
    not_json = (400, "request.bad_request", "Body must be a JSON object.")
    cases = [(wrong, b'{"status": "succeeded"}', (404, "request.not_found", "Not found.")),
             (path, b"not json", not_json), (path, b'["a list"]', not_json), (path, b"\xff\xfe", not_json),
             (path, b"", not_json), (path, b"[" * 100_000 + b"]" * 100_000, not_json),  # nested past recursion
             (signed, b'{"status": "succeeded"}', (401, "request.unauthorized", "Invalid webhook signature.")),
             (path + "/more", b"{}", (404, "request.not_found", "The requested resource was not found.")),
             (raising, b'{"status": "succeeded"}', (500, "request.internal_error", "Something went wrong on our side."))]
    passed: list[str] = []
    try:
        for where, body, expected in cases:
            for r in (await answered(node, False, passed)(where, body), await answered(node, True)(where, body)):
                e = (await r.get_json())["error"]
                assert (r.status_code, e["code"], e["message"]) == expected, (where, body)
        assert passed == [where for where, _, _ in cases]  # each one handed on to the route
        assert hooks.statistics().current_buffer_used == 0
        assert counted(node, "400") == 10 and counted(node, "401") == 2
    finally:
        for job, channel in (("job-3", hooks), ("job-6", faulty)):
            ctx.forget_hooks(job)
            await channel.aclose()


async def test_a_hook_too_large_for_the_front_is_still_taken_by_the_route(node, monkeypatch):
    monkeypatch.setattr(hook_front, "FRONT_LIMIT", 10)
    ctx = node.parts.engines.context
    hooks = ctx.expect_hooks("job-4")
    path = ctx.hook_url("job-4").removeprefix(node.parts.settings.base_url)
    try:
        passed: list[str] = []
        r = await answered(node, False, passed)(path, json.dumps({"status": "succeeded", "output": "data:,long enough"}).encode())
        assert passed == [path]
        assert (r.status_code, await r.get_json()) == (200, {"received": True})
        assert hooks.receive_nowait()["output"] == "data:,long enough"
    finally:
        ctx.forget_hooks("job-4")
        await hooks.aclose()


class _Inner:
    """An app behind the front: what reached it."""

    def __init__(self) -> None:
        self.got: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:
        while True:
            message = await receive()
            self.got.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                return


def _scope(length: int) -> dict:
    return {"type": "http", "method": "POST", "path": "/engine-hooks/job-5/token",
            "headers": [(b"content-length", str(length).encode())]}


async def test_a_body_that_stops_coming_goes_on_to_the_route_with_what_came(autojump_clock):
    """A slow sender is not held in the front: after FRONT_WAIT_S the route gets the part that
    came, then the rest as it comes (its own body timeout runs from there)."""
    inner = _Inner()
    send_body, receive_body = trio.open_memory_channel[dict](4)
    await send_body.send({"type": "http.request", "body": b'{"sta', "more_body": True})

    async def never_sends(message: dict) -> None:
        raise AssertionError("the front answered")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(HookFront(inner, node=None), _scope(30), receive_body.receive, never_sends)
        await trio.sleep(hook_front.FRONT_WAIT_S - 0.5)
        assert inner.got == []
        await trio.sleep(1)
        assert inner.got == [{"type": "http.request", "body": b'{"sta', "more_body": True}]
        await send_body.send({"type": "http.request", "body": b'tus": 1}', "more_body": False})
    assert inner.got[1] == {"type": "http.request", "body": b'tus": 1}', "more_body": False}


async def test_a_sender_that_leaves_reaches_the_route_as_a_disconnect():
    inner = _Inner()
    send_body, receive_body = trio.open_memory_channel[dict](4)
    await send_body.send({"type": "http.request", "body": b'{"a"', "more_body": True})
    await send_body.send({"type": "http.disconnect"})
    await HookFront(inner, node=None)(_scope(30), receive_body.receive, None)
    assert inner.got == [{"type": "http.disconnect"}]


async def test_a_hook_whose_body_is_queued_is_answered_without_a_scheduler_step():
    """The front takes a body already queued on the node's `Receive` without the step of an
    await (and, with the connection's writes at once, answers without one)."""
    from service.http.connection import Receive

    class Node:
        metrics = Metrics(dict, lambda: 0)

        class engines:
            class context:
                @staticmethod
                def judge(job_id, token, body, headers):
                    return None  # taken

    body = b'{"status": "succeeded"}'
    into, out = trio.open_memory_channel[dict](4)
    into.send_nowait({"type": "http.request", "body": body, "more_body": False})
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    with trio.testing.assert_no_checkpoints():
        await HookFront(_Inner(), Node())(_scope(len(body)), Receive(out), send)
    assert sent[0]["status"] == 200 and sent[1]["body"] == hook_front.ANSWER
