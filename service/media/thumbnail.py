"""A gallery thumbnail: the image scaled to fit 320x320 (never enlarged), WebP at quality 80
(a few KB where the output is hundreds), through the same guarded opener as every image."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageOps

from .images import open_image

SIDE = 320
CONTENT_TYPE = "image/webp"


def make_thumbnail(src: str | Path, dst: str | Path) -> tuple[int, int]:
    with open_image(src) as im:
        im.load()
        rgb = im.convert("RGBA" if "A" in im.getbands() else "RGB")
    out = rgb.copy()
    out.thumbnail((SIDE, SIDE), Image.Resampling.LANCZOS)
    out = ImageOps.exif_transpose(out) or out
    out.save(dst, "WEBP", quality=80, method=4)
    return out.size
