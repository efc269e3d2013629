"""The node key (service/sealing.py): sealed secrets, rotation through the operator API with
deliveries still signed, a rotation stopped half-way finished or dropped at start, and the
upgrade of a database from before sealing (clear secrets and hex key digests) with a scan
that finds neither afterwards."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import stat

import pytest

from conftest import start_node, stop_node
from service.sealing import NodeKey, SealError, key_id
from service.storage.migrate import apply_all
from service.storage.sealed import seal_at_rest
from test_webhooks_receiver import receiver, running_node


def test_seal_open_and_what_a_sealed_text_tells(tmp_path):
    key = NodeKey(tmp_path / "node-key")
    assert stat.S_IMODE((tmp_path / "node-key").stat().st_mode) == 0o600
    sealed = key.seal("whsec_abc")
    assert sealed.startswith(f"v1:{key.current_id}:") and "whsec" not in sealed
    assert key.seal("whsec_abc") != sealed  # a fresh nonce each time
    assert key.open(sealed) == "whsec_abc"
    assert NodeKey(tmp_path / "node-key").open(sealed) == "whsec_abc"  # the same key after a restart
    other = NodeKey(tmp_path / "other-key")
    with pytest.raises(SealError):
        other.open(sealed)
    tampered = sealed[:-6] + ("A" if sealed[-6] != "A" else "B") + sealed[-5:]
    with pytest.raises(SealError):
        key.open(tampered)


@pytest.mark.parametrize("committed", [True, False])
def test_a_rotation_stopped_half_way_is_finished_or_dropped_at_start(tmp_path, committed):
    key = NodeKey(tmp_path / "node-key")
    old_id = key.current_id
    new = key.begin_rotation()  # the new key file is written beside the old one ...
    stored = key.resealer(new)(key.seal("s")) if committed else key.seal("s")
    # ... and the node stops here: before (False) or after (True) the re-seal's commit
    again = NodeKey(tmp_path / "node-key")
    again.settle({stored.split(":")[1]})
    assert not (tmp_path / "node-key.next").exists()
    assert again.current_id == (key_id(new) if committed else old_id)
    assert again.open(stored) == "s"


async def test_rotation_reseals_every_secret_and_deliveries_still_verify(tmp_path):
    async with receiver(tmp_path) as rx:
        async with running_node(tmp_path, rx) as node:
            org = await node.create_org()
            r = await node.call("POST", "/v1/webhooks", org["api_key"],
                                json={"url": rx.url("/ok"), "events": ["api_key.created"]})
            secret = (await r.get_json())["webhook"]["secret"]
            hook_id = (await r.get_json())["webhook"]["id"]
            before = node.store.scalar("SELECT secret FROM webhooks WHERE id = ?", (hook_id,))
            old_key = (tmp_path / "node-key").read_bytes()
            r = await node.op("POST", "/node-key/rotate")
            assert r.status_code == 200
            out = (await r.get_json())["data"]
            assert out["resealed"] == 1 and out["key_id"] == node.parts.node_key.current_id
            after = node.store.scalar("SELECT secret FROM webhooks WHERE id = ?", (hook_id,))
            assert after != before and after.split(":")[1] == out["key_id"]
            assert (tmp_path / "node-key").read_bytes() != old_key
            assert not (tmp_path / "node-key.next").exists()
            r = await node.call("POST", f"/v1/webhooks/{hook_id}/test", org["api_key"])
            assert (await r.get_json())["delivery"]["is_delivered"]
            hit = rx.seen("/ok")[-1]
            expected = "sha256=" + hmac.new(secret.encode(), hit.body, hashlib.sha256).hexdigest()
            assert hit.headers["x-service-signature"] == expected


async def test_rotation_needs_the_operator_token(node):
    r = await node.client.post("/operator/v1/node-key/rotate", headers={"Authorization": "Bearer nope"})
    assert (r.status_code, await r.get_json()) == (401, {"status": False, "error": "Unauthorized"})


async def test_a_database_from_before_sealing_is_upgraded_and_keeps_nothing_in_clear(tmp_path, nursery):
    node = await start_node(nursery, tmp_path, test_mode=True)
    org = await node.create_org()
    key = org["api_key"]
    r = await node.call("POST", "/v1/webhooks", key, json={"url": "https://example.test/h", "events": ["api_key.created"]})
    hook_id = (await r.get_json())["webhook"]["id"]
    await stop_node(node)
    # make it look like the previous release: a clear secret, a hex digest, older migrations
    clear = "whsec_" + "ab" * 32
    db = sqlite3.connect(tmp_path / "genservice.db")
    with db:
        db.execute("UPDATE webhooks SET secret = ? WHERE id = ?", (clear, hook_id))
        db.execute("UPDATE api_keys SET key_hash = ?", (hashlib.sha256(key.encode()).hexdigest(),))
        db.execute("DELETE FROM _sqlite_migrations WHERE name = 'm003_key_digests_as_bytes'")
    db.close()

    apply_all(tmp_path / "genservice.db")  # what `genservice serve` runs first ...
    assert seal_at_rest(tmp_path / "genservice.db", NodeKey(tmp_path / "node-key")) == 1  # ... then this
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("genservice.db*"))
    assert clear.encode() not in raw and clear[6:].encode() not in raw
    assert hashlib.sha256(key.encode()).hexdigest().encode() not in raw
    assert hashlib.sha256(key.encode()).digest() in raw

    node = await start_node(nursery, tmp_path, test_mode=True)
    r = await node.call("GET", "/v1/projects", key)  # the key still authenticates
    assert r.status_code == 200
    stored = node.store.scalar("SELECT secret FROM webhooks WHERE id = ?", (hook_id,))
    assert node.parts.node_key.open(stored) == clear
    await stop_node(node)
