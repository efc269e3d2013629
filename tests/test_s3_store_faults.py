"""The object store's faults and its bucket's neighbours: a put the store refuses (boto3
wraps the store's answer in its own S3UploadFailedError, not a botocore error) answers as a
store that is down (503), never 500; the start-up sweep deletes only its own layout's
objects; a thumbnail leaves no local copy of its source."""

from __future__ import annotations

from conftest import err
from s3_server import client, own_s3, s3, s3_session  # noqa: F401 - fixtures
from test_asset_store import STORE_DOWN, objects, store_settings
from test_generation_support import leftovers, running_node, submit, upload, upload_ok, wait_status
from test_media_samples import image_bytes


async def test_a_put_the_store_refuses_is_503_and_leaves_nothing(s3, tmp_path):
    settings = store_settings(s3)
    bucket = settings["asset_store"].removeprefix("s3://").split("/")[0]
    async with running_node(tmp_path, **settings) as n:
        org = await n.create_org()
        await upload_ok(n, org["api_key"], image_bytes("PNG", 8, 8))
        # the bucket goes away behind the node's back: HEAD says 404, the PUT says NoSuchBucket
        c = client(s3.endpoint)
        for k in objects(s3, settings):
            c.delete_object(Bucket=bucket, Key=k)
        c.delete_bucket(Bucket=bucket)
        r = await upload(n, org["api_key"], image_bytes("PNG", 9, 9))
        assert r.status_code == 503
        assert err(await r.get_json()) == {"code": "request.service_unavailable", "message": STORE_DOWN}
        assert n.store.one("SELECT COUNT(*) AS n FROM assets")["n"] == 1
        assert leftovers(tmp_path) == []


async def test_the_start_sweep_deletes_only_objects_of_its_own_layout(s3, tmp_path):
    """A store set to a whole bucket (`s3://BUCKET`) shares it with whatever else is there:
    another node's prefix, an operator's copies. The sweep may delete only `ab/cd/<sha>`."""
    from service.assets.s3 import S3Store

    bucket = s3.bucket()
    store = S3Store(tmp_path, f"s3://{bucket}", s3.endpoint)
    own, other, copy = "b" * 64, "c" * 64, "d" * 64
    keys = [f"bb/bb/{own}", f"node2/cc/cc/{other}", f"backups/{copy}", f"ee/ee/{'e' * 63}x"]
    for k in keys:
        store.client.put_object(Bucket=bucket, Key=k, Body=b"x")
    assert store.remove_unreferenced(set()) == 1
    listed = store.client.list_objects_v2(Bucket=bucket)["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(keys[1:])


async def test_a_thumbnail_leaves_no_local_copy_of_its_source(s3, tmp_path):
    """With an object store no asset's bytes stay under DATA_DIR: the source fetched to make
    a thumbnail goes with it (a copy kept per asset until the next start grew without bound)."""
    from test_dashboard_http import logged_in

    settings = store_settings(s3)
    async with running_node(tmp_path, **settings) as n:
        org = await logged_in(n)
        rid = (await submit(n, org["api_key"], {"prompt": "a fox"}))["request_id"]
        status = await wait_status(n, org["api_key"], rid)
        asset = status["outputs"][0]["id"]
        source = n.store.scalar("SELECT sha256 FROM assets WHERE id = ?", [asset])
        r = await n.client.get(f"/studio/thumbs/{asset}")
        assert r.status_code == 200
        left = sorted(p.name for p in (tmp_path / "work").rglob("*") if p.is_file())
        assert source not in left
        assert left == []  # neither the source nor the served thumbnail stays on disk
