"""inspect_file: what is accepted, what it reports, and each refusal's exact message."""

from __future__ import annotations

import warnings

import pytest
from PIL import Image, ImageFile, WebPImagePlugin

from service.errors import Unprocessable
from service.media import inspect as inspect_module
from service.media.inspect import MAX_PIXELS, MediaInfo, inspect_file
from service.media.sniff import ALLOWED
from test_media_samples import (
    DISTINCT,
    fits_bytes,
    image_bytes,
    jpeg_with_size,
    png_header_only,
    wav_bytes,
    webp_vp8x_header,
    write,
    write_audio_only_mp4,
    write_float_wav,
    write_mp3,
    write_mp4,
)

NOT_IMAGE = "File is not a readable image."
NOT_VIDEO = "File is not a readable video."
NOT_AUDIO = "File is not a readable audio file."


def refused(path, declared) -> Unprocessable:
    with pytest.raises(Unprocessable) as exc:
        inspect_file(path, declared)
    assert exc.value.status == 422
    assert exc.value.code == "request.validation_failed"
    return exc.value


def assert_unsupported(path, declared, shown):
    err = refused(path, declared)
    assert err.message == f"Unsupported content type '{shown}'."
    assert err.details == {"allowed": ALLOWED}


def assert_not_image(path, declared):
    err = refused(path, declared)
    assert err.message == NOT_IMAGE
    assert err.details is None


# --- accepted files and what they report ---------------------------------------------


@pytest.mark.parametrize(
    "fmt, save, content_type",
    [
        ("PNG", {}, "image/png"),
        ("JPEG", {"quality": 90}, "image/jpeg"),
        ("WEBP", {"quality": 80}, "image/webp"),
        ("WEBP", {"lossless": True}, "image/webp"),
    ],
)
def test_images_report_size(tmp_path, fmt, save, content_type):
    path = write(tmp_path / "upload", image_bytes(fmt, 80, 50, **save))
    assert inspect_file(path, content_type) == MediaInfo("image", content_type, 80, 50, None)


def test_png_palette_and_alpha_modes(tmp_path):
    for mode in ("P", "RGBA", "L", "LA", "I;16"):
        path = tmp_path / f"{mode.replace(';', '')}.png"
        Image.new(mode, (7, 5)).save(path)
        assert inspect_file(path, "image/png").width == 7


def test_video_reports_size_and_duration(tmp_path):
    path = write_mp4(tmp_path / "v.mp4", DISTINCT * 4, size=(96, 64), fps=24)
    info = inspect_file(path, "video/mp4")
    assert (info.kind, info.content_type, info.width, info.height) == ("video", "video/mp4", 96, 64)
    assert info.duration_s == pytest.approx(24 / 24, abs=1 / 24)


def test_wav_duration_is_exact(tmp_path):
    path = write(tmp_path / "a.wav", wav_bytes(seconds=0.75, rate=8000))
    assert inspect_file(path, "audio/wav") == MediaInfo("audio", "audio/wav", None, None, 0.75)


def test_float_wav_falls_back_to_pyav(tmp_path):
    path = write_float_wav(tmp_path / "f.wav", seconds=0.5)
    info = inspect_file(path, "audio/wav")
    assert info.content_type == "audio/wav"
    assert info.duration_s == pytest.approx(0.5, abs=0.01)


def test_mp3_duration(tmp_path):
    path = write_mp3(tmp_path / "a.mp3", seconds=1.0)
    info = inspect_file(path, "audio/mpeg")
    assert (info.kind, info.content_type, info.width, info.height) == ("audio", "audio/mpeg", None, None)
    assert info.duration_s == pytest.approx(1.0, abs=0.1)


# --- the declared type ------------------------------------------------------------------


@pytest.mark.parametrize("declared", [None, "", "application/octet-stream", "text/plain", "image/x-png"])
def test_declared_type_outside_allowed_is_ignored_when_bytes_are_good(tmp_path, declared):
    path = write(tmp_path / "x.bin", image_bytes("PNG"))
    assert inspect_file(path, declared).content_type == "image/png"


@pytest.mark.parametrize("declared", ["IMAGE/PNG", "image/png; charset=binary", " image/png "])
def test_declared_type_compares_without_case_or_parameters(tmp_path, declared):
    path = write(tmp_path / "x.png", image_bytes("PNG"))
    assert inspect_file(path, declared).content_type == "image/png"


def test_aliases_are_the_allowed_types(tmp_path):
    jpeg = write(tmp_path / "a.jpg", image_bytes("JPEG"))
    wav = write(tmp_path / "a.wav", wav_bytes())
    assert inspect_file(jpeg, "image/jpg").content_type == "image/jpeg"
    assert inspect_file(wav, "audio/x-wav").content_type == "audio/wav"
    assert_not_image(write(tmp_path / "p.png", image_bytes("PNG")), "image/jpg")


OCTET = "application/octet-stream"
UNRECOGNISED = {"tiff": image_bytes("TIFF"), "gif": image_bytes("GIF"), "fits": fits_bytes()}


@pytest.mark.parametrize(
    "declared, shown",
    [(None, OCTET), (OCTET, OCTET), ("image/tiff", "image/tiff"), ("text/plain", "text/plain")],
)
@pytest.mark.parametrize("data", [*UNRECOGNISED.values(), b"hello"], ids=[*UNRECOGNISED, "text"])
def test_unrecognised_bytes_without_an_allowed_declared_type(tmp_path, data, declared, shown):
    assert_unsupported(write(tmp_path / "f", data), declared, shown)


@pytest.mark.parametrize("declared", ["image/png", "image/jpeg", "image/webp"])
@pytest.mark.parametrize("data", UNRECOGNISED.values(), ids=UNRECOGNISED.keys())
def test_unrecognised_bytes_declared_as_an_image(tmp_path, data, declared):
    assert_not_image(write(tmp_path / "photo.png", data), declared)


def test_unrecognised_bytes_declared_as_video_or_audio(tmp_path):
    path = write(tmp_path / "f", fits_bytes())
    assert_unsupported(path, "video/mp4", "video/mp4")
    assert_unsupported(path, "audio/mpeg", "audio/mpeg")


def test_allowed_image_declared_as_another_image(tmp_path):
    assert_not_image(write(tmp_path / "a", image_bytes("PNG")), "image/jpeg")
    assert_not_image(write(tmp_path / "b", image_bytes("JPEG")), "image/webp")


def test_video_declared_as_image(tmp_path):
    assert_not_image(write_mp4(tmp_path / "v.mp4", DISTINCT[:2]), "image/png")


def test_allowed_bytes_declared_as_another_non_image_type(tmp_path):
    assert_unsupported(write(tmp_path / "a", image_bytes("PNG")), "video/mp4", "video/mp4")
    assert_unsupported(write(tmp_path / "b", wav_bytes()), "audio/mpeg", "audio/mpeg")
    assert_unsupported(write_mp3(tmp_path / "c.mp3"), "audio/wav", "audio/wav")


# --- images that do not decode ------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_truncated_image(tmp_path, fmt):
    data = image_bytes(fmt, 256, 256)
    path = write(tmp_path / "cut", data[: len(data) // 2])
    assert_not_image(path, None)


def test_png_with_corrupt_pixel_data(tmp_path):
    data = bytearray(image_bytes("PNG", 128, 128))
    idat = data.index(b"IDAT")
    data[idat + 40 : idat + 80] = bytes(40)
    assert_not_image(write(tmp_path / "bad.png", bytes(data)), "image/png")


def test_signature_only(tmp_path):
    assert_not_image(write(tmp_path / "sig.png", b"\x89PNG\r\n\x1a\n" + bytes(30)), "image/png")


# --- the pixel limit -------------------------------------------------------------------------


def test_limit_applies_at_the_boundary(tmp_path, monkeypatch):
    monkeypatch.setattr(inspect_module, "MAX_PIXELS", 100)
    at_limit = write(tmp_path / "a.png", image_bytes("PNG", 10, 10))
    over = write(tmp_path / "b.png", image_bytes("PNG", 11, 10))
    assert inspect_file(at_limit, "image/png").width == 10
    assert_not_image(over, "image/png")


def test_webp_limit_applies_at_the_boundary(tmp_path, monkeypatch):
    monkeypatch.setattr(inspect_module, "MAX_PIXELS", 100)
    assert inspect_file(write(tmp_path / "a", image_bytes("WEBP", 10, 10, lossless=True)), None).width == 10
    assert_not_image(write(tmp_path / "b", image_bytes("WEBP", 10, 11, lossless=True)), None)
    assert_not_image(write(tmp_path / "c", image_bytes("WEBP", 11, 10, quality=80)), None)


@pytest.fixture
def decoding_started(monkeypatch):
    """Records any start of pixel decoding or WebP canvas allocation.

    A list, not an exception: inspect turns decoder exceptions into a 422,
    which would hide the very thing this test looks for.
    """
    calls: list[str] = []

    def record(name):
        def fake(*args, **kwargs):
            calls.append(name)
            raise OSError(name)

        return fake

    monkeypatch.setattr(ImageFile.ImageFile, "load", record("load"))
    monkeypatch.setattr(WebPImagePlugin._webp, "WebPAnimDecoder", record("WebPAnimDecoder"))
    return calls


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(png_header_only(30_000, 30_000), id="png-900MP"),
        pytest.param(png_header_only(MAX_PIXELS + 1, 1), id="png-one-over"),
        pytest.param(jpeg_with_size(65_000, 65_000), id="jpeg-4GP"),
        pytest.param(webp_vp8x_header(16_000, 16_000), id="webp-256MP"),
    ],
)
def test_pixel_bomb_is_refused_from_the_header(tmp_path, decoding_started, data):
    path = write(tmp_path / "bomb", data)
    assert_not_image(path, None)
    assert decoding_started == []  # refused from the header: no pixel was decoded


def test_decoding_probe_sees_a_normal_decode(tmp_path, decoding_started):
    # The probe above would notice decoding: here it must.
    assert_not_image(write(tmp_path / "ok.png", image_bytes("PNG")), None)
    assert_not_image(write(tmp_path / "ok.webp", image_bytes("WEBP")), None)
    assert decoding_started == ["load", "WebPAnimDecoder"]


def test_bomb_file_is_tiny():
    assert len(png_header_only(30_000, 30_000)) < 100


def test_pillow_bomb_warning_never_escapes_and_global_limit_untouched(tmp_path, monkeypatch):
    # 40x40 = 1600 pixels: over Pillow's global limit (warning zone), under twice it (error).
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    paths = [write(tmp_path / f"a.{fmt}", image_bytes(fmt, 40, 40)) for fmt in ("PNG", "JPEG", "WEBP")]
    with pytest.warns(Image.DecompressionBombWarning):
        Image.open(paths[0]).close()  # what plain Image.open would do
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in paths:
            assert inspect_file(path, None).width == 40
    assert Image.MAX_IMAGE_PIXELS == 1000


# --- video and audio that do not decode ---------------------------------------------------------


def test_mp4_header_with_garbage(tmp_path):
    path = write(tmp_path / "v.mp4", b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2" + bytes(range(256)) * 8)
    err = refused(path, "video/mp4")
    assert (err.message, err.details) == (NOT_VIDEO, None)


def test_truncated_mp4(tmp_path):
    data = write_mp4(tmp_path / "v.mp4", DISTINCT * 4).read_bytes()
    path = write(tmp_path / "cut.mp4", data[:200])
    assert refused(path, None).message == NOT_VIDEO


def test_mp4_without_video_stream(tmp_path):
    path = write_audio_only_mp4(tmp_path / "a.mp4")
    assert refused(path, "video/mp4").message == NOT_VIDEO


def test_wav_header_with_garbage(tmp_path):
    path = write(tmp_path / "a.wav", b"RIFF\xff\x00\x00\x00WAVEjunk" + bytes(100))
    err = refused(path, "audio/wav")
    assert (err.message, err.details) == (NOT_AUDIO, None)


def test_wav_without_samples(tmp_path):
    path = write(tmp_path / "a.wav", wav_bytes(seconds=0))
    assert refused(path, None).message == NOT_AUDIO


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"ID3\x04\x00\x00\x00\x00\x00\x00" + bytes(range(256)) * 4, id="id3-then-garbage"),
        pytest.param(b"\xff\xfb\x90\x64" + bytes(20), id="one-frame-header"),
    ],
)
def test_mp3_that_does_not_decode(tmp_path, data):
    assert refused(write(tmp_path / "a.mp3", data), "audio/mpeg").message == NOT_AUDIO
