"""`camera_move_video`: image-to-video as a slow camera move over the start frame.

No motion model: a Ken Burns zoom and pan across the `start_frame` image,
its direction chosen from the seed and prompt, rendered at 24 fps and encoded
as H.264. Every frame is resampled from a float crop box, so the motion is
smooth rather than stepping a pixel at a time.
"""

from __future__ import annotations

import hashlib
import math
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import av
from PIL import Image, ImageOps

from ..media.images import open_image
from ..media.ops import Stopped, encode_mp4
from .base import MSG_INCOMPLETE, BackendError, Output, RenderRequest
from .procedural_image import ASPECT_RATIOS

FPS = 24
DEFAULT_DURATION_S = 5.0
RESOLUTIONS = {"480p": 480, "720p": 720}  # short side in pixels
MAX_ZOOM = 1.2  # the tightest view shows 1/1.2 of the frame's width


def available() -> bool:
    return "libx264" in av.codecs_available


def video_size(aspect_ratio: str, resolution: str) -> tuple[int, int]:
    """Width and height: short side from the resolution, both even."""
    if resolution not in RESOLUTIONS:
        raise ValueError(f"unknown resolution {resolution!r}")
    if aspect_ratio not in ASPECT_RATIOS:
        raise ValueError(f"unknown aspect ratio {aspect_ratio!r}")
    w, h = (int(x) for x in aspect_ratio.split(":"))
    short = RESOLUTIONS[resolution]
    long = round(short * max(w, h) / min(w, h) / 2) * 2
    return (long, short) if w >= h else (short, long)


def nearest_ratio(width: int, height: int) -> str:
    """The allowed aspect ratio closest to width:height (compared as logarithms)."""
    target = math.log(width / height)

    def distance(ratio: str) -> float:
        w, h = (int(x) for x in ratio.split(":"))
        return abs(math.log(w / h) - target)

    return min(ASPECT_RATIOS, key=distance)


def run(req: RenderRequest, stop: threading.Event) -> list[Output]:
    frames_in = req.inputs.get("start_frame") or []
    if len(frames_in) != 1 or frames_in[0].kind != "image":
        raise BackendError(MSG_INCOMPLETE)
    start = frames_in[0]
    with open_image(start.path, start.content_type) as im:
        im.load()
        source = im.convert("RGB")
    ratio = req.aspect_ratio or nearest_ratio(*source.size)
    width, height = video_size(ratio, req.resolution)
    duration = req.duration or DEFAULT_DURATION_S
    count = max(1, round(duration * FPS))

    rng = random.Random(hashlib.sha256(f"{req.seed}\x00{req.prompt}".encode()).digest())
    Path(req.work_dir).mkdir(parents=True, exist_ok=True)
    path = Path(req.work_dir) / f"{req.job_id}.mp4"
    frames = _camera_move(source, width, height, count, rng, stop)
    w, h, seconds = encode_mp4(frames, path, width, height, FPS)
    return [Output(path, "video/mp4", "video", w, h, seconds, round(seconds * FPS))]


def _camera_move(
    source: Image.Image,
    width: int,
    height: int,
    count: int,
    rng: random.Random,
    stop: threading.Event,
) -> Iterator[Image.Image]:
    """`count` frames of a zoom (in or out) with a drift, eased at both ends."""
    cover_w, cover_h = round(width * MAX_ZOOM), round(height * MAX_ZOOM)
    cover = ImageOps.fit(source, (cover_w, cover_h), Image.Resampling.LANCZOS)
    zoom_in = rng.random() < 0.6
    z0, z1 = (1.0, MAX_ZOOM) if zoom_in else (MAX_ZOOM, 1.0)
    # Window centres as fractions of the room left at the current zoom, so
    # every window stays inside the picture.
    ux0, uy0, ux1, uy1 = (rng.uniform(0.2, 0.8) for _ in range(4))
    for i in range(count):
        if stop.is_set():
            raise Stopped()
        t = i / (count - 1) if count > 1 else 0.0
        t = t * t * (3 - 2 * t)  # smoothstep
        zoom = z0 + (z1 - z0) * t
        win_w, win_h = cover_w / zoom, cover_h / zoom
        x0 = (ux0 + (ux1 - ux0) * t) * (cover_w - win_w)
        y0 = (uy0 + (uy1 - uy0) * t) * (cover_h - win_h)
        box = (x0, y0, x0 + win_w, y0 + win_h)
        yield cover.resize((width, height), Image.Resampling.BICUBIC, box=box)
