"""Local media ops: resize, frame extraction, upscale, and the H.264 encoder."""

from __future__ import annotations

import av
import pytest
from PIL import Image, ImageChops, ImageStat

from service.media.ops import (
    Stopped,
    encode_mp4,
    extract_frame,
    resize_image,
    upscale_image,
    upscale_video,
)
from service.media.sniff import sniff
from test_media_samples import DISTINCT, image_bytes, mp4_boxes, picture, write, write_mp3, write_mp4


def probe(path):
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        frames = sum(1 for _ in c.decode(v))
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        return {
            "codec": v.codec_context.name,
            "pix_fmt": v.codec_context.pix_fmt,
            "size": (v.codec_context.width, v.codec_context.height),
            "fps": v.average_rate,
            "duration": float(v.duration * v.time_base),
            "frames": frames,
            "audio": [a.codec_context.name for a in c.streams.audio],
        }


def read_image(path) -> Image.Image:
    with Image.open(path) as im:
        im.load()
        return im.copy()


def centre_colour(path_or_image):
    im = path_or_image if isinstance(path_or_image, Image.Image) else read_image(path_or_image)
    w, h = im.size
    return im.convert("RGB").getpixel((w // 2, h // 2))


def close(a, b, tol=24):
    return all(abs(x - y) <= tol for x, y in zip(a, b))


def leftovers(folder, keep):
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


# --- resize --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src_size, box, expected",
    [
        ((400, 200), (100, 100), (100, 50)),
        ((200, 400), (100, 100), (50, 100)),
        ((300, 300), (120, 80), (80, 80)),
        ((40, 20), (100, 100), (100, 50)),  # fits the box: small images grow
    ],
)
def test_resize_fits_inside_the_box_keeping_aspect(tmp_path, src_size, box, expected):
    src = tmp_path / "src.jpg"
    picture(*src_size).save(src, format="JPEG")
    dst = tmp_path / "out.png"
    assert resize_image(src, dst, *box) == expected
    assert sniff(dst.read_bytes()[:16]) == "image/png"
    assert read_image(dst).size == expected


def test_resize_keeps_transparency(tmp_path):
    src = tmp_path / "a.png"
    Image.new("RGBA", (64, 64), (255, 0, 0, 0)).save(src)
    dst = tmp_path / "b.png"
    resize_image(src, dst, 32, 32)
    out = read_image(dst)
    assert out.mode == "RGBA" and out.getpixel((5, 5))[3] == 0


def test_failed_op_writes_nothing(tmp_path):
    src = write(tmp_path / "bad.png", image_bytes("PNG", 256, 256)[:300])
    dst = tmp_path / "out.png"
    with pytest.raises(OSError):
        resize_image(src, dst, 10, 10)
    assert leftovers(tmp_path, {"bad.png"}) == []


# --- upscale image ---------------------------------------------------------------------------


def test_upscale_image_doubles_and_stays_faithful(tmp_path):
    src = tmp_path / "s.png"
    original = picture(30, 20)
    original.save(src)
    dst = tmp_path / "u.png"
    assert upscale_image(src, dst, 2) == (60, 40)
    back = read_image(dst).convert("RGB").resize((30, 20), Image.Resampling.BOX)
    diff = ImageStat.Stat(ImageChops.difference(back, original)).mean
    assert max(diff) < 20  # the same picture, only bigger


def test_upscale_webp_source(tmp_path):
    src = write(tmp_path / "s.webp", image_bytes("WEBP", 17, 9, lossless=True))
    assert upscale_image(src, tmp_path / "u.png", 2) == (34, 18)


# --- encode ------------------------------------------------------------------------------------


def test_encode_mp4_is_h264_yuv420p_faststart(tmp_path):
    frames = (Image.new("RGB", (96, 64), DISTINCT[i % 6]) for i in range(48))
    dst = tmp_path / "out.mp4"
    assert encode_mp4(frames, dst, 96, 64, 24) == (96, 64, 2.0)
    info = probe(dst)
    assert info["codec"] == "h264" and info["pix_fmt"] == "yuv420p"
    assert info["size"] == (96, 64) and info["fps"] == 24 and info["frames"] == 48
    assert info["duration"] == pytest.approx(2.0, abs=1 / 24)
    boxes = mp4_boxes(dst)
    assert boxes.index(b"moov") < boxes.index(b"mdat")  # +faststart


def test_encode_mp4_rounds_odd_sizes_down_to_even(tmp_path):
    frames = (Image.new("RGB", (65, 49), (200, 30, 30)) for _ in range(3))
    dst = tmp_path / "odd.mp4"
    assert encode_mp4(frames, dst, 65, 49, 24)[:2] == (64, 48)
    assert probe(dst)["size"] == (64, 48)


def test_encode_mp4_writes_nothing_when_frames_fail(tmp_path):
    def frames():
        yield Image.new("RGB", (32, 32))
        raise RuntimeError("renderer broke")

    with pytest.raises(RuntimeError):
        encode_mp4(frames(), tmp_path / "out.mp4", 32, 32, 24)
    assert leftovers(tmp_path, set()) == []


def test_encode_mp4_refuses_no_frames(tmp_path):
    with pytest.raises(ValueError):
        encode_mp4(iter(()), tmp_path / "out.mp4", 32, 32, 24)
    assert leftovers(tmp_path, set()) == []


def test_encode_mp4_copies_audio(tmp_path):
    mp3 = write_mp3(tmp_path / "a.mp3", seconds=1.0)
    frames = (Image.new("RGB", (32, 32), DISTINCT[0]) for _ in range(24))
    dst = tmp_path / "av.mp4"
    encode_mp4(frames, dst, 32, 32, 24, audio_from=mp3)
    assert probe(dst)["audio"] == ["mp3float"]


# --- extract frame --------------------------------------------------------------------------------


@pytest.fixture
def four_fps_clip(tmp_path):
    """Six frames at 4 fps (t = 0, 0.25, ... 1.25), each a different colour."""
    return write_mp4(tmp_path / "clip.mp4", DISTINCT, fps=4)


@pytest.mark.parametrize(
    "at_s, index",
    [(0.0, 0), (0.1, 0), (0.2, 1), (0.6, 2), (0.7, 3), (1.25, 5), (99.0, 5), (-3.0, 0)],
)
def test_extract_frame_takes_the_nearest_clamped(tmp_path, four_fps_clip, at_s, index):
    dst = tmp_path / "f.png"
    assert extract_frame(four_fps_clip, at_s, dst) == (64, 48)
    assert close(centre_colour(dst), DISTINCT[index])


def test_extract_frame_in_a_longer_clip_with_keyframes(tmp_path):
    # 10 s at 24 fps, colour changing every second: the seek path is exercised.
    colours = [DISTINCT[s % 6] for s in range(10) for _ in range(24)]
    clip = write_mp4(tmp_path / "long.mp4", colours)
    for second in (0, 3, 7, 9):
        extract_frame(clip, second + 0.5, tmp_path / "f.png")
        assert close(centre_colour(tmp_path / "f.png"), DISTINCT[second % 6])


# --- upscale video ----------------------------------------------------------------------------------


def test_upscale_video(tmp_path):
    src = write_mp4(tmp_path / "s.mp4", DISTINCT * 2, size=(64, 48), fps=12)
    dst = tmp_path / "u.mp4"
    width, height, duration = upscale_video(src, dst, 2)
    assert (width, height) == (128, 96)
    info = probe(dst)
    assert info["size"] == (128, 96) and info["codec"] == "h264"
    assert info["frames"] == 12 and info["fps"] == 12
    assert duration == pytest.approx(1.0) and info["duration"] == pytest.approx(1.0, abs=1 / 12)
    extract_frame(dst, 0.25, tmp_path / "f.png")  # frame 3 of the source
    assert close(centre_colour(tmp_path / "f.png"), DISTINCT[3])


def test_upscale_video_keeps_audio(tmp_path):
    mp3 = write_mp3(tmp_path / "a.mp3", seconds=0.5)
    src = tmp_path / "s.mp4"
    encode_mp4((Image.new("RGB", (32, 32)) for _ in range(12)), src, 32, 32, 24, audio_from=mp3)
    dst = tmp_path / "u.mp4"
    upscale_video(src, dst, 2)
    assert probe(dst)["audio"] == ["mp3float"]


def test_upscale_video_stops_when_asked(tmp_path):
    src = write_mp4(tmp_path / "s.mp4", DISTINCT * 2)
    asked = []

    def should_stop():
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(Stopped):
        upscale_video(src, tmp_path / "u.mp4", 2, should_stop)
    assert leftovers(tmp_path, {"s.mp4"}) == []
