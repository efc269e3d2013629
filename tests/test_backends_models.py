"""The three built-in backends, run directly (no event loop)."""

from __future__ import annotations

import dataclasses
import threading
import zlib

import av
import pytest
from PIL import Image, ImageChops, ImageStat

from service.backends import camera_move_video, lanczos_upscale, procedural_image
from service.backends.base import BackendError, InputFile, Output, RenderRequest
from service.backends.camera_move_video import nearest_ratio, video_size
from service.backends.procedural_image import ASPECT_RATIOS, image_size
from service.media.inspect import inspect_file
from test_media_samples import DISTINCT, picture, write_mp4


def request(tmp_path, **kw) -> RenderRequest:
    base = RenderRequest(
        job_id="job1",
        capability="image.generate",
        model="proc-image",
        backend="procedural_image",
        prompt="a lighthouse on a cliff",
        seed=7,
        aspect_ratio=None,
        resolution="1k",
        duration=None,
        inputs={},
        work_dir=tmp_path / "work",
        test_mode=False,
    )
    return dataclasses.replace(base, **kw)


def as_input(path) -> InputFile:
    info = inspect_file(path, None)
    return InputFile(path, info.content_type, info.kind, info.width, info.height, info.duration_s)


def read_image(path) -> Image.Image:
    with Image.open(path) as im:
        im.load()
        return im.copy()


def probe(path):
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        info = {
            "codec": v.codec_context.name,
            "size": (v.codec_context.width, v.codec_context.height),
            "fps": v.average_rate,
            "duration": float(v.duration * v.time_base),
        }
        frames = [f.to_image() for f in c.decode(v)]
    return info, frames


def mean_diff(a: Image.Image, b: Image.Image) -> float:
    return sum(ImageStat.Stat(ImageChops.difference(a.convert("RGB"), b.convert("RGB"))).mean) / 3


NO_STOP = threading.Event()

# --- procedural_image ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ratio, k1, k2",
    [
        ("1:1", (1024, 1024), (2048, 2048)),
        ("16:9", (1024, 576), (2048, 1152)),
        ("9:16", (576, 1024), (1152, 2048)),
        ("4:3", (1024, 768), (2048, 1536)),
        ("3:2", (1024, 688), (2048, 1360)),
        ("21:9", (1024, 432), (2048, 880)),
        ("4:5", (816, 1024), (1632, 2048)),
        (None, (1024, 1024), (2048, 2048)),
    ],
)
def test_image_sizes(ratio, k1, k2):
    assert image_size(ratio, "1k") == k1
    assert image_size(ratio, "2k") == k2


def test_every_ratio_is_close_and_on_the_16_grid():
    for ratio in ASPECT_RATIOS:
        w, h = (int(x) for x in ratio.split(":"))
        for res, long in (("1k", 1024), ("2k", 2048)):
            width, height = image_size(ratio, res)
            assert max(width, height) == long
            assert width % 16 == 0 and height % 16 == 0
            assert abs(width / height - w / h) < 16 / min(width, height)


def test_unknown_resolution_or_ratio():
    with pytest.raises(ValueError):
        image_size("1:1", "4k")
    with pytest.raises(ValueError):
        image_size("7:3", "1k")


@pytest.mark.parametrize("ratio, res", [("16:9", "1k"), ("9:16", "2k"), ("21:9", "1k"), ("1:1", "2k")])
def test_procedural_output(tmp_path, ratio, res):
    [out] = procedural_image.run(request(tmp_path, aspect_ratio=ratio, resolution=res), NO_STOP)
    width, height = image_size(ratio, res)
    assert out == Output(tmp_path / "work" / "job1.png", "image/png", "image", width, height, None)
    assert inspect_file(out.path, "image/png").width == width
    assert read_image(out.path).size == (width, height)


def test_procedural_is_deterministic(tmp_path):
    a = procedural_image.run(request(tmp_path, job_id="a"), NO_STOP)[0].path.read_bytes()
    b = procedural_image.run(request(tmp_path, job_id="b"), NO_STOP)[0].path.read_bytes()
    assert a == b


def test_prompt_and_seed_change_the_picture(tmp_path):
    base = procedural_image.paint("a lighthouse on a cliff", 7, 256, 256)
    other_prompt = procedural_image.paint("a lighthouse on a hill", 7, 256, 256)
    other_seed = procedural_image.paint("a lighthouse on a cliff", 8, 256, 256)
    assert mean_diff(base, other_prompt) > 5
    assert mean_diff(base, other_seed) > 5


def test_procedural_is_a_picture_not_noise_nor_flat():
    for prompt in ("ocean", "forest at night", "desert"):
        im = procedural_image.paint(prompt, 1, 512, 512)
        raw = im.tobytes()
        assert len(zlib.compress(raw)) < len(raw) / 10  # smooth regions, not noise
        assert len(im.getcolors(maxcolors=1 << 20)) > 100  # gradients, not a flat fill


# --- camera_move_video ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ratio, res, size",
    [
        ("16:9", "480p", (854, 480)),
        ("16:9", "720p", (1280, 720)),
        ("9:16", "480p", (480, 854)),
        ("1:1", "720p", (720, 720)),
        ("21:9", "480p", (1120, 480)),
        ("4:3", "480p", (640, 480)),
        ("3:4", "720p", (720, 960)),
    ],
)
def test_video_sizes(ratio, res, size):
    assert video_size(ratio, res) == size


@pytest.mark.parametrize(
    "size, ratio",
    [
        ((1920, 1080), "16:9"),
        ((1000, 560), "16:9"),
        ((600, 800), "3:4"),
        ((512, 512), "1:1"),
        ((2520, 1080), "21:9"),
        ((1080, 1350), "4:5"),
    ],
)
def test_nearest_ratio(size, ratio):
    assert nearest_ratio(*size) == ratio


@pytest.fixture
def start_frame(tmp_path):
    path = tmp_path / "start.png"
    procedural_image.paint("valley", 3, 1024, 576).save(path)
    return as_input(path)


def test_five_second_clip_at_480p(tmp_path, start_frame):
    req = request(
        tmp_path,
        capability="video.generate",
        backend="camera_move_video",
        resolution="480p",
        duration=5.0,
        aspect_ratio="16:9",
        inputs={"start_frame": [start_frame]},
    )
    [out] = camera_move_video.run(req, NO_STOP)
    assert out == Output(tmp_path / "work" / "job1.mp4", "video/mp4", "video", 854, 480, 5.0, 120)
    info, frames = probe(out.path)
    assert info["codec"] == "h264" and info["size"] == (854, 480) and info["fps"] == 24
    assert info["duration"] == pytest.approx(5.0, abs=1 / 24)
    assert len(frames) == 120
    assert inspect_file(out.path, "video/mp4").duration_s == pytest.approx(5.0, abs=1 / 24)
    # A camera move: the view changes over the clip, but smoothly.
    assert mean_diff(frames[0], frames[-1]) > 2
    assert max(mean_diff(a, b) for a, b in zip(frames, frames[1:])) < mean_diff(frames[0], frames[-1])


def test_default_aspect_follows_the_start_frame(tmp_path):
    path = tmp_path / "portrait.png"
    picture(600, 800).save(path)
    req = request(
        tmp_path,
        backend="camera_move_video",
        resolution="480p",
        duration=0.5,
        inputs={"start_frame": [as_input(path)]},
    )
    [out] = camera_move_video.run(req, NO_STOP)
    assert (out.width, out.height, out.duration_s) == (480, 640, 0.5)
    assert probe(out.path)[0]["size"] == (480, 640)


def test_video_needs_its_start_frame(tmp_path):
    with pytest.raises(BackendError):
        camera_move_video.run(request(tmp_path, backend="camera_move_video", resolution="480p"), NO_STOP)


def test_video_stops_between_frames(tmp_path, start_frame):
    stop = threading.Event()
    stop.set()
    req = request(tmp_path, resolution="480p", inputs={"start_frame": [start_frame]})
    with pytest.raises(camera_move_video.Stopped):
        camera_move_video.run(req, stop)
    assert list((tmp_path / "work").iterdir()) == []


# --- lanczos_upscale -----------------------------------------------------------------------------


def test_upscale_an_image(tmp_path):
    path = tmp_path / "in.jpg"
    picture(50, 30).save(path, format="JPEG")
    req = request(tmp_path, backend="lanczos_upscale", resolution="2x", inputs={"media": [as_input(path)]})
    [out] = lanczos_upscale.run(req, NO_STOP)
    assert out == Output(tmp_path / "work" / "job1.png", "image/png", "image", 100, 60, None)
    assert read_image(out.path).size == (100, 60)


def test_upscale_a_video(tmp_path):
    src = write_mp4(tmp_path / "in.mp4", DISTINCT * 2, size=(64, 48), fps=12)
    req = request(tmp_path, backend="lanczos_upscale", resolution="2x", inputs={"media": [as_input(src)]})
    [out] = lanczos_upscale.run(req, NO_STOP)
    assert (out.path.name, out.content_type, out.kind) == ("job1.mp4", "video/mp4", "video")
    assert (out.width, out.height) == (128, 96)
    assert out.duration_s == pytest.approx(1.0)
    assert probe(out.path)[0]["size"] == (128, 96)


def test_upscale_refuses_audio(tmp_path):
    audio = InputFile(tmp_path / "a.wav", "audio/wav", "audio", None, None, 1.0)
    req = request(tmp_path, backend="lanczos_upscale", resolution="2x", inputs={"media": [audio]})
    with pytest.raises(BackendError):
        lanczos_upscale.run(req, NO_STOP)
