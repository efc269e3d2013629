"""A client generated from the served document with openapi-python-client calls every
operation and parses every real answer, with an owner key and a read_only key.

The client is generated offline into a temp dir from `GET /v1/openapi.json` of an in-process
node (every success body is its route's declared class, held by mypy), imported, and driven through an httpx ASGI transport: no socket, no server process.

For each operation and key: the answer's status is the documented success (the read_only
key: 403 where its role lacks the operation's `x-permission`), the client parses it
(`raise_on_unexpected_status`: an undocumented status fails), success bodies parse into the
documented class, and no parsed object holds a field its class does not know
(`additional_properties` empty, maps aside). `GET /v1/events` never ends for a live
project, so it is called with an unknown `X-Service-Project` and parses the documented 404.
"""

from __future__ import annotations

import base64
import enum
import importlib
import io
import json
import sys
import types
import typing
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from service.roles import PERMISSIONS
from waiting import wait_until

pytestmark = pytest.mark.slow

PACKAGE = "genservice_client"
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
                       "AAAABJRU5ErkJggg==")
FINAL = ("completed", "failed", "nsfw", "canceled")
# Ops that remove what later calls read: the owner runs them last.
LAST = ("revoke_key", "delete_webhook", "archive_project")


async def _generate(doc: dict, where: Path) -> types.ModuleType:
    (where / "openapi.json").write_text(json.dumps(doc))
    (where / "config.yaml").write_text(f"package_name_override: {PACKAGE}\npost_hooks: []\n")
    out = where / PACKAGE
    done = await trio.run_process(
        [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(where / "openapi.json"),
         "--output-path", str(out), "--meta", "none", "--config", str(where / "config.yaml")],
        capture_stdout=True, capture_stderr=True, check=False)
    text = (done.stdout + done.stderr).decode()
    assert done.returncode == 0, text
    assert "Warning" not in text, text  # nothing of the document was skipped
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where))


def _drop_package() -> None:
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def _arg(tp, value, unset):
    """`value` as the generated signature wants it (an enum member, a model from a dict)."""
    if value is None or isinstance(value, (bytes, io.IOBase)):
        return value
    options = [a for a in typing.get_args(tp) if a is not type(unset) and a is not type(None)] or [tp]
    for option in options:
        if isinstance(option, type) and issubclass(option, enum.Enum):
            return option(value)
        if isinstance(option, type) and hasattr(option, "from_dict") and isinstance(value, dict):
            return option.from_dict(value)
        if isinstance(option, type) and isinstance(value, option):
            return value
    if any(getattr(o, "__name__", "") == "UUID" for o in options):
        import uuid

        return uuid.UUID(value)
    return value


def _unknown_fields(obj, where: str = "$") -> list[str]:
    """Fields the client's classes did not know, anywhere in a parsed answer (maps aside)."""
    found: list[str] = []
    if attrs.has(type(obj)):
        declared = [f.name for f in attrs.fields(type(obj)) if f.name != "additional_properties"]
        extra = getattr(obj, "additional_properties", {})
        if declared and extra:
            found.append(f"{where} ({type(obj).__name__}): {sorted(extra)}")
        for name in declared:
            found += _unknown_fields(getattr(obj, name), f"{where}.{name}")
        if not declared:
            for k, v in extra.items():
                found += _unknown_fields(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            found += _unknown_fields(item, f"{where}[{i}]")
    return found


class Driver:
    def __init__(self, pkg, doc: dict, app) -> None:
        self.pkg, self.app = pkg, app
        self.ops = {op["operationId"]: (method.upper(), path, op)
                    for path, ops in doc["paths"].items() for method, op in ops.items()}
        self.called: dict[str, set[int]] = {}

    def client(self, key: str):
        return self.pkg.AuthenticatedClient(
            base_url="http://testserver", token=key, raise_on_unexpected_status=True,
            httpx_args={"transport": httpx.ASGITransport(app=self.app)})

    async def call(self, client, op_id: str, expect: int, **kw):
        """Call one operation; return the parsed answer after checking status and parse."""
        mod = importlib.import_module(f"{PACKAGE}.api.default.{op_id}")
        unset = importlib.import_module(f"{PACKAGE}.types").UNSET
        hints = typing.get_type_hints(mod.asyncio_detailed)
        args = {name: _arg(hints[name], value, unset) for name, value in kw.items()}
        resp = await mod.asyncio_detailed(client=client, **args)
        where = f"{op_id} as {client.token[:12]}"
        assert resp.status_code == expect, (where, resp.status_code, resp.content[:500])
        self.called.setdefault(op_id, set()).add(resp.status_code)
        documented = self.ops[op_id][2]["responses"][str(expect)]
        content = documented.get("content", {})
        if "application/json" in content:
            assert resp.parsed is not None, where
            assert _unknown_fields(resp.parsed) == [], where
            schema = content["application/json"]["schema"]
            name = schema.get("$ref", "").rsplit("/", 1)[-1]
            if name:
                assert type(resp.parsed).__name__ == name, (where, type(resp.parsed).__name__)
            else:  # an inline envelope: the client's parse keeps every field of the body
                assert resp.parsed.to_dict().keys() == json.loads(resp.content).keys(), where
        return resp.parsed


async def _poll(drv, client, op_id: str, done, **kw):
    async def finished():
        parsed = await drv.call(client, op_id, 200, **kw)
        return parsed if done(parsed) else None

    return await wait_until(finished, 60, every=0.02)


def _plan() -> list[tuple[str, dict]]:
    """Every operation once; `@name` stands for the id of what the owner created (`ids`)."""
    return [
        ("capabilities", {}), ("models", {}),
        ("estimate_route", {"body": {"capability": "image.generate", "resolution": "1k"}}),
        ("submit_capability", {"capability": "image.generate", "body": {"prompt": "A fox", "aspect_ratio": "1:1"},
                               "idempotency_key": "client-test-1"}),
        ("submit_model", {"model": "proc-image", "body": {"prompt": "A lighthouse"}}),
        ("submit_model", {"model": "proc-image", "body": {"prompt": "A harbour"}, "prefer": "wait=30",
                          "expect": 200}),
        ("request_status", {"job_id": "@job"}), ("list_requests", {"limit": 10}),
        ("cancel_request", {"job_id": "@job"}), ("job_events", {"job_id": "@job"}),
        ("list_assets", {}), ("get_asset", {"asset_id": "@asset"}),
        ("asset_content", {"asset_id": "@asset"}), ("asset_url", {"asset_id": "@asset"}),
        ("upload", {"body": "png"}),
        ("list_products", {"category": "video"}), ("get_product", {"slug": "text-to-clip"}),
        ("estimate_product", {"slug": "text-to-clip", "body": {"inputs": {"prompt": "A fox at dawn"}}}),
        ("start_run", {"slug": "text-to-clip", "body": {"inputs": {"prompt": "A fox at dawn"}}}),
        ("list_runs", {}), ("get_run", {"run_id": "@run"}), ("cancel_run", {"run_id": "@run"}),
        ("run_events", {"run_id": "@run"}),
        ("runs_feed", {"limit": 50}), ("project_events", {"x_service_project": "no-such-project"}),
        ("list_projects", {}), ("create_project", {"body": {"name": "Client test"}}),
        ("get_project", {"project_id": "@project"}),
        ("update_project", {"project_id": "@project", "body": {"description": "updated"}}),
        ("get_balance", {}), ("get_ledger", {"limit": 10}), ("get_holds", {"status": "captured"}),
        ("get_usage", {}), ("get_settings", {}), ("put_settings", {"body": {"low_balance_threshold": "25.00"}}),
        ("get_quote", {}), ("create_topup", {"body": {"credits": 500}}), ("list_topups", {}),
        ("get_topup", {"topup_id": "@topup"}),
        ("list_keys", {}), ("create_key", {"body": {"name": "CI"}}), ("get_key", {"key_id": "@key"}),
        ("update_key", {"key_id": "@key", "body": {"name": "CI 2"}}),
        ("list_roles", {}), ("get_role", {"role_id": "@role"}), ("role_users", {"role_id": "@role"}),
        ("list_events", {}), ("create_webhook", {"body": {"url": "https://127.0.0.1:9/hooks/a",
                                                          "events": ["api_key.created"]}}),
        ("list_webhooks", {}), ("get_webhook", {"webhook_id": "@webhook"}),
        ("update_webhook", {"webhook_id": "@webhook", "body": {"description": "ops"}}),
        ("list_deliveries", {"webhook_id": "@webhook"}), ("test_webhook", {"webhook_id": "@webhook"}),
        ("open_ticket", {"body": {"subject_line": "Uploads", "body": "A question.", "type": "question",
                                  "priority": "P3"}}),
        ("list_tickets", {}), ("get_ticket", {"ticket_id": "@ticket"}),
        ("reply", {"ticket_id": "@ticket", "body": {"body": "More detail."}}),
        ("revoke_key", {"key_id": "@key"}), ("delete_webhook", {"webhook_id": "@webhook"}),
        ("archive_project", {"project_id": "@project"}),
    ]


def _success(drv, op_id: str) -> int:
    return int(next(s for s in drv.ops[op_id][2]["responses"] if s[0] in "23"))


async def _run_plan(drv, client, ids: dict, ops: list[tuple[str, dict]], allowed) -> None:
    pkg = drv.pkg
    for op_id, kw in ops:
        kw = {k: ids[v[1:]] if isinstance(v, str) and v.startswith("@") else v for k, v in kw.items()}
        if kw.get("body") == "png":
            File = importlib.import_module(f"{PACKAGE}.types").File
            kw = {"body": pkg.models.UploadBody(file=File(payload=io.BytesIO(PNG), file_name="a.png",
                                                         mime_type="image/png"))}
        permitted = allowed(drv.ops[op_id][2].get("x-permission"))
        # a submit's 200 comes only with `Prefer: wait`: its plain answer is the 202
        success = kw.pop("expect", 202 if op_id.startswith("submit_") else None) or _success(drv, op_id)
        expect = 404 if op_id == "project_events" else success if permitted else 403
        parsed = await drv.call(client, op_id, expect, **kw)
        if expect >= 300:
            continue
        # remember what the owner created, for the calls that name it
        if op_id == "submit_model" and expect == 200:  # waited: the final status, parsed
            assert parsed.status == "completed" and len(parsed.outputs) == 1, parsed
        if op_id == "submit_capability":
            ids["job"] = str(parsed.request_id)
            status = await _poll(drv, client, "request_status", lambda s: s.status in FINAL, job_id=ids["job"])
            assert status.status == "completed"
            ids["asset"] = str(status.outputs[0].id)
        elif op_id == "start_run":
            ids["run"] = str(parsed.data.id)
            await _poll(drv, client, "get_run", lambda r: r.data.status in FINAL, run_id=ids["run"])
        elif op_id in ("create_project", "create_key", "open_ticket"):
            ids[{"create_project": "project", "create_key": "key", "open_ticket": "ticket"}[op_id]] = \
                str(parsed.data.id)
        elif op_id == "create_topup":
            ids["topup"] = str(parsed.data.topup.id)
        elif op_id == "create_webhook":
            ids["webhook"] = str(parsed.webhook.id)
        elif op_id == "runs_feed":
            kinds = {type(i).__name__ for i in parsed.data.items}
            assert kinds == {"FeedJob", "FeedRun"}, kinds


async def test_generated_client_calls_every_operation(node, tmp_path):
    doc = await (await node.client.get("/v1/openapi.json")).get_json()
    org = await node.create_org()
    reader = await node.add_member(org["organization_id"], "read_only")
    _drop_package()
    pkg = await _generate(doc, tmp_path)
    try:
        drv = Driver(pkg, doc, node.app)
        roles = await (await node.call("GET", "/v1/roles", org["api_key"])).get_json()
        ids = {"role": next(r["id"] for r in roles["data"] if r["name"] == "read_only")}
        owner, read_only = drv.client(org["api_key"]), drv.client(reader["api_key"])
        plan = _plan()
        await _run_plan(drv, owner, ids, [(op, kw) for op, kw in plan if op not in LAST], lambda perm: True)
        read_perms = set(PERMISSIONS["read_only"])
        await _run_plan(drv, read_only, ids, plan, lambda perm: perm is None or perm in read_perms)
        await _run_plan(drv, owner, ids, [(op, kw) for op, kw in plan if op in LAST], lambda perm: True)
        assert set(drv.called) == set(drv.ops), sorted(set(drv.ops) - set(drv.called))
        # open enums: a status this client has never heard of still parses
        status = (await (await node.call("GET", f"/v1/generation/requests/{ids['job']}/status",
                                         org["api_key"])).get_json())
        parsed = pkg.models.JobStatus.from_dict({**status, "status": "a-status-added-later"})
        assert parsed.status == "a-status-added-later"
        run = (await (await node.call("GET", f"/v1/workflows/runs/{ids['run']}", org["api_key"])).get_json())["data"]
        feed_run = pkg.models.FeedRun.from_dict({**run, "type": "run", "source": "workflow", "status": "paused"})
        assert feed_run.status == "paused"
        assert len(drv.ops) >= 56
    finally:
        _drop_package()
