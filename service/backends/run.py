"""Run a render: test-mode directives, then the backend's work in a worker thread.

The job actor awaits `render` in a child task. Cancelling that task returns
at once: the worker thread is abandoned and told to stop, and it stops at its
next frame without writing its output.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import trio

from . import camera_move_video, espeak_speech, lanczos_upscale, procedural_image, selfie_segment
from .base import (
    MSG_INTERNAL,
    MSG_NO_OUTPUT,
    MSG_UNAVAILABLE,
    BackendError,
    Completed,
    Failed,
    Flagged,
    Output,
    RenderRequest,
)
from .directives import parse_directives

log = logging.getLogger(__name__)


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Backend:
    name: str
    capability: str
    run: Callable[[RenderRequest, threading.Event], list[Output]]  # blocking
    available: Callable[[], bool] = _always


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in [
        Backend("procedural_image", "image.generate", procedural_image.run),
        Backend(
            "camera_move_video",
            "video.generate",
            camera_move_video.run,
            camera_move_video.available,
        ),
        Backend("lanczos_upscale", "media.upscale", lanczos_upscale.run),
        Backend("espeak_speech", "audio.speech", espeak_speech.run, espeak_speech.available),
        Backend("selfie_segment", "mask.segment", selfie_segment.run, selfie_segment.available),
    ]
}

def render_limiter() -> trio.CapacityLimiter:
    """One per node (the jobs feature holds it): CPU-bound renders at once, one per core.
    Not a module global: a limiter outlives trio runs and would keep slots of threads that
    an ended run abandoned."""
    return trio.CapacityLimiter(os.cpu_count() or 1)


def runnable(backend_name: str) -> bool:
    """Whether this node can run the backend (known, and its codecs present)."""
    backend = BACKENDS.get(backend_name)
    return backend is not None and backend.available()


async def render(
    req: RenderRequest, *, limiter: trio.CapacityLimiter | None = None
) -> Completed | Failed | Flagged:
    """The outcome of one job's render; never raises except trio.Cancelled. Without a
    `limiter` the render is limited only by trio's default thread limiter."""
    backend = BACKENDS.get(req.backend)
    if backend is None or not backend.available():
        log.error("job %s: backend %r is not runnable here", req.job_id, req.backend)
        return Failed(MSG_UNAVAILABLE)
    if req.test_mode:
        prompt, directives = parse_directives(req.prompt)
        if directives.delay_s:
            await trio.sleep(directives.delay_s)
        if directives.failure:
            return Failed(directives.failure)
        if directives.nsfw:
            return Flagged()
        req = replace(req, prompt=prompt)
    try:
        outputs = await _in_thread(backend.run, req, limiter or trio.to_thread.current_default_thread_limiter())
    except BackendError as e:
        log.warning("job %s: %s failed: %s", req.job_id, req.backend, e.message)
        return Failed(e.message)
    except Exception:
        log.exception("job %s: backend %s crashed", req.job_id, req.backend)
        return Failed(MSG_INTERNAL)
    if not outputs or not all(o.path.is_file() for o in outputs):
        log.error("job %s: backend %s wrote no output", req.job_id, req.backend)
        return Failed(MSG_NO_OUTPUT)
    return Completed(outputs)


async def _in_thread(fn: Callable[[RenderRequest, threading.Event], list[Output]], req: RenderRequest,
                     limiter: trio.CapacityLimiter) -> list[Output]:
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(
            fn, req, stop, limiter=limiter, abandon_on_cancel=True
        )
    except trio.Cancelled:
        stop.set()
        raise
