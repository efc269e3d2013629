"""The media check (service/media/isolated.py) when no worker can start. `serve` runs `warm`
in the node's actors nursery, so an error raised there ended the node at its start: it is
logged instead. A check then answers 503, not a 500 nor a good file called unreadable."""

from __future__ import annotations

import errno
import functools
import os

import trio_parallel
from conftest import err
from test_generation_support import asset_files, leftovers, upload, upload_ok
from test_media_samples import image_bytes
from trio_parallel import _proc

from service.media import isolated


def _records(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "service.media"]


async def test_a_worker_that_dies_as_it_starts_does_not_end_the_warm_up(caplog):
    async with trio_parallel.cache_scope(init=functools.partial(os._exit, 3)):
        await isolated.warm()
    assert _records(caplog) == ["the media check's first worker did not start (exit code 3)"]


async def test_a_worker_that_cannot_be_made_does_not_end_the_warm_up(tmp_path, caplog, monkeypatch):
    async def no_process(self):
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    with monkeypatch.context() as m:
        m.setattr(_proc.SpawnProcWorker, "start", no_process)
        async with trio_parallel.cache_scope():
            await isolated.warm()
    assert _records(caplog) == [
        "the media check's first worker did not start ([Errno 11] Resource temporarily unavailable)"]
    good = tmp_path / "good.png"  # workers start again once they can
    good.write_bytes(image_bytes("PNG", 40, 30))
    assert (await isolated.check_file(good, None)).width == 40


NO_CHECK = "The file could not be checked now (the node could not start its media check); retry later."


async def test_an_upload_when_no_worker_starts_is_a_503_not_a_refusal_of_the_file(node, org, tmp_path, monkeypatch,
                                                                                   caplog):
    """A worker that exits by itself (not by a signal, as a decoder's crash ends it) did not
    die on the file: the good file is not called unreadable. One that cannot be made at all
    is not a 500. Nothing is left in tmp/, no asset is made, and the next upload passes."""
    key = org["api_key"]
    png = image_bytes("PNG", 64, 48)

    async def no_process(self):
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    async def refused_upload():
        r = await upload(node, key, png, ctype="image/png")
        assert (r.status_code, err(await r.get_json())) == (
            503, {"code": "request.service_unavailable", "message": NO_CHECK})
        assert leftovers(tmp_path) == [] and asset_files(tmp_path) == []

    async with trio_parallel.cache_scope(init=functools.partial(os._exit, 3)):
        await refused_upload()
    with monkeypatch.context() as m:
        m.setattr(_proc.SpawnProcWorker, "start", no_process)
        async with trio_parallel.cache_scope():
            await refused_upload()
    assert node.store.one("SELECT COUNT(*) AS n FROM assets")["n"] == 0
    assert _records(caplog) == [
        "the media check's worker ended by itself (exit code 3): the file is not checked",
        "the media check could not run ([Errno 11] Resource temporarily unavailable): the file is not checked"]
    assert (await upload_ok(node, key, png, ctype="image/png"))["width"] == 64
