"""`lanczos_upscale`: classic Lanczos resampling, for images and for video.

No super-resolution model: it enlarges without inventing detail. The output
kind follows the input (`media` slot): a PNG for an image, an H.264 MP4 for a
video, whose audio is copied through.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..media.ops import upscale_image, upscale_video
from .base import MSG_INCOMPLETE, BackendError, Output, RenderRequest

FACTORS = {"2x": 2}


def run(req: RenderRequest, stop: threading.Event) -> list[Output]:
    media = req.inputs.get("media") or []
    if len(media) != 1 or media[0].kind not in ("image", "video"):
        raise BackendError(MSG_INCOMPLETE)
    if req.resolution not in FACTORS:
        raise ValueError(f"unknown resolution {req.resolution!r}")
    factor = FACTORS[req.resolution]
    src = media[0]
    Path(req.work_dir).mkdir(parents=True, exist_ok=True)
    if src.kind == "image":
        path = Path(req.work_dir) / f"{req.job_id}.png"
        width, height = upscale_image(src.path, path, factor)
        return [Output(path, "image/png", "image", width, height, None)]
    path = Path(req.work_dir) / f"{req.job_id}.mp4"
    width, height, duration = upscale_video(src.path, path, factor, stop.is_set)
    return [Output(path, "video/mp4", "video", width, height, duration, src.frames)]
