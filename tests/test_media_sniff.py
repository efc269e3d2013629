"""Content type from magic bytes: each accepted type, and look-alikes refused."""

from __future__ import annotations

import pytest

from service.media.sniff import ALLOWED, HEAD_SIZE, sniff
from test_media_samples import (
    DISTINCT,
    fits_bytes,
    image_bytes,
    wav_bytes,
    write_audio_only_mp4,
    write_mp3,
    write_mp4,
)


def test_allowed_is_the_spec_list_in_order():
    assert ALLOWED == ["image/png", "image/jpeg", "image/webp", "video/mp4", "audio/mpeg", "audio/wav"]


@pytest.mark.parametrize(
    "fmt, save, expected",
    [
        ("PNG", {}, "image/png"),
        ("JPEG", {}, "image/jpeg"),
        ("WEBP", {"lossless": True}, "image/webp"),
        ("WEBP", {"quality": 80}, "image/webp"),
    ],
)
def test_images(fmt, save, expected):
    assert sniff(image_bytes(fmt, **save)[:HEAD_SIZE]) == expected


def test_wav():
    assert sniff(wav_bytes()[:HEAD_SIZE]) == "audio/wav"


def test_mp3_from_pyav_starts_with_id3(tmp_path):
    head = write_mp3(tmp_path / "a.mp3").read_bytes()[:HEAD_SIZE]
    assert head.startswith(b"ID3")
    assert sniff(head) == "audio/mpeg"


@pytest.mark.parametrize(
    "frame_header",
    [
        b"\xff\xfb\x90\x64",  # MPEG-1 layer III, 128 kbit/s, 44.1 kHz
        b"\xff\xf3\x48\xc4",  # MPEG-2 layer III, 22.05 kHz
        b"\xff\xfd\x90\x00",  # MPEG-1 layer II
    ],
)
def test_mp3_bare_frame_sync(frame_header):
    assert sniff(frame_header + bytes(60)) == "audio/mpeg"


@pytest.mark.parametrize(
    "frame_header",
    [
        b"\xff\xf1\x50\x80",  # AAC in ADTS: layer bits 00
        b"\xff\xeb\x90\x64",  # version bits 01 (reserved)
        b"\xff\xfb\xf0\x64",  # bitrate index 1111
        b"\xff\xfb\x9c\x64",  # sample-rate index 11
        b"\xff\x1b\x90\x64",  # sync bits incomplete
    ],
)
def test_not_mpeg_audio_frames(frame_header):
    assert sniff(frame_header + bytes(60)) is None


def test_mp4_from_pyav(tmp_path):
    head = write_mp4(tmp_path / "v.mp4", DISTINCT[:2]).read_bytes()[:HEAD_SIZE]
    assert sniff(head) == "video/mp4"


def test_audio_only_mp4_is_still_mp4_by_its_bytes(tmp_path):
    # Whether it has a video stream is inspect's business, not the sniff's.
    head = write_audio_only_mp4(tmp_path / "a.mp4").read_bytes()[:HEAD_SIZE]
    assert sniff(head) == "video/mp4"


@pytest.mark.parametrize(
    "brand", [b"isom", b"mp41", b"mp42", b"avc1", b"iso2", b"iso3", b"iso4", b"iso5", b"iso6", b"M4V "]
)
def test_mp4_brands(brand):
    assert sniff(b"\x00\x00\x00\x18ftyp" + brand + b"\x00\x00\x02\x00isom") == "video/mp4"


@pytest.mark.parametrize("brand", [b"qt  ", b"heic", b"avif", b"3gp4", b"M4A "])
def test_other_iso_media_brands_are_refused(brand):
    assert sniff(b"\x00\x00\x00\x18ftyp" + brand + b"\x00\x00\x02\x00isom") is None


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(image_bytes("TIFF"), id="tiff"),
        pytest.param(image_bytes("GIF"), id="gif"),
        pytest.param(image_bytes("BMP"), id="bmp"),
        pytest.param(fits_bytes(), id="fits"),
        pytest.param(b"RIFF\x24\x00\x00\x00AVI LIST", id="riff-avi"),
        pytest.param(b"RIFF\x24\x00\x00", id="riff-short"),
        pytest.param(b"%PDF-1.7\n", id="pdf"),
        pytest.param(b"\x89PNG\r\n", id="png-signature-cut"),
        pytest.param(b"\xff\xd8", id="jpeg-cut"),
        pytest.param(b"", id="empty"),
    ],
)
def test_everything_else_is_none(data):
    assert sniff(data[:HEAD_SIZE]) is None
