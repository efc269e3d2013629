"""Open PNG, JPEG and WebP files with Pillow without its process-wide bomb check.

`Image.open` tries every plugin and then checks the size against the global
`Image.MAX_IMAGE_PIXELS`, warning (DecompressionBombWarning) or raising
depending on a setting other code may change. Here the plugin is chosen from
the sniffed type and constructed directly: the header is parsed, nothing is
decoded, no warning is possible, and callers apply their own pixel limit.
"""

from __future__ import annotations

import struct
from pathlib import Path

from PIL import ImageFile, JpegImagePlugin, PngImagePlugin, WebPImagePlugin

from .sniff import HEAD_SIZE, sniff

_PLUGINS: dict[str, type[ImageFile.ImageFile]] = {
    "image/png": PngImagePlugin.PngImageFile,
    "image/jpeg": JpegImagePlugin.JpegImageFile,
    "image/webp": WebPImagePlugin.WebPImageFile,
}


def open_image(path: str | Path, content_type: str | None = None) -> ImageFile.ImageFile:
    """The image at `path`, header parsed, pixels not yet decoded (call `load()`).

    Raises ValueError when the bytes are not PNG, JPEG or WebP; Pillow's own
    errors (SyntaxError, OSError, ...) when the header is broken.
    """
    if content_type is None:
        content_type = sniff(read_head(path))
    plugin = _PLUGINS.get(content_type or "")
    if plugin is None:
        raise ValueError(f"not a PNG, JPEG or WebP image: {path}")
    return plugin(path)


def read_head(path: str | Path, size: int = HEAD_SIZE) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)


def webp_size(head: bytes) -> tuple[int, int] | None:
    """Canvas size from a WebP header (first 30 bytes), or None when unreadable.

    Pillow's WebP plugin allocates the canvas while opening, so a size limit
    has to be applied before that, from these bytes.
    """
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    chunk = head[12:16]
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", head[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L" and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        w = int.from_bytes(head[24:27], "little") + 1
        h = int.from_bytes(head[27:30], "little") + 1
        return w, h
    return None
