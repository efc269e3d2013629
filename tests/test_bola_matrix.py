"""Object-level authorization, generated from the app's route table: every /v1 route with an
id in its path, called by organization A with an id of its own, of organization B, and a
nonexistent one. B's answer must be byte-identical to the nonexistent one (but for
`request_id`), A's own id must be found, and B's resource must be left unchanged.
A route whose path parameter kind is not mapped below fails the test.
"""

import io
import re

from PIL import Image

from test_authz_matrix import app_routes, normalize  # noqa: F401
from test_generation_support import submit, upload_ok, wait_status

MISSING = "00000000-0000-4000-8000-00000000dead"
# path parameters that name organization-wide catalogs, not organization resources
GLOBAL = {"capability", "model", "slug", "role_id"}
BODIES = {
    ("PATCH", "project_id"): {"name": "renamed"},
    ("PATCH", "key_id"): {"name": "renamed"},
    ("PATCH", "webhook_id"): {"description": "renamed"},
    ("POST", "ticket_id"): {"body": "hello"},
}


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buf, "PNG")
    return buf.getvalue()


async def resources(node, org) -> dict:
    key = org["api_key"]
    out = {}
    r = await node.call("POST", "/v1/projects", key, json={"name": "Side"})
    out["project_id"] = (await r.get_json())["data"]["id"]
    r = await node.call("POST", "/v1/api-keys", key, json={"name": "extra"})
    out["key_id"] = (await r.get_json())["data"]["id"]
    out["asset_id"] = (await upload_ok(node, key, png()))["id"]
    job = await submit(node, key, {"prompt": "a red fox"})
    await wait_status(node, key, job["request_id"])
    out["job_id"] = job["request_id"]
    r = await node.call("POST", "/v1/workflows/products/text-to-clip/runs", key,
                        json={"inputs": {"prompt": "fox [[fail:internal]]"}})
    assert r.status_code == 202, await r.get_json()
    out["run_id"] = (await r.get_json())["data"]["id"]
    r = await node.call("POST", "/v1/webhooks", key, json={"url": "https://hooks.example/x",
                                                          "events": ["api_key.created"]})
    out["webhook_id"] = (await r.get_json())["webhook"]["id"]
    r = await node.call("POST", "/v1/support/tickets", key, json={"subject_line": "Help", "type": "question",
                                                                "priority": "P3", "body": "hi"})
    out["ticket_id"] = (await r.get_json())["data"]["id"]
    r = await node.call("POST", "/v1/billing/topups", key, json={"credits": 100})
    out["topup_id"] = (await r.get_json())["data"]["topup"]["id"]
    return out


def params(path: str) -> list[str]:
    return re.findall(r"<([a-z_]+)>", path)


def body_of(b: dict) -> dict:
    if isinstance(b.get("error"), dict):
        b["error"].pop("request_id", None)
    return b


async def test_other_organizations_ids_look_nonexistent(node):
    a = await node.create_org("A", "a@a.test")
    b = await node.create_org("B", "b@b.test")
    mine, theirs = await resources(node, a), await resources(node, b)
    before = {k: (await node.call("GET", f"/v1/projects/{theirs['project_id']}", b["api_key"])).status_code
              for k in ("p",)}
    checked = 0
    for (method, path), _ in sorted(app_routes(node.app).items()):
        names = [p for p in params(path) if p not in GLOBAL]
        if not names:
            continue
        for n in names:
            assert n in mine, f"{method} {path}: no resource of kind {n!r} in the BOLA fixtures"
        json = BODIES.get((method, names[-1]))
        kw = {"json": json} if json is not None else {}

        def url(ids):
            return re.sub(r"<([a-z_]+)>", lambda m: ids.get(m.group(1), "x"), path)

        other = await node.call(method, url(theirs), a["api_key"], **kw)
        missing = await node.call(method, url({n: MISSING for n in names}), a["api_key"], **kw)
        assert other.status_code == missing.status_code == 404, (method, path, other.status_code)
        assert body_of(await other.get_json()) == body_of(await missing.get_json()), (method, path)
        if method == "GET":
            own = await node.call(method, url(mine), a["api_key"])
            assert own.status_code in (200, 302), (method, path, own.status_code)
        checked += 1
    assert checked >= 20
    # B's resources were not touched by A's attempts
    r = await node.call("GET", f"/v1/projects/{theirs['project_id']}", b["api_key"])
    assert (await r.get_json())["data"]["name"] == "Side" and before["p"] == 200
    r = await node.call("GET", f"/v1/api-keys/{theirs['key_id']}", b["api_key"])
    assert r.status_code == 200 and (await r.get_json())["data"]["name"] == "extra"
    r = await node.call("GET", f"/v1/webhooks/{theirs['webhook_id']}", b["api_key"])
    assert r.status_code == 200 and (await r.get_json())["webhook"]["description"] is None
