"""The event streams as the OpenAPI document describes them: real streams of a served
node, each event (`{event, id, data}`, data as JSON) checked by schemathesis against the
document it serves (the "SSE event violates schema" check of a fuzzing run), in 3.1 (each
event as the stream's `schema`) and in 3.2 (`?version=3.2`: each event as `itemSchema`)."""

from __future__ import annotations

import datetime
from urllib.parse import urlsplit

import httpx
import schemathesis
import trio
from openapi_spec_validator import OpenAPIV31SpecValidator, OpenAPIV32SpecValidator

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
        docs = [await (await n.call("GET", path, None)).get_json()
                for path in ("/v1/openapi.json", "/v1/openapi.json?version=3.2")]
        schemas = [schemathesis.openapi.from_dict(doc) for doc in docs]
        rid = (await submit(n, key, {"prompt": "a fox"}))["request_id"]
        await wait_status(n, key, rid)
        job = await _read_events(url, key, f"/v1/generation/requests/{rid}/events", 5)
        assert b"event: status" in job.content
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit, n, key, {"prompt": "another fox"})
            project = await _read_events(url, key, "/v1/events", 3)
        assert b"event: feed" in project.content and b"event: status" in project.content
        broken = read(httpx.Response(200, headers=job.headers, request=job.request,
                                     content=job.content.replace(b'"request_id":', b'"request_id_":', 1)))
        for schema in schemas:
            schema.find_operation_by_id("job_events").validate_response(job)
            schema.find_operation_by_id("project_events").validate_response(project)
            try:
                schema.find_operation_by_id("job_events").validate_response(broken)
            except AssertionError as e:  # schemathesis's failure group
                assert "SSE event violates schema" in str(e) or "request_id" in str(e), e
            else:
                raise AssertionError("a status event without its request_id passed")


STREAMS = ("job_events", "run_events", "project_events")


async def test_the_3_2_document_describes_each_event_as_item_schema(node):
    """`?version=3.2` is the same document with the streams' events as `itemSchema`, valid
    OpenAPI 3.2; the default stays 3.1 (valid 3.1); an unknown version is a 400."""
    r31 = await node.client.get("/v1/openapi.json")
    r32 = await node.client.get("/v1/openapi.json?version=3.2")
    assert (r31.status_code, r32.status_code) == (200, 200)
    doc31, doc32 = await r31.get_json(), await r32.get_json()
    assert doc31["openapi"].startswith("3.1.") and doc32["openapi"] == "3.2.0"
    assert await (await node.client.get("/v1/openapi.json?version=3.1")).get_json() == doc31
    OpenAPIV31SpecValidator(doc31).validate()
    OpenAPIV32SpecValidator(doc32).validate()
    ops31 = {op["operationId"]: op for ops in doc31["paths"].values() for op in ops.values()}
    ops32 = {op["operationId"]: op for ops in doc32["paths"].values() for op in ops.values()}
    assert ops31.keys() == ops32.keys() and doc31["components"] == doc32["components"]
    streamed = sorted(oid for oid, op in ops32.items()
                      if any("text/event-stream" in a.get("content", {}) for a in op["responses"].values()))
    assert streamed == sorted(STREAMS)
    for oid in STREAMS:
        media31 = ops31[oid]["responses"]["200"]["content"]["text/event-stream"]
        media32 = ops32[oid]["responses"]["200"]["content"]["text/event-stream"]
        assert "schema" not in media32 and "itemSchema" not in media31
        item = media32["itemSchema"]
        assert item["type"] == "object" and item["required"] == ["event", "data"]
        assert set(item["properties"]) == {"event", "id", "data", "retry"}
        assert item["allOf"] and all(branch["then"]["properties"]["data"]["contentMediaType"] == "application/json"
                                     for branch in item["allOf"])
        assert item == next(s for s in media31["schema"]["anyOf"] if s.get("type") == "object") | {
            "description": media31["schema"]["description"]}
        ops31[oid]["responses"]["200"]["content"]["text/event-stream"] = media32
    assert {k: v for k, v in doc31.items() if k != "openapi"} == {k: v for k, v in doc32.items() if k != "openapi"}
    bad = await node.client.get("/v1/openapi.json?version=4.0")
    assert bad.status_code == 400
    err = (await bad.get_json())["error"]
    assert (err["code"], err["message"]) == (
        "request.bad_request", "Unknown OpenAPI version '4.0': this node serves 3.1 (the default) and 3.2.")
