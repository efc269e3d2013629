"""The hook gate (service/hookgate/): engine webhooks received by a process of its own and
answered by the node as its own route answers them; the gate started again when it ends,
given nothing of the node's environment, and gone with the node; a real Cog reporting
through it; its setting's refusals."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from service.config import Settings
from service.hookgate import child, gate, wire
from service.hookgate.gate import BadListen, bind

from engine_support import cog_catalog, engine_node
from proc_memory import children
from serve_process import HARNESS_ENV, ServeProcess
from test_generation_support import submit, wait_status
from tests.pages import page
from tests.test_operator_console import sign_in
from waiting import wait_until, wait_until_sync


NOT_JSON = (400, "request.bad_request", "Body must be a JSON object.")
SENT = {"id": "p1", "status": "succeeded", "output": "data:,x"}


def error_of(r: httpx.Response) -> tuple[int, str, str]:
    e = r.json()["error"]
    assert e["request_id"]
    return r.status_code, e["code"], e["message"]


async def post(url: str, body: bytes | None = None, method: str = "POST", **kw) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as c:
        return await c.request(method, url, content=body, **kw)


def gate_url(n, job_id: str) -> str:
    url = n.parts.engines.context.hook_url(job_id)
    assert url.startswith(n.parts.settings.engine_hooks_url + "/engine-hooks/")
    return url


async def test_a_hook_through_the_gate_is_delivered_with_the_routes_answer(tmp_path):
    async with engine_node(tmp_path, "", engine_hooks_listen="127.0.0.1:0") as n:
        ctx = n.parts.engines.context
        hooks = ctx.expect_hooks("job-1")
        try:
            r = await post(gate_url(n, "job-1"), json.dumps(SENT).encode(), headers={"content-type": "application/json"})
            assert (r.status_code, r.content) == (200, b'{"received":true}\n')
            assert (r.headers["content-type"], r.headers["content-length"]) == ("application/json", "18")
            assert float(r.headers["x-process-time"]) >= 0
            assert hooks.receive_nowait() == SENT
            counted = n.parts.metrics.registry.get_sample_value(
                "genservice_http_requests_total", {"route": gate.ROUTE, "method": "POST", "status": "200"})
            assert counted == 1
        finally:
            ctx.forget_hooks("job-1")
            await hooks.aclose()


async def test_every_refusal_of_the_gate_is_the_nodes_own(tmp_path):
    async with engine_node(tmp_path, "", engine_hooks_listen="127.0.0.1:0") as n:
        ctx = n.parts.engines.context
        on_node = n.parts.settings.base_url
        on_gate = n.parts.settings.engine_hooks_url
        hooks = ctx.expect_hooks("job-2")
        signs = ctx.expect_hooks("job-3", lambda headers, body: False)  # an engine that signs: refused

        def broken(headers, body):
            raise ValueError("a verifier's own fault")

        faulty = ctx.expect_hooks("job-4", broken)
        path = gate_url(n, "job-2").removeprefix(on_gate)
        wrong = path[:-1] + ("0" if path[-1] != "0" else "1")
        cases = [(wrong, b'{"status": "succeeded"}', (404, "request.not_found", "Not found.")),
                 (path, b"not json", NOT_JSON), (path, b'["a list"]', NOT_JSON), (path, b"\xff\xfe", NOT_JSON),
                 (path, b"", NOT_JSON),
                 (gate_url(n, "job-3").removeprefix(on_gate), b'{"status": "succeeded"}',
                  (401, "request.unauthorized", "Invalid webhook signature.")),
                 (path + "/more", b"{}", (404, "request.not_found", "The requested resource was not found.")),
                 (gate_url(n, "job-4").removeprefix(on_gate), b"{}",
                  (500, "request.internal_error", "Something went wrong on our side."))]
        try:
            for where, body, expected in cases:
                by_gate, by_node = await post(on_gate + where, body), await post(on_node + where, body)
                assert error_of(by_gate) == error_of(by_node) == expected, where
                assert by_gate.headers["content-type"] == by_node.headers["content-type"] == "application/json"
            assert hooks.statistics().current_buffer_used == 0
            r = await post(on_gate + path, method="GET")  # a method the route does not take
            assert error_of(r) == (405, "request.method_not_allowed", "The method is not allowed for this route.")
            assert r.headers["allow"] == "POST"
            r = await post(on_gate + "/v1/generation/models")  # the gate serves the hook route only
            assert error_of(r) == (404, "request.not_found", "The requested resource was not found.")
        finally:
            for job, channel in (("job-2", hooks), ("job-3", signs), ("job-4", faulty)):
                ctx.forget_hooks(job)
                await channel.aclose()


async def test_a_body_over_the_limit_is_refused_and_ends_the_connection(tmp_path, monkeypatch):
    monkeypatch.setattr(gate, "UPLOAD_BODY_LIMIT", 1000)  # the node's hook-body limit, made small
    async with engine_node(tmp_path, "", engine_hooks_listen="127.0.0.1:0") as n:
        url = gate_url(n, "job-5")
        too_large = (413, "request.bad_request", "The request body is too large.")
        # a declared length over it: refused before any of the body is sent, and the connection ends
        host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
        path = url.split(host + ":" + port, 1)[1]
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n".encode())
        answer = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some():
                answer += chunk
        await stream.aclose()
        head, body = answer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 413 ") and b"\r\nconnection: close" in head.lower()
        assert json.loads(body)["error"]["message"] == "The request body is too large."

        async def chunks():  # no declared length: refused once the read passes the limit
            for _ in range(3):
                yield b" " * 400

        r = await post(url, chunks())
        assert error_of(r) == too_large and r.headers["connection"] == "close"
        r = await post(url, b" " * 990 + b"{}")  # under it: judged as any other (the right token: taken)
        assert (r.status_code, r.json()) == (200, {"received": True})


async def test_a_body_that_stops_coming_is_given_up_after_the_timeout(autojump_clock):
    async def forever():
        await trio.sleep_forever()

    scope = {"headers": [(b"content-length", b"10")]}
    with trio.testing.assert_checkpoints():
        start = trio.current_time()
        assert await child._read_body(scope, forever, 100, 120.0) == (wire.TIMED_OUT, b"")
    assert trio.current_time() - start == 120.0

    async def gone():
        return {"type": "http.disconnect"}

    assert await child._read_body(scope, gone, 100, 120.0) is None  # nobody to answer: the node is not asked


def test_the_gates_timeout_answer_is_the_nodes():
    """408 as the node's app answers a body past its BODY_TIMEOUT (service/http/errors.py)."""
    g = gate.HookGate(socket.socket(), None, type("M", (), {"answered": lambda *a: None})(), 10)
    frame = bytearray(g.answer(7, wire.TIMED_OUT, "POST", "/engine-hooks/a/b", [], b""))
    seq, status, headers, body = wire.take_answer(frame)
    assert (seq, status) == (7, 408)
    assert json.loads(body) == {"error": "Request timeout", "message": "Request took longer than 120 seconds to process"}
    g.sock.close()


async def test_a_child_that_ends_is_started_again_after_a_second(autojump_clock, monkeypatch):
    """The restart rule on the mock clock: each start RESTART_S after the last child ended,
    whether it ended by itself or failed."""
    g = gate.HookGate(socket.socket(), None, None, 10)  # type: ignore[arg-type]
    starts: list[float] = []

    async def child_ends() -> None:
        starts.append(trio.current_time())
        await trio.sleep(0.25)  # served a while, then ended
        if len(starts) == 2:
            raise OSError("could not start")

    monkeypatch.setattr(g, "_child", child_ends)
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        await wait_until(lambda: len(starts) == 3)
        nursery.cancel_scope.cancel()
    assert [s - starts[0] for s in starts] == [0.0, 1.25, 2.5]
    assert g.sock.fileno() == -1  # the socket closed with the gate


def test_frames_are_taken_whole_and_in_order():
    one = wire.request(1, wire.COMPLETE, "POST", "/engine-hooks/a/b", [["x", "y"]], b"{}")
    two = wire.request(2, wire.TOO_LARGE, "POST", "/p", [], b"")
    buf = bytearray()
    for byte in one[:-1]:
        buf.append(byte)
        assert wire.take_request(buf) is None
    buf += one[-1:] + two
    assert wire.take_request(buf) == (1, wire.COMPLETE, "POST", "/engine-hooks/a/b", [["x", "y"]], b"{}")
    assert wire.take_request(buf) == (2, wire.TOO_LARGE, "POST", "/p", [], b"")
    assert buf == bytearray() and wire.take_request(buf) is None


async def test_the_gate_is_started_again_on_its_port_and_holds_nothing_of_the_nodes(tmp_path, monkeypatch):
    monkeypatch.setattr(gate, "RESTART_S", 0.05)
    monkeypatch.setenv("GENSERVICE_OPERATOR_TOKEN", "op-token-not-for-the-gate")
    async with engine_node(tmp_path, "", engine_hooks_listen="127.0.0.1:0") as n:
        url = gate_url(n, "job-6")
        assert (await post(url, b"{}")).status_code == 200  # the right token: taken (nobody waits: dropped)
        first = n.gate.pid
        environ = Path(f"/proc/{first}/environ").read_bytes().split(b"\0")
        assert not [e for e in environ if e.startswith(b"GENSERVICE_")]
        assert not [e for e in environ if b"op-token-not-for-the-gate" in e]
        await sign_in(n.client)
        _, html = await page(n.client, "/operator/engines")
        where = f"Engine servers send their webhooks to {n.parts.settings.engine_hooks_url}, the hook gate: "
        assert where + '<span class="badge ok">running</span> (started 1 time).' in html
        os.kill(first, signal.SIGKILL)
        await wait_until(lambda: n.gate.children == 2 and n.gate.pid not in (None, first), 10)
        second = n.gate.pid
        assert (await post(url, b"{}")).status_code == 200  # the same URL, the next process
        _, html = await page(n.client, "/operator/engines")
        assert where + '<span class="badge ok">running</span> (started 2 times).' in html
    assert n.gate.pid is None and not alive(second)  # the node stopped: so did its gate


async def test_a_job_completes_through_cog_reporting_only_to_the_gate(cog, tmp_path):
    async with engine_node(tmp_path, cog_catalog(cog.url), engine_hooks_listen="127.0.0.1:0") as n:
        # the node's own address made one nobody listens at: only the gate can take the hook
        with socket.socket() as dead:
            dead.bind(("127.0.0.1", 0))
            n.parts.settings.base_url = f"http://127.0.0.1:{dead.getsockname()[1]}"
        org = await n.create_org()
        rid = (await submit(n, org["api_key"], {"prompt": "a fox", "seed": 3},
                            path="/v1/generation/models/cog-image"))["request_id"]
        st = await wait_status(n, org["api_key"], rid)
        assert st["status"] == "completed", st
        counted = n.parts.metrics.registry.get_sample_value(
            "genservice_http_requests_total", {"route": gate.ROUTE, "method": "POST", "status": "200"})
        assert counted == 1 and n.gate.children == 1


def test_hosted_apis_report_to_the_public_address():
    from service.engines.context import Context
    ctx = Context(None, lambda: "https://node.example", b"k" * 32, lambda *a: None,  # type: ignore[arg-type]
                  lambda: "http://10.0.0.5:8001")
    assert ctx.hook_url("j").startswith("http://10.0.0.5:8001/engine-hooks/j/")
    assert ctx.hook_url("j", public=True).startswith("https://node.example/engine-hooks/j/")
    assert Context(None, lambda: "https://node.example", b"k" * 32,  # type: ignore[arg-type]
                   lambda *a: None).hook_url("j").startswith("https://node.example/engine-hooks/j/")


def test_the_settings_the_gate_refuses_to_start_with():
    def bound(listen: str, url: str | None = None) -> Settings:
        s = Settings(engine_hooks_listen=listen, engine_hooks_url=url)
        bind(s).close()
        return s

    for listen in ("8001", "nonsense", ":8001", "host:port"):
        with pytest.raises(BadListen) as e:
            bound(listen)
        assert str(e.value) == "GENSERVICE_ENGINE_HOOKS_LISTEN must be HOST:PORT (for example 10.0.0.5:8001)"
    with pytest.raises(BadListen) as e:
        bound("0.0.0.0:0")
    assert str(e.value) == ("GENSERVICE_ENGINE_HOOKS_LISTEN listens on every address: set "
                            "GENSERVICE_ENGINE_HOOKS_URL to the address engine servers reach it at")
    assert bound("0.0.0.0:0", "http://10.0.0.5:8001/").engine_hooks_url == "http://10.0.0.5:8001"
    assert bound("[::1]:0").engine_hooks_url.startswith("http://[::1]:")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BadListen) as e:
            bound(f"127.0.0.1:{port}")
        assert str(e.value) == (f"GENSERVICE_ENGINE_HOOKS_LISTEN: cannot listen on 127.0.0.1:{port}: "
                                "Address already in use")


def test_genservice_serve_runs_the_gate_and_the_gate_ends_with_a_killed_node(tmp_path):
    node = ServeProcess(tmp_path / "node", {**HARNESS_ENV, "GENSERVICE_ENGINE_HOOKS_LISTEN": "127.0.0.1:0"},
                        operator_token="t")
    node.start()
    try:
        line = next(ln for ln in node.log.read_text().splitlines() if "engine hooks: received by a gate" in ln)
        url = line.rsplit(" ", 1)[1]
        r = httpx.post(f"{url}/engine-hooks/some-job/some-token", content=b"{}", timeout=10)
        assert error_of(r) == (404, "request.not_found", "Not found.")
        # the gate's process (the node's others are its media-check workers)
        [pid] = [c for c in children(node.pid) if b"service.hookgate.child" in Path(f"/proc/{c}/cmdline").read_bytes()]
    finally:
        node.kill()  # SIGKILL: the node cannot stop its gate; the gate sees its link close
    wait_until_sync(lambda: not alive(pid), 10)  # another process's exit: waited for, not timed


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
