"""`GET /metrics` (Prometheus text, its own token) and JSON log lines with the request id."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import start_node, stop_node
from service import logs
from service.logs import REQUEST_ID, JsonFormatter
from test_generation_support import submit, wait_status

TOKEN = "metrics-token-for-tests"


@pytest.fixture
async def mnode(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, metrics_token=TOKEN)
    yield n
    await stop_node(n)


def samples(text: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_need_their_token_and_are_off_without_one(node, mnode):
    r = await node.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 404  # no GENSERVICE_METRICS_TOKEN: no metrics route
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = await mnode.client.get("/metrics", headers=headers)
        assert (r.status_code, await r.get_json()) == (401, {"status": False, "error": "Unauthorized"})


async def test_requests_jobs_holds_backlog_and_streams_are_counted(mnode):
    org = await mnode.create_org()
    key = org["api_key"]
    rid = (await submit(mnode, key, {"prompt": "x [[fail:internal]]"}))["request_id"]
    await wait_status(mnode, key, rid)
    r = await mnode.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    got = samples(await r.get_data(as_text=True))
    submit_route = (("method", "POST"), ("route", "/v1/generation/capabilities/<capability>"), ("status", "202"))
    assert got[("genservice_http_requests_total", submit_route)] == 1
    assert got[("genservice_http_request_seconds_count", submit_route[:2])] == 1
    job = (("capability", "image.generate"), ("model", "proc-image"), ("status", "failed"))
    assert got[("genservice_jobs_total", job)] == 1
    assert got[("genservice_holds_total", (("event", "placed"),))] == 1
    assert got[("genservice_holds_total", (("event", "released"),))] == 1
    assert got[("genservice_render_seconds_count", (("backend", "procedural_image"), ("model", "proc-image")))] == 1
    for table in ("events", "webhook_deliveries", "job_webhooks", "emails"):
        assert ("genservice_outbox_backlog", (("table", table),)) in got
    assert got[("genservice_open_streams", ())] == 0


def test_json_log_lines_carry_the_request_id():
    formatter = JsonFormatter()
    record = logging.LogRecord("service.http", logging.WARNING, __file__, 1, "refused %s", ("x",), None)
    token = REQUEST_ID.set("req-123")
    try:
        line = json.loads(formatter.format(record))
    finally:
        REQUEST_ID.reset(token)
    assert line["level"] == "WARNING" and line["logger"] == "service.http" and line["message"] == "refused x"
    assert line["request_id"] == "req-123" and line["time"].endswith("Z")
    assert "request_id" not in json.loads(formatter.format(record))  # outside a request: none


@pytest.fixture
def restored_logging():
    """logs.configure replaces the root handlers: put them (and the levels it sets) back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    quiet = {name: logging.getLogger(name).level for name in logs.QUIET}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in quiet.items():
        logging.getLogger(name).setLevel(old)


def test_an_outgoing_request_writes_no_line_with_its_url(restored_logging, capfd):
    logs.configure("DEBUG", "plain")
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500))) as c:
        c.get("https://outputs.example/a.png?X-Amz-Signature=sig_0123456789abcdef")
    logging.getLogger("httpx").warning("a warning of httpx's still shows")
    logging.getLogger("service").debug("a line of ours at DEBUG")
    err = capfd.readouterr().err
    assert "sig_0123456789abcdef" not in err and "HTTP Request" not in err
    assert "a warning of httpx's still shows" in err and "a line of ours at DEBUG" in err
