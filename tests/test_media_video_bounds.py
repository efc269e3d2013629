"""Video decode bounds (issue 22, M5): a small MP4 of PNG-coded frames decoded to 1.1 GB
at upload, outside the large-decode lock. Now a video's frame size and frame count are read
from its header and bounded before any frame is decoded, every open and decoder is capped
at MAX_FRAME_PIXELS (the header may lie), and a large frame takes a slot of the decode
gate like a large image."""

from __future__ import annotations

from types import SimpleNamespace

import av
import pytest
import trio
from media_bombs import png_mp4, png_zeros
from test_generation_support import upload
from test_media_samples import DISTINCT, write_mp4

from service.errors import Unprocessable
from service.media import video
from service.media.gate import LARGE_DECODE
from service.media.inspect import decode_pixels, inspect_file
from service.media.ops import extract_frame, upscale_video
from service.media.video import (
    MAX_FRAME_PIXELS,
    MAX_PIXEL_FRAMES,
    MSG_NO_COUNT,
    MSG_NO_SIZE,
    FrameCounter,
    VideoHeader,
    read_header,
)
from waiting import wait_until

NO_SIZE = {"code": "request.validation_failed", "message": MSG_NO_SIZE,
           "details": {"max_frame_pixels": MAX_FRAME_PIXELS}}


def refusal(path) -> Unprocessable:
    with pytest.raises(Unprocessable) as exc:
        inspect_file(path, "video/mp4")
    assert (exc.value.status, exc.value.code) == (422, "request.validation_failed")
    return exc.value


@pytest.fixture(scope="module")
def big_png() -> bytes:
    """A 7000 x 7000 PNG (49 MP, over the 40 MP limit) of about 140 KB."""
    return png_zeros(7000, 7000)


async def test_upload_of_a_png_coded_video_with_a_huge_frame_is_refused(node, tmp_path, big_png):
    org = await node.create_org()
    data = png_mp4(tmp_path / "bomb.mp4", big_png, (7000, 7000), frames=3).read_bytes()
    r = await upload(node, org["api_key"], data, "video/mp4")
    body = await r.get_json()
    assert r.status_code == 422
    body["error"].pop("request_id")
    assert body == {"error": NO_SIZE}


def test_a_header_that_understates_the_frame_is_refused_too(tmp_path, big_png):
    """The stream says 64 x 64; the PNG inside says 7000 x 7000: the capped decoder refuses."""
    err = refusal(png_mp4(tmp_path / "liar.mp4", big_png, (64, 64)))
    assert (err.message, err.details) == (MSG_NO_SIZE, {"max_frame_pixels": MAX_FRAME_PIXELS})


def test_an_h264_frame_over_the_limit_is_refused_from_its_header(tmp_path):
    path = write_mp4(tmp_path / "wide.mp4", [(0, 0, 0)], size=(8000, 6000), fps=1)
    err = refusal(path)
    assert err.message == "Video frames are 8000x6000 pixels; the limit is 40000000 pixels a frame."
    assert err.details == {"width": 8000, "height": 6000, "max_frame_pixels": 40000000}


def test_frames_times_pixels_over_the_limit_is_refused(tmp_path):
    """36 MP frames (each under the frame limit) x 278 frames = 1.0008e10 pixels x frames."""
    path = png_mp4(tmp_path / "long.mp4", png_zeros(6000, 6000), (6000, 6000), frames=278, fps=24)
    err = refusal(path)
    assert err.message == ("Video is 278 frames of 6000x6000 pixels; the limit is 10000000000 "
                           "pixels x frames.")
    assert err.details == {"width": 6000, "height": 6000, "frames": 278, "max_pixel_frames": MAX_PIXEL_FRAMES}
    ok = png_mp4(tmp_path / "short.mp4", png_zeros(6000, 6000), (6000, 6000), frames=277, fps=24)
    info = inspect_file(ok, "video/mp4")  # 9.972e9: just under, accepted
    assert (info.width, info.height, info.frames) == (6000, 6000, 277)


def test_a_header_without_a_frame_count_or_rate_is_refused():
    stream = SimpleNamespace(codec_context=SimpleNamespace(width=64, height=48), frames=0, duration=None,
                             time_base=None, average_rate=None, base_rate=None)
    with pytest.raises(Unprocessable) as exc:
        read_header(SimpleNamespace(duration=None), stream)
    assert (exc.value.status, exc.value.message) == (422, MSG_NO_COUNT)
    stream.duration, stream.time_base, stream.average_rate = 20, 0.1, 24  # 2 s at 24 fps, no count
    assert read_header(SimpleNamespace(duration=None), stream).frames == 48


def test_accepted_video_reports_its_frame_count(tmp_path):
    info = inspect_file(write_mp4(tmp_path / "v.mp4", DISTINCT * 2, fps=12), "video/mp4")
    assert (info.width, info.height, info.frames, info.duration_s) == (64, 48, 12, 1.0)


def test_a_pass_stops_past_the_headers_frame_count():
    counter = FrameCounter(VideoHeader(64, 48, 10, 1.0))
    for _ in range(10 + video.FRAME_SLACK):
        counter.tick()
    with pytest.raises(ValueError, match="more frames than its header's 10"):
        counter.tick()


def test_upscale_refuses_a_video_over_the_bounds_before_decoding(tmp_path, big_png):
    with pytest.raises(Unprocessable) as exc:
        upscale_video(png_mp4(tmp_path / "bomb.mp4", big_png, (7000, 7000)), tmp_path / "out.mp4", 2)
    assert exc.value.message == MSG_NO_SIZE
    assert not (tmp_path / "out.mp4").exists()


def test_extract_frame_of_a_bomb_is_refused_by_the_capped_decoder(tmp_path, big_png):
    """A product's frame step decodes without an inspection of its own: the capped open and
    decoder refuse the 49 MP frame (the step fails) instead of allocating it."""
    for header in ((7000, 7000), (64, 64)):
        with pytest.raises(av.error.FFmpegError):
            extract_frame(png_mp4(tmp_path / "bomb.mp4", big_png, header), 0.0, tmp_path / "f.png")
        assert not (tmp_path / "f.png").exists()


def test_decode_pixels_of_a_video_is_one_frame_and_unknown_counts_large(tmp_path, big_png):
    assert decode_pixels(write_mp4(tmp_path / "v.mp4", DISTINCT, size=(96, 64))) == 96 * 64
    # a PNG-coded frame over LARGE_DECODE cannot be sized without decoding it: it counts as large
    mid = png_mp4(tmp_path / "mid.mp4", png_zeros(2500, 2000), (2500, 2000))
    assert decode_pixels(mid) == MAX_FRAME_PIXELS > LARGE_DECODE
    small = png_mp4(tmp_path / "small.mp4", png_zeros(200, 100), (200, 100))
    assert decode_pixels(small) == 200 * 100


async def test_a_large_video_upload_waits_for_the_decode_gate(node, tmp_path):
    """Another organization holds the node's one large-decode slot: the video's inspection
    waits in its organization's queue, and completes once the slot is free."""
    org = await node.create_org()
    gate = node.parts.generation.decodes
    data = png_mp4(tmp_path / "mid.mp4", png_zeros(2500, 2000), (2500, 2000)).read_bytes()
    release = trio.Event()
    statuses = []

    async def holder(task_status=trio.TASK_STATUS_IGNORED):
        async with gate.slot("another-org", LARGE_DECODE + 1):
            task_status.started()
            await release.wait()

    async def one():
        r = await upload(node, org["api_key"], data, "video/mp4")
        statuses.append(r.status_code)

    async with trio.open_nursery() as n:
        await n.start(holder)
        n.start_soon(one)
        await wait_until(lambda: gate.queued(org["organization_id"]) > 0, 10)
        assert statuses == []
        release.set()
    assert statuses == [201]
