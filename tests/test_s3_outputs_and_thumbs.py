"""Output bytes and thumbnails through the asset store: the OpenAI door's b64 images and
speech read from an object store (there is no local file to read) without leaving a copy on
the node's disk, a served thumbnail leaves none either, and a thumbnail outlives a restart
(the start-up sweep of unreferenced content used to count only asset rows)."""

from __future__ import annotations

import base64
import io
import wave
from pathlib import Path

import pytest
from PIL import Image
from s3_server import client, own_s3, s3, s3_session  # noqa: F401 - fixtures
from test_asset_store import store_settings
from test_dashboard_http import PW, logged_in
from test_generation_support import running_node, submit, wait_status

from service.http.routes import dash_gallery
from tests.pages import csrf, page

pytestmark = pytest.mark.usefixtures("cheap_hashes")


def work_files(data_dir: Path) -> list[str]:
    """Every file under the node's scratch root (`work/`)."""
    return sorted(str(p.relative_to(data_dir)) for p in (data_dir / "work").rglob("*") if p.is_file())


async def login_again(node, email: str = "owner@acme.test") -> None:
    """A session on a restarted node for a person who already exists."""
    _, html = await page(node.client, "/login")
    r = await node.client.post("/login", form={"csrf_token": csrf(html), "email": email, "password": PW})
    assert r.status_code == 303


async def image_output(n, key: str) -> str:
    rid = (await submit(n, key, {"prompt": "a fox"}))["request_id"]
    st = await wait_status(n, key, rid)
    assert st["status"] == "completed", st
    return st["outputs"][0]["id"]


async def test_b64_images_from_an_object_store_leave_no_local_copy(s3, tmp_path):
    async with running_node(tmp_path, **store_settings(s3)) as n:
        org = await n.create_org()
        r = await n.call("POST", "/openai/v1/images/generations", org["api_key"],
                         json={"model": "proc-image", "prompt": "a red fox", "response_format": "b64_json"})
        body = await r.get_json()
        assert r.status_code == 200, body
        [one] = body["data"]
        blob = base64.b64decode(one["b64_json"])
        assert Image.open(io.BytesIO(blob)).format == "PNG"
        sha = n.store.scalar("SELECT sha256 FROM assets WHERE kind = 'image'")
        assert blob == n.parts.generation.files.read_bytes(sha, len(blob) + 1, org["organization_id"])
        assert work_files(tmp_path) == []


async def test_speech_from_an_object_store_leaves_no_local_copy(s3, tmp_path):
    async with running_node(tmp_path, **store_settings(s3)) as n:
        org = await n.create_org()
        r = await n.call("POST", "/openai/v1/audio/speech", org["api_key"],
                         json={"model": "espeak-ng", "input": "Hello there.", "voice": "en-gb",
                               "response_format": "wav"})
        assert r.status_code == 200, await r.get_data(as_text=True)
        with wave.open(io.BytesIO(await r.get_data())) as w:
            assert w.getnframes() > 0
        assert work_files(tmp_path) == []


async def test_a_served_thumbnail_from_an_object_store_leaves_no_local_copy(s3, tmp_path):
    async with running_node(tmp_path, **store_settings(s3)) as n:
        org = await logged_in(n)
        asset = await image_output(n, org["api_key"])
        first = await n.client.get(f"/studio/thumbs/{asset}")  # made, then read back
        again = await n.client.get(f"/studio/thumbs/{asset}")  # read from the store
        assert first.status_code == again.status_code == 200
        assert await first.get_data() == await again.get_data()
        assert work_files(tmp_path) == []


@pytest.mark.parametrize("store", ["file", "s3"])
async def test_a_thumbnail_outlives_a_restart(store, request, tmp_path, monkeypatch):
    settings = store_settings(request.getfixturevalue("s3")) if store == "s3" else {"test_mode": True}
    async with running_node(tmp_path, **settings) as n1:
        org = await logged_in(n1)
        asset = await image_output(n1, org["api_key"])
        r = await n1.client.get(f"/studio/thumbs/{asset}")
        assert r.status_code == 200
        made = await r.get_data()
        thumb = n1.store.scalar("SELECT thumb_sha256 FROM thumbnails")
    async with running_node(tmp_path, **settings) as n2:  # the start-up sweep has run
        assert n2.parts.generation.files.exists(thumb)

        async def remade(*_):
            raise AssertionError("the stored thumbnail was gone: it was made again")

        monkeypatch.setattr(dash_gallery, "make", remade)
        await login_again(n2)
        r = await n2.client.get(f"/studio/thumbs/{asset}")
        assert r.status_code == 200 and await r.get_data() == made
