"""Free local media operations: resize, frame extraction, upscale, H.264 encode.

All are synchronous and CPU-bound, meant for `trio.to_thread.run_sync`. Each
writes its result to a temporary name beside `dst` and renames it into place
when complete, so a reader never sees half a file and a crash leaves no `dst`.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import av
from PIL import Image, ImageOps

from .images import open_image
from .video import FrameCounter, cap_decoder, check_cost, open_media, read_header

log = logging.getLogger(__name__)

LANCZOS = Image.Resampling.LANCZOS


class Stopped(Exception):
    """Long work gave up between frames because its caller asked it to stop."""


@contextmanager
def atomic_path(dst: str | Path) -> Iterator[Path]:
    """A temporary path beside `dst`, renamed to `dst` only if the block succeeds."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex}.part")
    try:
        yield tmp
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def save_png(image: Image.Image, dst: str | Path) -> None:
    with atomic_path(dst) as tmp:
        image.save(tmp, format="PNG")


def resize_image(src: str | Path, dst: str | Path, width: int, height: int) -> tuple[int, int]:
    """Scale the image to fit inside width x height, keeping its aspect; PNG out."""
    with open_image(src) as im:
        im.load()
        out = ImageOps.contain(_rgb_or_rgba(im), (width, height), LANCZOS)
    save_png(out, dst)
    return out.size


def upscale_image(src: str | Path, dst: str | Path, factor: int) -> tuple[int, int]:
    """Lanczos upscale by an integer factor; PNG out."""
    with open_image(src) as im:
        im.load()
        rgb = _rgb_or_rgba(im)
    out = rgb.resize((rgb.width * factor, rgb.height * factor), LANCZOS)
    save_png(out, dst)
    return out.size


def extract_frame(video_path: str | Path, at_s: float, dst_png: str | Path) -> tuple[int, int]:
    """Save the frame nearest `at_s` (clamped to the clip) as a PNG; its size."""
    with open_media(video_path) as container:
        stream = container.streams.video[0]
        cap_decoder(stream)
        at_s = max(0.0, at_s)
        if stream.duration and stream.time_base:
            at_s = min(at_s, float(stream.duration * stream.time_base))
        frame = _nearest_frame(container, stream, at_s)
        if frame is None:  # seek landed past the last frame: read from the start
            container.seek(0)
            frame = _nearest_frame(container, stream, at_s)
        if frame is None:
            raise ValueError(f"no decodable frame in {video_path}")
        image = frame.to_image()
    save_png(image, dst_png)
    return image.size


def _nearest_frame(container, stream, at_s: float):
    if at_s > 0 and stream.time_base:
        container.seek(int(at_s / stream.time_base), stream=stream, backward=True)
    best, best_gap = None, None
    for frame in container.decode(stream):
        t = frame.time if frame.time is not None else 0.0
        gap = abs(t - at_s)
        if best_gap is not None and gap > best_gap:
            break  # moving away from the target
        best, best_gap = frame, gap
    return best


def upscale_video(
    src: str | Path,
    dst: str | Path,
    factor: int,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[int, int, float]:
    """Lanczos upscale every frame and re-encode as H.264; audio is copied.

    Frames are re-timed at the stream's average rate (constant frame rate out).
    `should_stop` is polled between frames (raises Stopped). The header's frame size
    and count are checked first (service.media.video; Unprocessable) and the pass stops
    past that count. Returns width, height and duration of the result.
    """
    with open_media(src) as container:
        stream = container.streams.video[0]
        header = read_header(container, stream)
        check_cost(header)
        cap_decoder(stream)
        fps = stream.average_rate or stream.guessed_rate or Fraction(24)
        width, height = header.width * factor, header.height * factor
        frames = _upscaled_frames(container, stream, (width, height), should_stop, FrameCounter(header))
        has_audio = bool(container.streams.audio)
        return encode_mp4(frames, dst, width, height, fps, audio_from=src if has_audio else None)


def encode_mp4(
    frames: Iterable[Image.Image],
    dst: str | Path,
    width: int,
    height: int,
    fps: int | Fraction,
    *,
    audio_from: str | Path | None = None,
) -> tuple[int, int, float]:
    """Encode PIL frames as H.264 (libx264 veryfast, yuv420p) in a faststart MP4.

    Odd dimensions are rounded down to even (yuv420p needs them) and frames
    of another size are fitted to it. With `audio_from`, that file's first
    audio stream is copied in unchanged (its codec must be one MP4 holds,
    as in any MP4 source). Returns width, height and video duration.
    """
    width, height = width - width % 2, height - height % 2
    if width < 2 or height < 2:
        raise ValueError(f"frame size {width}x{height} too small")
    rate = Fraction(fps)
    count = 0
    with atomic_path(dst) as tmp:
        with av.open(
            str(tmp), "w", format="mp4", container_options={"movflags": "+faststart"}
        ) as out:
            video = out.add_stream("libx264", rate=rate)
            video.width, video.height, video.pix_fmt = width, height, "yuv420p"
            video.options = {"preset": "veryfast", "crf": "23"}
            audio_in = _open_audio(audio_from)
            audio = out.add_stream_from_template(audio_in.streams.audio[0]) if audio_in else None
            try:
                for image in frames:
                    if image.size != (width, height):
                        image = ImageOps.fit(image, (width, height), LANCZOS)
                    frame = av.VideoFrame.from_image(image.convert("RGB"))
                    frame.pts, frame.time_base = count, 1 / rate
                    out.mux(video.encode(frame))
                    count += 1
                if count == 0:
                    raise ValueError("no frames to encode")
                out.mux(video.encode(None))
                if audio_in:
                    _copy_packets(audio_in, out, audio)
            finally:
                if audio_in:
                    audio_in.close()
    return width, height, float(count / rate)


def _upscaled_frames(container, stream, size, should_stop, counter: FrameCounter) -> Iterator[Image.Image]:
    for frame in container.decode(stream):
        if should_stop is not None and should_stop():
            raise Stopped()
        counter.tick()
        yield frame.to_image().resize(size, LANCZOS)


def _open_audio(path: str | Path | None):
    if path is None:
        return None
    container = open_media(path)  # probing it may decode a video frame: capped
    if not container.streams.audio:
        container.close()
        return None
    return container


def _copy_packets(container, out, out_stream) -> None:
    for packet in container.demux(container.streams.audio[0]):
        if packet.dts is None:  # the demuxer's flush packet
            continue
        packet.stream = out_stream
        out.mux(packet)


def _rgb_or_rgba(im: Image.Image) -> Image.Image:
    if im.mode in ("RGB", "RGBA"):
        return im
    has_alpha = "A" in im.getbands() or "transparency" in im.info
    return im.convert("RGBA" if has_alpha else "RGB")
