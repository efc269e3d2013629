"""`selfie_segment`: `mask.segment` of people, with MediaPipe's selfie segmentation.

A real segmentation network (a small TFLite model, ~250 KB) that ships inside the
`mediapipe` 0.10.21 wheel, so it runs on a CPU with nothing downloaded at run time.
It finds **people only**: whatever the prompt names, the mask is the people in the
image (the prompt is kept on the job, but it does not steer this model). The output is
a PNG mask the size of the input: white (255) where a person is, black elsewhere
(the network's confidence cut at 0.5).

`mediapipe` is an optional dependency (`pip install 'genservice[segment]'`; it needs
numpy<2): without it the model is listed as unavailable. Its import takes a few
seconds, so it is done on the first job, in the worker thread.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

from PIL import Image

from .base import MSG_INCOMPLETE, BackendError, Output, RenderRequest

THRESHOLD = 0.5
_lock = threading.Lock()  # one graph at a time: the import and the runs are not thread-safe


def available() -> bool:
    return importlib.util.find_spec("mediapipe") is not None


def run(req: RenderRequest, stop: threading.Event) -> list[Output]:
    images = req.inputs.get("image") or []
    if len(images) != 1 or images[0].kind != "image":
        raise BackendError(MSG_INCOMPLETE)
    import numpy as np

    with Image.open(images[0].path) as im:
        rgb = np.asarray(im.convert("RGB"))
    with _lock:
        if stop.is_set():
            return []
        from mediapipe.python.solutions.selfie_segmentation import SelfieSegmentation

        with SelfieSegmentation(model_selection=0) as seg:
            result = seg.process(rgb)
    confidence = result.segmentation_mask
    if confidence is None:
        raise BackendError(MSG_INCOMPLETE)
    mask = Image.fromarray(np.where(confidence > THRESHOLD, 255, 0).astype(np.uint8), mode="L")
    Path(req.work_dir).mkdir(parents=True, exist_ok=True)
    path = Path(req.work_dir) / f"{req.job_id}.png"
    mask.save(path, "PNG")
    return [Output(path, "image/png", "mask", mask.width, mask.height, None)]
