"""The event streams as the OpenAPI document describes them: real streams of a served
node, each event (`{event, id, data}`, data as JSON) checked by schemathesis against the
document it serves (the "SSE event violates schema" check of a fuzzing run)."""

from __future__ import annotations

import datetime
from urllib.parse import urlsplit

import httpx
import schemathesis
import trio

from engine_support import engine_node
from test_generation_support import submit, wait_status
from test_openai_front import BUILTINS


async def _read_events(url: str, key: str, path: str, count: int) -> httpx.Response:
    """The first `count` events of a stream (or all, if it ends first), as one response. An
    HTTP/1.0 request over a plain socket: the body comes unchunked and the test closes it."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    async with await trio.open_tcp_stream(host, port) as sock:
        await sock.send_all(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        raw = b""
        with trio.move_on_after(20):
            while raw.partition(b"\r\n\r\n")[2].count(b"\n\n") < count:
                chunk = await sock.receive_some()
                if not chunk:
                    break
                raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = [tuple(h.split(": ", 1)) for h in lines[1:]]
    return read(httpx.Response(int(lines[0].split()[1]), headers=headers, content=body,
                               request=httpx.Request("GET", url + path)))


def read(r: httpx.Response) -> httpx.Response:
    r.read()
    r.elapsed = datetime.timedelta(0)
    return r


async def test_streams_match_the_documented_events(tmp_path):
    async with engine_node(tmp_path, BUILTINS) as n:
        url = n.parts.settings.base_url
        key = (await n.create_org())["api_key"]
        doc = await (await n.call("GET", "/v1/openapi.json", None)).get_json()
        schema = schemathesis.openapi.from_dict(doc)
        rid = (await submit(n, key, {"prompt": "a fox"}))["request_id"]
        await wait_status(n, key, rid)
        job = await _read_events(url, key, f"/v1/generation/requests/{rid}/events", 5)
        assert b"event: status" in job.content
        schema.find_operation_by_id("job_events").validate_response(job)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit, n, key, {"prompt": "another fox"})
            project = await _read_events(url, key, "/v1/events", 3)
        assert b"event: feed" in project.content and b"event: status" in project.content
        schema.find_operation_by_id("project_events").validate_response(project)
        broken = read(httpx.Response(200, headers=job.headers, request=job.request,
                                     content=job.content.replace(b'"request_id":', b'"request_id_":', 1)))
        try:
            schema.find_operation_by_id("job_events").validate_response(broken)
        except AssertionError as e:  # schemathesis's failure group
            assert "SSE event violates schema" in str(e) or "request_id" in str(e), e
        else:
            raise AssertionError("a status event without its request_id passed")
