"""Reading an asset's bytes through the store (`read_bytes`): an object store's object is
streamed into memory, checked against its digest, at most `limit` bytes kept, nothing left
on the node's disk; Studio's text pane reads an S3-stored text output that way."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from engine_support import engine_node
from peers.openai_images import run_peer
from s3_server import client, own_s3, s3, s3_session  # noqa: F401 - fixtures
from test_asset_store import store_settings
from test_dashboard_http import logged_in
from test_engines_openai import images_catalog
from test_generation_support import submit, wait_status

from service.assets import FileStore, ObjectMissing, StoreUnavailable
from service.assets.s3 import S3Store


def disk_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def placed(store: FileStore, tmp_path: Path, data: bytes) -> str:
    src = tmp_path / "src"
    src.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    store.place(src, sha)
    return sha


async def test_read_bytes_from_an_object_store_is_bounded_checked_and_leaves_nothing(s3, tmp_path):
    store = S3Store(tmp_path / "data", store_settings(s3)["asset_store"], s3.endpoint)
    data = bytes(range(256)) * 4096  # 1 MiB: more than one chunk
    sha = placed(store, tmp_path, data)
    assert store.read_bytes(sha, len(data)) == data
    assert store.read_bytes(sha, 10) == data[:10]
    assert disk_files(tmp_path / "data") == []
    with pytest.raises(ObjectMissing):
        store.read_bytes("f" * 64, 10)
    store.client.put_object(Bucket=store.bucket, Key=store.key("0" * 64), Body=b"not these bytes")
    with pytest.raises(StoreUnavailable, match="does not match its digest"):
        store.read_bytes("0" * 64, 10)  # checked even when only the first bytes are wanted


def test_read_bytes_from_local_files(tmp_path):
    store = FileStore(tmp_path / "data")
    sha = placed(store, tmp_path, b"hello, world")
    assert store.read_bytes(sha, 5) == b"hello"
    with pytest.raises(ObjectMissing):
        store.read_bytes("f" * 64, 10)


async def test_studio_shows_a_text_output_stored_as_an_object(s3, tmp_path):
    settings = {k: v for k, v in store_settings(s3).items() if k != "test_mode"}
    async with run_peer() as peer, engine_node(tmp_path, images_catalog(f"{peer.url}/v1"), **settings) as n:
        org = await logged_in(n)
        rid = (await submit(n, org["api_key"], {"prompt": "tides & moons"},
                            path="/v1/generation/models/peer-chat"))["request_id"]
        st = await wait_status(n, org["api_key"], rid)
        assert st["status"] == "completed" and st["outputs"][0]["content_type"].startswith("text/")
        bucket = settings["asset_store"].removeprefix("s3://").split("/")[0]
        assert client(s3.endpoint).list_objects_v2(Bucket=bucket)["KeyCount"] == 1
        r = await n.client.get(f"/studio/jobs/{rid}")
        body = await r.get_data(as_text=True)
        assert r.status_code == 200
        assert '<pre class="code output-text" aria-label="Output text 1">tides &amp; moons</pre>' in body
        assert disk_files(tmp_path / "node" / "work") == []
