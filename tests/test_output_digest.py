"""An engine's output is hashed as it is written (one worker-thread hop fewer a job): the
digest it carries must be the stored file's, and the render task must read a file again
only when its writer did not hash it."""

from __future__ import annotations

from io import BytesIO

import pytest
from PIL import Image

from service.actors.jobs.render import _hash_outputs
from service.assets.files import hash_file
from service.backends.base import Output, RenderRequest
from service.engines.common import store_output, store_text


def request(tmp_path, capability: str = "image.generate") -> RenderRequest:
    return RenderRequest(job_id="j1", capability=capability, model="m", backend="cog", prompt="a fox", seed=7,
                         aspect_ratio=None, resolution="1k", duration=None, inputs={}, work_dir=tmp_path / "work",
                         test_mode=True)


def png() -> bytes:
    buf = BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.trio
async def test_a_stored_image_carries_the_digest_of_its_file(tmp_path):
    out = await store_output(request(tmp_path), 0, png(), "x.png")
    assert out is not None and out.digest == hash_file(out.path)
    assert _hash_outputs([out]) == [(out, *hash_file(out.path))]


@pytest.mark.trio
async def test_a_stored_text_carries_the_digest_of_its_file(tmp_path):
    out = await store_text(request(tmp_path, "text.llm"), 0, "héllo\nworld")
    assert out.digest == hash_file(out.path)


def test_an_output_without_a_digest_is_read_and_hashed(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"abc")
    out = Output(path, "image/png", "image", 1, 1, None)
    assert _hash_outputs([out]) == [(out, *hash_file(path))]
    path.write_bytes(b"abcd")  # a digest given is trusted: the file is not read again
    given = Output(path, "image/png", "image", 1, 1, None, digest=("0" * 64, 3))
    assert _hash_outputs([given]) == [(given, "0" * 64, 3)]


@pytest.mark.parametrize("leftover", [None, "empty", "files"])
def test_a_jobs_scratch_directory_goes_whatever_it_holds(tmp_path, leftover):
    """`discard_work` removes an empty scratch directory with one rmdir, and still removes
    one an engine left files in (and does nothing for one never made)."""
    from service.assets.files import FileStore

    files = FileStore(tmp_path / "assets")
    work = files.work_dir("j1")
    if leftover is not None:
        work.mkdir(parents=True)
    if leftover == "files":
        (work / "sub").mkdir()
        (work / "sub" / "x.bin").write_bytes(b"x")
        (work / "out-0.png").write_bytes(png())
    files.discard_work("j1")
    assert not work.exists()
