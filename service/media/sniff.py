"""Content type from magic bytes.

The declared type of an upload is a client's claim; the first bytes are the
evidence. Only the six accepted types are recognised, anything else is None.
"""

from __future__ import annotations

# Returned to clients as `details.allowed`, in this order.
ALLOWED = ["image/png", "image/jpeg", "image/webp", "video/mp4", "audio/mpeg", "audio/wav"]

IMAGE_TYPES = frozenset(["image/png", "image/jpeg", "image/webp"])

# Bytes of a file's start that `sniff` needs (every rule fits in 12).
HEAD_SIZE = 64

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"
_MP4_BRANDS = frozenset(
    [b"isom", b"mp41", b"mp42", b"avc1", b"iso2", b"iso3", b"iso4", b"iso5", b"iso6", b"M4V "]
)


def sniff(head: bytes) -> str | None:
    """The accepted content type these first bytes start, or None."""
    if head.startswith(_PNG):
        return "image/png"
    if head.startswith(_JPEG):
        return "image/jpeg"
    if len(head) >= 12 and head[:4] == b"RIFF":
        form = head[8:12]
        if form == b"WEBP":
            return "image/webp"
        if form == b"WAVE":
            return "audio/wav"
        return None
    if len(head) >= 12 and head[4:8] == b"ftyp" and head[8:12] in _MP4_BRANDS:
        return "video/mp4"
    if head.startswith(b"ID3") or _is_mpeg_audio_frame(head):
        return "audio/mpeg"
    return None


def _is_mpeg_audio_frame(head: bytes) -> bool:
    """An MPEG audio frame header: 11 sync bits, then no reserved field values."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return False
    version = (head[1] >> 3) & 0b11  # 01 is reserved
    layer = (head[1] >> 1) & 0b11  # 00 is reserved (and is what AAC's ADTS uses)
    bitrate = head[2] >> 4  # 1111 is invalid
    rate = (head[2] >> 2) & 0b11  # 11 is reserved
    return version != 0b01 and layer != 0b00 and bitrate != 0b1111 and rate != 0b11
