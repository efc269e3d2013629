"""What decoding a video will cost, known from its header before any frame is decoded.

A small MP4 can hold frames coded as PNG: 2 MB of file decoded to a 1.1 GB frame. So every
video this node decodes is first read for its frame size and frame count, and refused when
a frame is larger than an image may be (MAX_FRAME_PIXELS) or when frame size x frame count
passes MAX_PIXEL_FRAMES (the work of one pass over the whole video). A header that gives
no frame size, or neither a frame count nor a duration and a frame rate, is refused: what
cannot be known cannot be bounded. The header can lie (a PNG frame may declare its own,
larger size), and FFmpeg decodes a frame while opening a file whose header lacks a
figure (a PNG-coded stream's pixel format), so every open (`open_media`) and every
decoder (`cap_decoder`) is capped: FFmpeg refuses a frame past `max_pixels` before
allocating it. A pass over the frames stops past the header's count (`FrameCounter`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import av

from ..errors import Unprocessable
from .gate import LARGE_DECODE

MAX_FRAME_PIXELS = 40_000_000  # as for an image (service.media.inspect.MAX_PIXELS)
MAX_PIXEL_FRAMES = 10_000_000_000  # e.g. 4K (3840x2160) x 1,200 frames, 1080p x 4,800 frames
FRAME_SLACK = 16  # frames a pass may find past the header's count (rounding of durations)

MSG_NO_COUNT = "The video's header gives no frame count, so its size cannot be checked before decoding."
MSG_NO_SIZE = f"The video's frames are unreadable or larger than {MAX_FRAME_PIXELS} pixels."
_CAP = {"max_pixels": str(MAX_FRAME_PIXELS)}


@dataclass(frozen=True)
class VideoHeader:
    width: int
    height: int
    frames: int  # from the header's count, or duration x frame rate rounded up
    duration_s: float | None

    @property
    def pixels(self) -> int:
        return self.width * self.height


def read_header(container, stream) -> VideoHeader:
    """The header's figures, nothing decoded; Unprocessable when a figure is missing."""
    width, height = stream.codec_context.width or 0, stream.codec_context.height or 0
    if width < 1 or height < 1:  # the capped probe of `open_media` could not learn them
        raise Unprocessable(MSG_NO_SIZE, {"max_frame_pixels": MAX_FRAME_PIXELS})
    duration = stream_duration(container, stream)
    frames = int(stream.frames or 0)
    rate = stream.average_rate or stream.base_rate
    if frames < 1 and duration and rate:
        frames = math.ceil(duration * float(rate))
    if frames < 1:
        raise Unprocessable(MSG_NO_COUNT)
    return VideoHeader(width, height, frames, duration)


def check_cost(h: VideoHeader) -> None:
    """Refuse a video whose frames, or whose frames all together, are too large to decode."""
    if h.pixels > MAX_FRAME_PIXELS:
        raise Unprocessable(
            f"Video frames are {h.width}x{h.height} pixels; the limit is {MAX_FRAME_PIXELS} pixels a frame.",
            {"width": h.width, "height": h.height, "max_frame_pixels": MAX_FRAME_PIXELS})
    if h.pixels * h.frames > MAX_PIXEL_FRAMES:
        raise Unprocessable(
            f"Video is {h.frames} frames of {h.width}x{h.height} pixels; the limit is {MAX_PIXEL_FRAMES} "
            "pixels x frames.",
            {"width": h.width, "height": h.height, "frames": h.frames, "max_pixel_frames": MAX_PIXEL_FRAMES})


def open_media(path: str | Path, fmt: str | None = None, max_pixels: int = MAX_FRAME_PIXELS):
    """`av.open` whose stream probing decodes no picture over `max_pixels`: a video frame,
    or an audio file's cover art (an MP3's ID3 picture is probed too). A picture too large
    leaves its stream's size 0, which `read_header` refuses."""
    return av.open(str(path), format=fmt, options={"max_pixels": str(max_pixels)})


def cap_decoder(stream) -> None:
    """Make FFmpeg refuse (an av error) any frame over MAX_FRAME_PIXELS, whatever the
    header said; call before the first decode (the codec opens then)."""
    stream.codec_context.options = {**stream.codec_context.options, **_CAP}


def frame_pixels(path: str | Path) -> int:
    """Pixels of one frame (0 when the file has no readable video stream), for the decode
    gate. Probing may decode a frame, so it is capped at LARGE_DECODE here: a stream whose
    size that probe cannot learn counts as a frame of MAX_FRAME_PIXELS (it takes a slot)."""
    try:
        with open_media(path, "mp4", LARGE_DECODE) as container:
            if not container.streams.video:
                return 0
            ctx = container.streams.video[0].codec_context
            return (ctx.width or 0) * (ctx.height or 0) or MAX_FRAME_PIXELS
    except Exception:  # noqa: BLE001 - the full inspection gives the client its answer
        return 0


class FrameCounter:
    """Counts frames of a pass and stops it past the header's count (a header that
    under-declares would otherwise get a longer decode than was checked)."""

    def __init__(self, header: VideoHeader) -> None:
        self.limit = header.frames + FRAME_SLACK
        self.seen = 0

    def tick(self) -> None:
        self.seen += 1
        if self.seen > self.limit:
            raise ValueError(f"video has more frames than its header's {self.limit - FRAME_SLACK}")


def stream_duration(container, stream) -> float | None:
    """Seconds from the stream's header, else the container's, else None."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / av.time_base
    return None
