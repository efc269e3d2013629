"""The media check in worker processes (service/media/isolated.py): a worker that dies on a
file refuses that file with its kind's message and the next check runs; a check that never
ends is ended by its bound; a refused output is removed; a large decode retires its worker;
an upload that kills its check is a 422 and the node goes on."""

from __future__ import annotations

import hashlib
import os

import pytest
import trio_parallel

from conftest import err
from media_crash import CRASH, HANG, arm, arm_short
from service.errors import Unprocessable
from service.media import isolated
from service.media.inspect import MSG_NOT_AUDIO, MSG_NOT_IMAGE, MSG_NOT_VIDEO
from test_generation_support import asset_files, leftovers, upload, upload_ok
from test_media_samples import image_bytes, wav_bytes, write_mp4


async def refused(coro) -> Unprocessable:
    with pytest.raises(Unprocessable) as caught:
        await coro
    return caught.value


async def test_a_worker_that_dies_refuses_the_file_by_its_kind_and_the_next_check_runs(tmp_path, caplog):
    png, wav = tmp_path / "a.png", tmp_path / "a.wav"
    png.write_bytes(image_bytes("PNG", 64, 48) + CRASH)
    wav.write_bytes(wav_bytes(0.5) + CRASH)
    mp4 = write_mp4(tmp_path / "a.mp4", [(20, 200, 20)] * 4, size=(32, 32))
    mp4.write_bytes(mp4.read_bytes() + CRASH)
    good = tmp_path / "good.png"
    good.write_bytes(image_bytes("PNG", 40, 30))
    async with trio_parallel.cache_scope(init=arm):
        for path, declared, message in ((png, "image/png", MSG_NOT_IMAGE), (wav, None, MSG_NOT_AUDIO),
                                        (mp4, "video/mp4", MSG_NOT_VIDEO)):
            e = await refused(isolated.check_file(path, declared))
            assert (e.status, e.code, e.message, e.details) == (422, "request.validation_failed", message, None)
            info = await isolated.check_file(good, "image/png")
            assert (info.kind, info.content_type, info.width, info.height) == ("image", "image/png", 40, 30)
    assert [r.getMessage() for r in caplog.records if r.name == "service.media"] == [
        "the media check's worker ended while checking a file (signal 11): the file is refused"] * 3
    # a refusal by the check itself keeps its details through the worker
    (tmp_path / "t.txt").write_bytes(b"hello")
    e = await refused(isolated.check_file(tmp_path / "t.txt", "text/plain"))
    assert e.message == "Unsupported content type 'text/plain'."
    assert e.details == {"allowed": ["image/png", "image/jpeg", "image/webp", "video/mp4", "audio/mpeg", "audio/wav"]}


async def test_the_size_probe_runs_in_a_worker_too(tmp_path, caplog):
    """An upload's size is probed before its check (an MP4's header by FFmpeg): a worker that
    dies there refuses the file by its kind as well; a good file gives its pixels."""
    mp4 = write_mp4(tmp_path / "a.mp4", [(20, 200, 20)] * 4, size=(32, 32))
    png = tmp_path / "a.png"
    png.write_bytes(image_bytes("PNG", 64, 48))
    assert (await isolated.pixels(mp4), await isolated.pixels(png)) == (32 * 32, 64 * 48)
    mp4.write_bytes(mp4.read_bytes() + CRASH)
    async with trio_parallel.cache_scope(init=arm):
        e = await refused(isolated.pixels(mp4))
        assert (e.status, e.code, e.message) == (422, "request.validation_failed", MSG_NOT_VIDEO)
        assert await isolated.pixels(png) == 64 * 48
    assert [r.getMessage() for r in caplog.records if r.name == "service.media"] == [
        "the media check's worker ended while checking a file (signal 11): the file is refused"]


async def test_a_check_that_never_ends_is_ended_by_its_bound_and_refuses_the_file(tmp_path, caplog):
    """The bound is the worker's own alarm in real time, in another process, on purpose: a
    caller's mock clock jumping while the loop idles must never end a check early. So it is
    driven here by a 1 s bound in the test's workers, not by trio's clock."""
    hang, good = tmp_path / "hang.png", tmp_path / "good.png"
    hang.write_bytes(image_bytes("PNG", 64, 48) + HANG)
    good.write_bytes(image_bytes("PNG", 40, 30))
    async with trio_parallel.cache_scope(init=arm_short):  # CHECK_S at 1 s in the worker
        e = await refused(isolated.check_file(hang, "image/png"))
        assert (e.status, e.code, e.message) == (422, "request.validation_failed", MSG_NOT_IMAGE)
        assert (await isolated.check_file(good, None)).width == 40
    assert [r.getMessage() for r in caplog.records if r.name == "service.media"] == [
        "the media check's worker ended while checking a file (signal 14): the file is refused"]
    assert isolated.CHECK_S == 60  # the node's own bound (this process's is never changed)


@pytest.mark.parametrize("size", ["in the call", "written first"])
async def test_write_and_check_keeps_a_good_file_and_removes_a_refused_one(tmp_path, size):
    pad = b"" if size == "in the call" else os.urandom(isolated.IN_CALL_BYTES)
    good = image_bytes("PNG", 64, 48) + pad  # bytes after IEND do not stop Pillow's decode
    assert (len(good) > isolated.IN_CALL_BYTES) == (size == "written first")
    digest, info = await isolated.write_and_check(tmp_path / "job" / "out-0.png", good)
    assert digest == (hashlib.sha256(good).hexdigest(), len(good))
    assert (info.kind, info.width, info.height) == ("image", 64, 48)
    assert (tmp_path / "job" / "out-0.png").read_bytes() == good
    e = await refused(isolated.write_and_check(tmp_path / "job" / "out-1.png", b"\x89PNG\r\n\x1a\n" + pad + b"junk"))
    assert e.message == MSG_NOT_IMAGE
    async with trio_parallel.cache_scope(init=arm):
        e = await refused(isolated.write_and_check(tmp_path / "job" / "out-2.png", good + CRASH))
    assert e.message == MSG_NOT_IMAGE
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["out-0.png"]


async def test_a_large_decode_retires_its_worker(tmp_path):
    small, large = tmp_path / "s.png", tmp_path / "l.png"
    small.write_bytes(image_bytes("PNG", 64, 48))
    large.write_bytes(image_bytes("PNG", 2100, 2000))  # 4.2 megapixels, over LARGE_DECODE
    async with isolated.workers():
        first = await trio_parallel.run_sync(os.getpid)
        await isolated.check_file(small, None)
        assert await trio_parallel.run_sync(os.getpid) == first
        await isolated.check_file(large, None)
        after = await trio_parallel.run_sync(os.getpid)
        assert after != first
        assert await trio_parallel.run_sync(os.getpid) == after


async def test_an_upload_whose_check_kills_its_worker_is_a_422_and_the_node_goes_on(node, org, tmp_path):
    key = org["api_key"]
    async with trio_parallel.cache_scope(init=arm):
        r = await upload(node, key, image_bytes("PNG", 64, 48) + CRASH, ctype="image/png")
        assert r.status_code == 422
        assert err(await r.get_json()) == {"code": "request.validation_failed", "message": MSG_NOT_IMAGE}
        assert leftovers(tmp_path) == [] and asset_files(tmp_path) == []
        assert node.store.one("SELECT COUNT(*) AS n FROM assets")["n"] == 0
        asset = await upload_ok(node, key, image_bytes("PNG", 64, 48), ctype="image/png")
    assert (asset["kind"], asset["width"], asset["height"]) == ("image", 64, 48)
