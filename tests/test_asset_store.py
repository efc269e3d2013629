"""GENSERVICE_ASSET_STORE=s3://...: uploads and outputs as objects in a real S3-protocol
server (moto's, on loopback; tests/s3_server.py), served by presigned redirects; the store
down at start, mid-upload and mid-output; objects deleted behind the node's back; a restart
with assets in the store; multipart puts; backups that say the assets are not in them."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import trio

from conftest import err, until
from s3_server import client, own_s3, s3, s3_session  # noqa: F401 - fixtures
from service.assets import s3 as s3mod
from service.assets.s3 import S3Store
from service.storage.backup import backup
from test_generation_support import (
    asset_files, balance, leftovers, local, running_node, submit, upload, upload_ok, wait_hold, wait_status,
)
from test_media_samples import image_bytes

INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."
STORE_DOWN = "The asset store is unavailable; try the upload again later."


def store_settings(server, prefix: str = "node1") -> dict:
    return {"asset_store": f"s3://{server.bucket()}/{prefix}", "s3_endpoint_url": server.endpoint,
            "test_mode": True}


def objects(server, settings) -> list[str]:
    bucket = settings["asset_store"].removeprefix("s3://").split("/")[0]
    listed = client(server.endpoint).list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listed.get("Contents", []))


async def fetch_content(node, key: str, asset_id: str) -> httpx.Response:
    """/content -> the node's signed /files link -> the store's presigned URL -> the bytes."""
    r = await node.call("GET", f"/v1/generation/assets/{asset_id}/content", key)
    assert r.status_code == 302
    r = await node.client.get(local(r.headers["Location"]))
    assert r.status_code == 302, await r.get_data(as_text=True)
    url = r.headers["Location"]
    return await trio.to_thread.run_sync(lambda: httpx.get(url))


async def test_upload_is_an_object_and_is_served_from_the_store(s3, tmp_path):
    settings = store_settings(s3)
    png = image_bytes("PNG", 30, 20)
    sha = hashlib.sha256(png).hexdigest()
    async with running_node(tmp_path, **settings) as n:
        org = await n.create_org()
        asset = await upload_ok(n, org["api_key"], png)
        assert objects(s3, settings) == [f"node1/orgs/{org['organization_id']}/{sha[:2]}/{sha[2:4]}/{sha}"]
        assert asset_files(tmp_path) == [] and leftovers(tmp_path) == []
        got = await fetch_content(n, org["api_key"], asset["id"])
        assert got.status_code == 200 and got.content == png
        query = parse_qs(urlsplit(str(got.request.url)).query)
        assert 0 < int(query["X-Amz-Expires"][0]) <= 900
        # the store answers with the asset's type (moto ignores this override; S3 and MinIO apply it)
        assert query["response-content-type"] == ["image/png"]
        assert query["response-content-disposition"] == ["inline"]


async def test_job_output_is_an_object_and_its_input_is_fetched(s3, tmp_path):
    settings = store_settings(s3)
    async with running_node(tmp_path, **settings) as n:
        org = await n.create_org()
        key = org["api_key"]
        rid = (await submit(n, key, {"prompt": "a hill"}))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["status"] == "completed", st
        out = n.store.one("SELECT * FROM assets WHERE job_id = ?", [rid])
        assert any(k.endswith(out["sha256"]) for k in objects(s3, settings))
        assert asset_files(tmp_path) == []
        got = await fetch_content(n, key, out["id"])
        assert hashlib.sha256(got.content).hexdigest() == out["sha256"]
        # a job with an input reads it from the store, into its own scratch (removed after)
        src = await upload_ok(n, key, image_bytes("PNG", 20, 10))
        rid = (await submit(n, key, {"inputs": {"media": [src["id"]]}, "resolution": "2x"},
                            path="/v1/generation/capabilities/media.upscale"))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["status"] == "completed", st
        up = n.store.one("SELECT * FROM assets WHERE job_id = ?", [rid])
        assert (up["width"], up["height"]) == (40, 20)
        assert any(k.endswith(up["sha256"]) for k in objects(s3, settings))
        await until(lambda: list((tmp_path / "work").rglob("*")) == [])  # removed after the final commit


async def test_object_deleted_behind_the_nodes_back_is_a_clear_404(s3, tmp_path):
    settings = store_settings(s3)
    async with running_node(tmp_path, **settings) as n:
        org = await n.create_org()
        asset = await upload_ok(n, org["api_key"], image_bytes("PNG", 12, 12))
        bucket = settings["asset_store"].removeprefix("s3://").split("/")[0]
        for k in objects(s3, settings):
            client(s3.endpoint).delete_object(Bucket=bucket, Key=k)
        r = await n.call("GET", f"/v1/generation/assets/{asset['id']}/content", org["api_key"])
        r = await n.client.get(local(r.headers["Location"]))
        assert r.status_code == 404
        assert err(await r.get_json()) == {"code": "request.not_found",
                                           "message": "The asset's bytes are no longer in the asset store."}


async def test_restart_serves_stored_assets_and_drops_unnamed_objects(s3, tmp_path):
    settings = store_settings(s3)
    png = image_bytes("PNG", 16, 16)
    async with running_node(tmp_path, **settings) as n1:
        org = await n1.create_org()
        asset = await upload_ok(n1, org["api_key"], png)
        # a stop between the put and the row's commit leaves an object no row names
        stray = tmp_path / "stray"
        stray.write_bytes(b"stray bytes")
        n1.parts.generation.files.place(stray, hashlib.sha256(b"stray bytes").hexdigest())
        assert len(objects(s3, settings)) == 2
    async with running_node(tmp_path, **settings) as n2:
        assert len(objects(s3, settings)) == 1
        got = await fetch_content(n2, org["api_key"], asset["id"])
        assert got.content == png


async def test_store_down_at_start_the_node_serves_and_uploads_answer_503(own_s3, tmp_path):
    settings = store_settings(own_s3)
    own_s3.stop()
    async with running_node(tmp_path, **settings) as n:
        org = await n.create_org()
        assert (await balance(n, org["api_key"]))["available"] is not None
        r = await upload(n, org["api_key"], image_bytes("PNG", 8, 8))
        assert r.status_code == 503
        assert err(await r.get_json()) == {"code": "request.service_unavailable", "message": STORE_DOWN}
        assert n.store.one("SELECT COUNT(*) AS n FROM assets")["n"] == 0
        assert leftovers(tmp_path) == []


async def test_store_down_mid_upload_answers_503_and_leaves_nothing(own_s3, tmp_path):
    settings = store_settings(own_s3)
    async with running_node(tmp_path, **settings) as n:
        org = await n.create_org()
        first = await upload_ok(n, org["api_key"], image_bytes("PNG", 8, 8))
        own_s3.stop()
        r = await upload(n, org["api_key"], image_bytes("PNG", 9, 9))
        assert r.status_code == 503
        assert err(await r.get_json()) == {"code": "request.service_unavailable", "message": STORE_DOWN}
        assert n.store.one("SELECT COUNT(*) AS n FROM assets")["n"] == 1
        assert leftovers(tmp_path) == [] and asset_files(tmp_path) == []
        # a link to a stored asset while the store is down: 503, not 500
        r = await n.call("GET", f"/v1/generation/assets/{first['id']}/content", org["api_key"])
        r = await n.client.get(local(r.headers["Location"]))
        assert r.status_code == 503
        assert err(await r.get_json()) == {"code": "request.service_unavailable",
                                           "message": "The asset store is unavailable; try again later."}


async def test_store_down_mid_output_fails_the_job_and_releases_its_hold(own_s3, tmp_path):
    settings = store_settings(own_s3)
    async with running_node(tmp_path, **settings) as n:
        org = await n.create_org()
        key = org["api_key"]
        before = await balance(n, key)
        rid = (await submit(n, key, {"prompt": "a hill [[delay:1]]"}))["request_id"]
        await wait_status(n, key, rid, wanted=("rendering",))
        own_s3.stop()
        st = await wait_status(n, key, rid)
        assert st["status"] == "failed" and st["error"] == INCOMPLETE
        await wait_hold(n, key, rid, "released")
        assert (await balance(n, key))["available"] == before["available"]
        assert n.store.one("SELECT COUNT(*) AS n FROM assets WHERE job_id = ?", [rid])["n"] == 0


async def test_large_objects_go_up_in_parts_with_checksums(s3, tmp_path, monkeypatch):
    monkeypatch.setattr(s3mod, "MULTIPART_THRESHOLD", 5 * 1024 * 1024)
    settings = store_settings(s3)
    store = S3Store(tmp_path, settings["asset_store"], s3.endpoint)
    data = bytes(range(256)) * (11 * 1024 * 1024 // 256)
    sha = hashlib.sha256(data).hexdigest()
    src = tmp_path / "big"
    src.write_bytes(data)
    store.place(src, sha)
    assert not src.exists()
    head = store.client.head_object(Bucket=store.bucket, Key=store.key(sha))
    assert head["ETag"].strip('"').endswith("-3") and head["ContentLength"] == len(data)
    assert store.local(sha).read_bytes() == data
    # bytes that do not match their name are refused on the way back
    bad = tmp_path / "bad"
    bad.write_bytes(b"not these bytes")
    store.place(bad, "0" * 64)
    with pytest.raises(s3mod.StoreUnavailable, match="does not match its digest"):
        store.local("0" * 64)


def test_a_store_setting_that_is_not_s3_is_refused():
    with pytest.raises(ValueError, match="asset store must be 'file' or s3://BUCKET/PREFIX"):
        s3mod.parse_store_url("https://bucket/prefix")


async def test_backup_of_a_node_with_a_store_says_assets_are_not_in_it(s3, tmp_path):
    settings = store_settings(s3)
    data = tmp_path / "data"
    async with running_node(data, **settings) as n:
        org = await n.create_org()
        await upload_ok(n, org["api_key"], image_bytes("PNG", 8, 8))
    manifest = backup(data, tmp_path / "b", settings["asset_store"])
    assert manifest["files"] == 0
    assert manifest["assets"] == (f"not included: the 1 asset contents are objects in {settings['asset_store']}; "
                                  "back that store up on its own")
    assert json.loads((tmp_path / "b" / "backup.json").read_text())["assets"] == manifest["assets"]
    assert not (tmp_path / "b" / "assets").exists()


async def test_a_content_file_deleted_behind_the_nodes_back_is_a_clear_404(node, org, tmp_path):
    asset = await upload_ok(node, org["api_key"], image_bytes("PNG", 12, 12))
    node.parts.generation.files.path(asset["sha256"]).unlink()
    r = await node.call("GET", f"/v1/generation/assets/{asset['id']}/content", org["api_key"])
    r = await node.client.get(local(r.headers["Location"]))
    assert r.status_code == 404
    assert err(await r.get_json()) == {"code": "request.not_found",
                                       "message": "The asset's bytes are no longer in the asset store."}


async def test_studio_thumbnails_through_the_store(s3, tmp_path):
    """Studio's thumbnails are made from the object and stored as one; a second view reads
    that object (the node's file root holds no asset bytes)."""
    from test_dashboard_http import logged_in

    settings = store_settings(s3)
    async with running_node(tmp_path, **settings) as n:
        org = await logged_in(n)
        rid = (await submit(n, org["api_key"], {"prompt": "a fox"}))["request_id"]
        status = await wait_status(n, org["api_key"], rid)
        asset = status["outputs"][0]["id"]
        first = await n.client.get(f"/studio/thumbs/{asset}")
        data = await first.get_data()
        assert first.status_code == 200 and first.headers["Content-Type"] == "image/webp" and data[8:12] == b"WEBP"
        thumb = n.store.scalar("SELECT thumb_sha256 FROM thumbnails")
        assert f"node1/{thumb[:2]}/{thumb[2:4]}/{thumb}" in objects(s3, settings)
        again = await n.client.get(f"/studio/thumbs/{asset}")
        assert again.status_code == 200 and await again.get_data() == data
        assert n.store.scalar("SELECT COUNT(*) FROM thumbnails") == 1
        assert asset_files(tmp_path) == []
