"""Videos whose decode costs far more than their bytes (no tests here): MP4s of PNG-coded
frames of zeros, built without ever holding the decoded frame (the PNG's rows are
compressed as they are made) and muxed as packets, so nothing is encoded or decoded here.
Used by the media tests and bench/video_decode_memory.py."""

from __future__ import annotations

import struct
import zlib
from fractions import Fraction
from pathlib import Path

import av


def png_zeros(width: int, height: int) -> bytes:
    """A black RGB PNG of width x height: about 1/1000 of its decoded size."""
    comp = zlib.compressobj(9)
    row = bytes(1 + 3 * width)  # filter byte, then the row's pixels
    per = max(1, (1 << 22) // len(row))
    parts, left = [], height
    while left:
        n = min(left, per)
        parts.append(comp.compress(row * n))
        left -= n
    parts.append(comp.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", b"".join(parts)) + _chunk(b"IEND", b"")


def png_mp4(path: Path, frame: bytes, header_size: tuple[int, int], frames: int = 1, fps: int = 1) -> Path:
    """An MP4 whose video stream is `frames` copies of the PNG `frame`; its header
    declares `header_size` (which may lie about the PNG's own size)."""
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("png", rate=fps)
        stream.width, stream.height = header_size
        stream.pix_fmt = "rgb24"
        for i in range(frames):
            packet = av.Packet(frame)
            packet.stream = stream
            packet.pts = packet.dts = i
            packet.time_base = Fraction(1, fps)
            packet.is_keyframe = True
            out.mux(packet)
    return path


def mp3_with_cover(mp3: bytes, picture: bytes, mime: str = "image/png") -> bytes:
    """`mp3` with an ID3v2.3 tag whose front-cover picture (APIC) is `picture`."""
    if mp3[:3] == b"ID3":  # drop the encoder's own tag
        mp3 = mp3[10 + ((mp3[6] << 21) | (mp3[7] << 14) | (mp3[8] << 7) | mp3[9]):]
    body = b"\x00" + mime.encode() + b"\x00\x03\x00" + picture
    frame = b"APIC" + struct.pack(">I", len(body)) + b"\x00\x00" + body
    n = len(frame)
    size = bytes([(n >> 21) & 0x7F, (n >> 14) & 0x7F, (n >> 7) & 0x7F, n & 0x7F])
    return b"ID3\x03\x00\x00" + size + frame + mp3


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
