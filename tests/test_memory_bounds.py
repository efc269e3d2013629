"""Memory attacks found from outside, run against an in-process node: six parallel uploads
of a small WebP declaring about 40 megapixels (each decode holds ~600 MB: 3.6 GB at once
before), and an upscale whose output would be 25,200 x 25,200 (4.4 GB before). The node's
peak RSS growth, with its media-check workers' (tests/proc_memory.py), is read from /proc
and must stay under one decode's worth plus a margin."""

from __future__ import annotations

import io
import os

import pytest
import trio
from PIL import Image

from media_bombs import mp3_with_cover, png_mp4, png_zeros
from proc_memory import RssSampler, reset_peaks, status_kib, total_kib
from service.media.inspect import inspect_file
from service.media.video import MSG_NO_SIZE
from test_generation_support import upload, upload_ok
from test_media_samples import image_bytes, write_mp3

pytestmark = pytest.mark.slow

UPSCALE = "/v1/generation/capabilities/media.upscale"
PEAK_BOUND_MB = 1024  # one 40 MP WebP decode peaks at ~610 MB here; six at once took 3.6 GB


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """An ~80 KB WebP of 6316 x 6316 (39.9 MP, just under the upload limit)."""
    buf = io.BytesIO()
    Image.new("RGB", (6316, 6316), (120, 30, 200)).save(buf, "WEBP", quality=10)
    return buf.getvalue()


async def test_parallel_large_uploads_decode_one_at_a_time(node, bomb):
    org = await node.create_org()
    await upload_ok(node, org["api_key"], image_bytes("PNG"))  # a worker up before the baseline
    base = total_kib(os.getpid(), "VmRSS")
    sampler = RssSampler(os.getpid())  # sampled: a large decode's worker ends after it
    results = []

    async def one():
        r = await upload(node, org["api_key"], bomb, "image/webp")
        results.append(r.status_code)

    async with trio.open_nursery() as sampling:
        sampling.start_soon(sampler.run)
        async with trio.open_nursery() as n:
            for _ in range(6):
                n.start_soon(one)
        sampling.cancel_scope.cancel()
    peak_mb = (sampler.max_kib - base) / 1024
    assert results == [201] * 6  # accepted: under the limit, and a real image
    assert 400 < peak_mb < PEAK_BOUND_MB, peak_mb  # one decode's worth at a time, and it was seen


async def test_parallel_png_coded_video_bombs_are_refused_without_decoding(node, tmp_path):
    """Issue 22 (M5): three ~0.4 MB MP4s of one PNG-coded 12,000 x 12,000 frame (0.43 GB
    each once decoded: three at once took 1.2 GB before) are refused from a capped probe."""
    org = await node.create_org()
    data = png_mp4(tmp_path / "bomb.mp4", png_zeros(12000, 12000), (12000, 12000)).read_bytes()
    async with trio.open_nursery() as n:  # the check's workers up (two: one a core) before the baseline
        for _ in range(2):
            n.start_soon(upload_ok, node, org["api_key"], image_bytes("PNG"))
    reset_peaks(os.getpid())
    base = total_kib(os.getpid(), "VmRSS")
    results = []

    async def one():
        r = await upload(node, org["api_key"], data, "video/mp4")
        results.append((r.status_code, (await r.get_json())["error"]["message"]))

    async with trio.open_nursery() as n:
        for _ in range(3):
            n.start_soon(one)
    peak_mb = (total_kib(os.getpid(), "VmHWM") - base) / 1024
    assert results == [(422, MSG_NO_SIZE)] * 3
    assert peak_mb < 128, peak_mb


def test_an_mp3_whose_cover_art_is_a_bomb_is_read_without_decoding_it(tmp_path):
    """FFmpeg probes an MP3's ID3 picture by decoding it: a 12,000 x 12,000 PNG cover
    (0.43 GB decoded; +416 MB peak before) is not decoded, and the audio is still read."""
    mp3 = write_mp3(tmp_path / "tone.mp3", 1.0).read_bytes()
    path = tmp_path / "cover.mp3"
    path.write_bytes(mp3_with_cover(mp3, png_zeros(12000, 12000)))
    reset_peaks(os.getpid())
    base = status_kib(os.getpid(), "VmRSS")
    info = inspect_file(path, "audio/mpeg")
    peak_mb = (status_kib(os.getpid(), "VmHWM") - base) / 1024
    assert (info.kind, info.content_type, info.duration_s) == ("audio", "audio/mpeg", 1.0)
    assert peak_mb < 64, peak_mb


async def test_an_upscale_past_the_models_output_limit_is_refused_before_any_hold(node):
    org = await node.create_org()
    buf = io.BytesIO()
    Image.new("RGB", (2049, 2048), (10, 10, 10)).save(buf, "PNG")
    big = await upload_ok(node, org["api_key"], buf.getvalue())
    r = await node.call("POST", UPSCALE, org["api_key"], json={"inputs": {"media": [big["id"]]}})
    assert r.status_code == 422
    body = await r.get_json()
    body["error"].pop("request_id")
    assert body == {"error": {
        "code": "request.validation_failed",
        "message": "lanczos-upscale output would be 4098x4096 pixels; the limit is 16777216 pixels.",
        "details": {"model": "lanczos-upscale", "asset_id": big["id"], "output_width": 4098,
                    "output_height": 4096, "max_output_pixels": 16777216}}}
    holds = (await (await node.call("GET", "/v1/billing/holds", org["api_key"])).get_json())["data"]
    assert holds == []
    buf = io.BytesIO()
    Image.new("RGB", (2048, 2048), (10, 10, 10)).save(buf, "PNG")
    ok = await upload_ok(node, org["api_key"], buf.getvalue())
    r = await node.call("POST", UPSCALE, org["api_key"], json={"inputs": {"media": [ok["id"]]}})
    assert r.status_code == 202  # exactly at the limit: accepted
