"""The work a video input asks of a model: bounded at submit, and the render's time budget.

A 78 KB video can hold 30 seconds of frames; upscaling them all holds a model slot for
minutes. So a model may cap its video inputs (`max_input_seconds`, `max_input_frames`:
422 at submit, before any hold), and give a render with a video input a time budget that
follows the input: `timeout_s_per_megapixel` x frames x output megapixels, at least
`min_timeout_s`. A render whose budget would pass `timeout_s` is refused at submit (it
could only hold a slot and fail); one past its budget fails ("could not complete",
credits released) and frees its slot.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from service.errors import Unprocessable

from .assets import AssetInfo
from .catalog import Model

SCALE = re.compile(r"^([1-9][0-9]*)x$")
ASSUMED_FPS = 60  # frames a second assumed for a video stored before frame counts were kept


def check_video_inputs(m: Model, resolution: str, infos: Mapping[str, AssetInfo]) -> None:
    """422 for a video input longer, or with more frames, than the model takes, or for
    inputs whose render budget would pass the model's `timeout_s`."""
    for info in infos.values():
        if info.kind != "video":
            continue
        if m.max_input_seconds is not None and (info.duration_s or 0) > m.max_input_seconds:
            raise Unprocessable(
                f"{m.id} takes videos of at most {m.max_input_seconds:g} seconds; this one is "
                f"{info.duration_s:g} seconds.",
                {"model": m.id, "asset_id": info.id, "duration_s": info.duration_s,
                 "max_input_seconds": m.max_input_seconds})
        if m.max_input_frames is not None and (info.frames or 0) > m.max_input_frames:
            raise Unprocessable(
                f"{m.id} takes videos of at most {m.max_input_frames} frames; this one has {info.frames}.",
                {"model": m.id, "asset_id": info.id, "frames": info.frames,
                 "max_input_frames": m.max_input_frames})
    wanted = _wanted_s(m, resolution, infos)
    if wanted is not None and wanted > m.timeout_s:
        raise Unprocessable(
            f"{m.id} would need about {wanted} seconds for these video frames; the limit is {m.timeout_s} "
            "seconds. Send a shorter or smaller video.",
            {"model": m.id, "estimated_s": wanted, "timeout_s": m.timeout_s})


def render_budget(m: Model, resolution: str, infos: Mapping[str, AssetInfo]) -> int | None:
    """Seconds the render may take, from its video inputs; None when the model's
    `timeout_s` applies (no video input, or no per-megapixel rate set)."""
    wanted = _wanted_s(m, resolution, infos)
    if wanted is None:
        return None
    return min(max(wanted, m.min_timeout_s), m.timeout_s)


def _wanted_s(m: Model, resolution: str, infos: Mapping[str, AssetInfo]) -> int | None:
    """`timeout_s_per_megapixel` x output megapixels x frames of the video inputs."""
    if m.timeout_s_per_megapixel is None:
        return None
    scale = SCALE.match(resolution)
    factor = int(scale.group(1)) if scale else 1
    megapixel_frames = 0.0
    for info in infos.values():
        if info.kind != "video" or not info.width or not info.height:
            continue
        frames = info.frames or math.ceil((info.duration_s or 0) * ASSUMED_FPS)
        megapixel_frames += frames * info.width * info.height * factor * factor / 1e6
    if not megapixel_frames:
        return None
    return math.ceil(m.timeout_s_per_megapixel * megapixel_frames)
