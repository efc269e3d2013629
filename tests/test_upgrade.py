"""Upgrades: a database made by the previous release (tests/fixtures/release-0.1.*, written
by that release's own `genservice serve`: an organization, a member, keys, a webhook, a
completed and a failed job) is migrated forward by this code and served: every key still
authenticates, the jobs and their asset read back, and what this release keeps differently
at rest (key digests as bytes, webhook secrets sealed) is converted, with nothing left in
clear. The fixture's credentials are test data of that fixture only."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from conftest import start_node, stop_node
from service.sealing import NodeKey
from service.storage.migrate import apply_all
from service.storage.sealed import seal_at_rest

FIXTURES = Path(__file__).resolve().parent / "fixtures"


async def test_the_previous_release_database_upgrades_and_serves(tmp_path, nursery):
    shutil.copy(FIXTURES / "release-0.1.db", tmp_path / "genservice.db")
    shutil.copy(FIXTURES / "release-0.1.asset-url-secret", tmp_path / "asset-url-secret")
    shutil.copytree(FIXTURES / "release-0.1-assets", tmp_path / "assets")
    made = json.loads((FIXTURES / "release-0.1.json").read_text())

    apply_all(tmp_path / "genservice.db")  # what `genservice serve` does before anything runs
    assert seal_at_rest(tmp_path / "genservice.db", NodeKey(tmp_path / "node-key")) == 1
    raw = (tmp_path / "genservice.db").read_bytes()
    assert made["webhook_secret"].encode() not in raw
    for key in (made["owner_key"], made["member_key"], made["bound_key"]):
        assert hashlib.sha256(key.encode()).hexdigest().encode() not in raw

    node = await start_node(nursery, tmp_path, test_mode=True)
    owner = made["owner_key"]
    for key in (owner, made["member_key"], made["bound_key"]):
        r = await node.call("GET", "/v1/projects", key)
        assert r.status_code == 200, key[:12]
    r = await node.call("GET", f"/v1/generation/requests/{made['completed_job']}/status", owner)
    status = await r.get_json()
    assert status["status"] == "completed" and status["images"]
    r = await node.call("GET", f"/v1/generation/requests/{made['failed_job']}/status", owner)
    assert (await r.get_json())["status"] == "failed"
    asset = status["images"][0]
    r = await node.call("GET", f"/v1/generation/assets/{asset['id']}/content", owner)
    assert r.status_code == 302
    stored = node.store.scalar("SELECT secret FROM webhooks WHERE id = ?", (made["webhook_id"],))
    assert node.parts.node_key.open(stored) == made["webhook_secret"]
    r = await node.call("GET", "/v1/billing/balance", owner)
    balance = (await r.get_json())["data"]
    assert balance["available"] == "199.00" and balance["held"] == "0.00"
    await stop_node(node)
