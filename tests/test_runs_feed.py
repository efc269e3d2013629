"""`GET /v1/runs`: standalone jobs and product runs merged newest first, step jobs only inside
their run, the `source` filter, `total`, and cursor paging (spec "Products and runs")."""

from __future__ import annotations

import base64
import json

import pytest
from conftest import j, wait_for_run

from service.catalog.request import SubmitRequest

FINAL = ("completed", "failed", "canceled")


async def feed(node, key, query="", headers=None, status=200):
    r = await node.call("GET", "/v1/runs" + query, key, headers=headers)
    assert r.status_code == status, await r.get_data(as_text=True)
    body = await j(r)
    return body["data"] if status == 200 else body


async def pages(node, key, limit, source=None) -> list[dict]:
    """Every page, following next_cursor until it is null."""
    out, cursor = [], None
    for _ in range(50):
        q = f"?limit={limit}" + (f"&source={source}" if source else "") + (f"&cursor={cursor}" if cursor else "")
        page = await feed(node, key, q)
        out.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return out
    raise AssertionError("no end")


async def api_job(node, key, prompt="a cat") -> str:
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", key, json={"prompt": prompt})
    assert r.status_code == 202, await r.get_data(as_text=True)
    return (await j(r))["request_id"]


async def studio_job(node, org) -> str:
    gen = node.parts.generation
    plan = gen.plan(org["organization_id"], org["default_project_id"], capability="image.generate",
                    request=SubmitRequest(prompt="a studio cat"))
    resp = await gen.submit(plan, org_id=org["organization_id"], project_id=org["default_project_id"],
                            source="studio")
    return resp["request_id"]


async def failing_run(node, key) -> str:
    r = await node.call("POST", "/v1/workflows/products/text-to-clip/runs", key,
                        json={"inputs": {"prompt": "x [[fail:internal]]"}})
    assert r.status_code == 202
    run_id = (await j(r))["data"]["id"]
    await wait_for_run(node, key, run_id, lambda run: run["status"] in FINAL, 30)
    return run_id


@pytest.fixture
async def mixed(node):
    """4 api jobs, 2 studio jobs and 3 product runs (each with a step job) in the default
    project, interleaved; plus a job in another project. Returns (org, rows newest first)."""
    org = await node.create_org()
    key = org["api_key"]
    made: list[tuple[str, str]] = []
    made.append(("job", await api_job(node, key)))
    made.append(("run", await failing_run(node, key)))
    made.append(("job", await studio_job(node, org)))
    made.append(("job", await api_job(node, key)))
    made.append(("run", await failing_run(node, key)))
    made.append(("job", await api_job(node, key)))
    made.append(("job", await studio_job(node, org)))
    made.append(("run", await failing_run(node, key)))
    made.append(("job", await api_job(node, key)))
    r = await node.call("POST", "/v1/projects", key, json={"name": "Side"})
    side = (await j(r))["data"]
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", key,
                        json={"prompt": "elsewhere", "project_id": side["id"]})
    assert r.status_code == 202
    org["side"] = side
    return org, list(reversed(made))


async def test_merged_newest_first_without_step_jobs(node, mixed):
    org, rows = mixed
    key = org["api_key"]
    page = await feed(node, key)
    assert page["total"] == 9 and page["next_cursor"] is None
    assert [(x["type"], x["id"]) for x in page["items"]] == rows
    stamps = [x["created_at"] for x in page["items"]]
    assert stamps == sorted(stamps, reverse=True)
    # step jobs of runs are not rows: they are inside their run
    step_jobs = {s["request_id"] for x in page["items"] if x["type"] == "run" for s in x["steps"]
                 if s["request_id"]}
    assert len(step_jobs) == 3 and not step_jobs & {x["id"] for x in page["items"]}
    job = next(x for x in page["items"] if x["type"] == "job")
    assert (job["id"], job["request_id"], job["source"], job["status_url"]) == (
        job["request_id"], job["id"], "api", f"http://testserver/v1/generation/requests/{job['id']}/status")
    run = next(x for x in page["items"] if x["type"] == "run")
    assert (run["source"], run["status"], run["product"]) == ("workflow", "failed", "text-to-clip")
    r = await node.call("GET", f"/v1/workflows/runs/{run['id']}", key)
    assert {k: v for k, v in run.items() if k not in ("type", "source")} == (await j(r))["data"]
    # the other project: its own rows only, chosen by id, slug or header
    for q, h in ((f"?project={org['side']['id']}", None), ("?project=side", None), ("", {"X-Service-Project": "side"})):
        other = await feed(node, key, q, headers=h)
        assert other["total"] == 1 and other["items"][0]["type"] == "job"
    await feed(node, key, "?project=nowhere", status=404)


async def test_source_filter_and_total(node, mixed):
    org, rows = mixed
    key = org["api_key"]
    runs = await feed(node, key, "?source=workflow")
    assert (runs["total"], [x["id"] for x in runs["items"]]) == (3, [i for t, i in rows if t == "run"])
    api = await feed(node, key, "?source=api")
    assert api["total"] == 4 and {x["source"] for x in api["items"]} == {"api"}
    studio = await feed(node, key, "?source=studio")
    assert studio["total"] == 2 and {x["source"] for x in studio["items"]} == {"studio"}
    assert [x["type"] for x in api["items"] + studio["items"]] == ["job"] * 6
    body = await feed(node, key, "?source=batch", status=400)
    assert body["error"]["code"] == "request.bad_request"


async def test_cursor_paging_over_three_pages(node, mixed):
    org, rows = mixed
    key = org["api_key"]
    got = await pages(node, key, 4)
    assert [len(p["items"]) for p in got] == [4, 4, 1]
    assert [p["total"] for p in got] == [9, 9, 9]
    assert [p["next_cursor"] is None for p in got] == [False, False, True]
    assert [(x["type"], x["id"]) for p in got for x in p["items"]] == rows


async def test_an_exactly_full_last_page_sets_the_cursor_and_the_next_page_is_empty(node, mixed):
    org, rows = mixed
    key = org["api_key"]
    got = await pages(node, key, 3)
    assert [len(p["items"]) for p in got] == [3, 3, 3, 0]
    assert [p["next_cursor"] is None for p in got] == [False, False, False, True]
    assert [(x["type"], x["id"]) for p in got for x in p["items"]] == rows
    assert got[-1] == {"items": [], "total": 9, "next_cursor": None}
    # with a filter: 3 runs, limit 3 -> a full page, then an empty one
    got = await pages(node, key, 3, source="workflow")
    assert [len(p["items"]) for p in got] == [3, 0]
    # 2 studio jobs, limit 1 -> three pages
    got = await pages(node, key, 1, source="studio")
    assert [len(p["items"]) for p in got] == [1, 1, 0]


async def test_paging_is_stable_while_rows_arrive(node, mixed):
    org, rows = mixed
    key = org["api_key"]
    first = await feed(node, key, "?limit=5")
    newer = await api_job(node, key, "a newer cat")
    second = await feed(node, key, f"?limit=5&cursor={first['next_cursor']}")
    assert [(x["type"], x["id"]) for x in first["items"] + second["items"]] == rows
    assert second["total"] == 10 and second["next_cursor"] is None
    assert (await feed(node, key, "?limit=1"))["items"][0]["id"] == newer


async def test_limit_is_clamped(node, mixed):
    org, rows = mixed
    key = org["api_key"]
    one = await feed(node, key, "?limit=0")
    assert len(one["items"]) == 1 and one["next_cursor"] is not None
    one = await feed(node, key, "?limit=-5")
    assert len(one["items"]) == 1
    assert len((await feed(node, key, "?limit=100000"))["items"]) == 9
    body = await feed(node, key, "?limit=ten", status=400)
    assert body["error"]["code"] == "request.bad_request"


def _tamper(cursor: str) -> str:
    version, payload, sig = cursor.split(".")
    pos = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    pos[0] = "2000-01-01T00:00:00.000000Z"
    forged = base64.urlsafe_b64encode(json.dumps(pos, separators=(",", ":")).encode()).rstrip(b"=").decode()
    return f"{version}.{forged}.{sig}"


async def test_a_cursor_the_endpoint_did_not_produce_is_422(node, mixed):
    org, _ = mixed
    key = org["api_key"]
    good = (await feed(node, key, "?limit=2"))["next_cursor"]
    assert good.startswith("c1.")
    bad = [
        "garbage", "", "c1..", "c1.e30.AAAA", good + "x", good.replace("c1.", "c2.", 1), _tamper(good),
        good[:-2] + ("AA" if good[-2:] != "AA" else "BB"),
        base64.urlsafe_b64encode(b'["2026-01-01T00:00:00Z","job","x"]').decode(),
        "c1." + "A" * 700 + ".AAAA",
    ]
    for cursor in bad:
        body = await feed(node, key, "?cursor=" + cursor, status=422)
        assert body["error"]["code"] == "request.validation_failed"
        assert body["error"]["message"] == "Invalid cursor"
    # a good cursor keeps working (it is a position, not a session)
    assert len((await feed(node, key, f"?limit=2&cursor={good}"))["items"]) == 2
