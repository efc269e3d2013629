"""A gallery thumbnail: the image (or a video's first frame) scaled to fit 320x320 (never
enlarged), WebP at quality 80 (a few KB where the output is hundreds), through the same
guarded openers as every image and video."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageOps

from .images import open_image
from .ops import extract_frame

SIDE = 320
CONTENT_TYPE = "image/webp"


def make_thumbnail(src: str | Path, dst: str | Path, kind: str = "image") -> tuple[int, int]:
    if kind == "video":  # its first frame, as a PNG beside the thumbnail, then as an image
        frame = Path(str(dst) + ".frame.png")
        try:
            extract_frame(src, 0.0, frame)
            return make_thumbnail(frame, dst)
        finally:
            frame.unlink(missing_ok=True)
    with open_image(src) as im:
        im.load()
        rgb = im.convert("RGBA" if "A" in im.getbands() else "RGB")
    out = rgb.copy()
    out.thumbnail((SIDE, SIDE), Image.Resampling.LANCZOS)
    out = ImageOps.exif_transpose(out) or out
    out.save(dst, "WEBP", quality=80, method=4)
    return out.size
