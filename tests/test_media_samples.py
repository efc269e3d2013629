"""Sample media built in-process for the media and backend tests (no tests here).

Each builder writes a small, real file with an independent library (Pillow,
the wave module, PyAV), or hand-made bytes where a real file would be huge.
"""

from __future__ import annotations

import io
import math
import random
import struct
import wave
import zlib
from array import array
from fractions import Fraction
from pathlib import Path

import av
from PIL import Image

# Colours far apart in every channel, so H.264 cannot blur one into another.
DISTINCT = [(230, 20, 20), (20, 230, 20), (20, 20, 230), (230, 230, 20), (20, 230, 230), (230, 20, 230)]


def picture(width: int = 64, height: int = 48, seed: int = 1) -> Image.Image:
    """A busy RGB picture (random blocks), so PNG data is not tiny."""
    rng = random.Random(seed)
    im = Image.new("RGB", (width, height))
    for y in range(0, height, 4):
        for x in range(0, width, 4):
            im.paste((rng.randrange(256), rng.randrange(256), rng.randrange(256)), (x, y, x + 4, y + 4))
    return im


def image_bytes(fmt: str, width: int = 64, height: int = 48, **save) -> bytes:
    buf = io.BytesIO()
    im = picture(width, height)
    if fmt == "GIF":
        im = im.convert("P")
    im.save(buf, format=fmt, **save)
    return buf.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def wav_bytes(seconds: float = 0.5, rate: int = 8000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(_tone(round(seconds * rate), rate).tobytes())
    return buf.getvalue()


def write_mp3(path: Path, seconds: float = 1.0, rate: int = 44100) -> Path:
    _write_audio(path, "mp3", "libmp3lame", "s16", seconds, rate)
    return path


def write_float_wav(path: Path, seconds: float = 0.5, rate: int = 8000) -> Path:
    """A 32-bit float WAV (format tag 3), which the wave module refuses."""
    _write_audio(path, "wav", "pcm_f32le", "flt", seconds, rate)
    return path


def write_audio_only_mp4(path: Path, seconds: float = 0.5) -> Path:
    _write_audio(path, "mp4", "aac", "fltp", seconds, 44100)
    return path


def _write_audio(path: Path, fmt: str, codec: str, sample_fmt: str, seconds: float, rate: int) -> None:
    total = round(seconds * rate)
    samples = _tone(total, rate)
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        for start in range(0, total, 1024):
            chunk = samples[start : start + 1024]
            frame = av.AudioFrame(format="s16", layout="mono", samples=len(chunk))
            frame.planes[0].update(chunk.tobytes())
            frame.sample_rate, frame.pts = rate, start
            if sample_fmt != "s16":
                frame = av.AudioResampler(format=sample_fmt, layout="mono", rate=rate).resample(frame)[0]
                frame.pts = start
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def _tone(count: int, rate: int, hz: float = 440.0) -> array:
    return array("h", (int(12000 * math.sin(2 * math.pi * hz * i / rate)) for i in range(count)))


def write_mp4(
    path: Path,
    colours: list[tuple[int, int, int]],
    size: tuple[int, int] = (64, 48),
    fps: int = 24,
) -> Path:
    """One flat-coloured frame per entry of `colours`, encoded with PyAV directly."""
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i, colour in enumerate(colours):
            frame = av.VideoFrame.from_image(Image.new("RGB", size, colour))
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares width x height but carries almost no pixel data (a bomb)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def webp_vp8x_header(width: int, height: int) -> bytes:
    """An extended WebP header declaring a width x height canvas, and nothing else."""
    body = b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    chunk = b"VP8X" + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def jpeg_with_size(width: int, height: int) -> bytes:
    """A real small JPEG whose frame header (SOF0) is rewritten to claim width x height."""
    data = bytearray(image_bytes("JPEG", 16, 16))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def fits_bytes() -> bytes:
    """The start of a FITS file: 80-character header cards padded to 2880 bytes."""
    cards = [f"{'SIMPLE':8}= {'T':>20}", f"{'BITPIX':8}= {8:>20}", f"{'NAXIS':8}= {0:>20}", "END"]
    return "".join(c.ljust(80) for c in cards).ljust(2880).encode("ascii")


def mp4_boxes(path: Path) -> list[bytes]:
    """Top-level box types of an MP4, in file order."""
    data, kinds, pos = path.read_bytes(), [], 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8 : pos + 16])[0]
        kinds.append(kind)
        if size < 8:
            break
        pos += size
    return kinds
