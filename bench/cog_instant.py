"""An instant Cog predictor that takes many predictions at once (bench only).

Async `predict`, so Cog runs up to COG_MAX_CONCURRENCY of them together (a sync predictor is
refused above 1). It returns a 64x64 PNG made once at setup: the engine costs next to
nothing, and whatever bounds jobs per second through a node in front of it is the node.
BENCH_PREDICT_S (0 unless set) makes each prediction wait that long first, as a GPU would
(bench/fleet.py `--seconds`).
Started by bench/engines.py and bench/profile_job.py (`InstantCog`).
"""

import asyncio
import io
import os
import tempfile

from cog import BasePredictor, Input, Path
from PIL import Image


class Predictor(BasePredictor):
    def setup(self) -> None:
        self.out_dir = Path(tempfile.mkdtemp(prefix="cog-instant-"))
        buf = io.BytesIO()
        Image.new("RGB", (64, 64), (40, 90, 160)).save(buf, format="PNG")
        self.png = buf.getvalue()
        self.n = 0
        self.seconds = float(os.environ.get("BENCH_PREDICT_S", "0"))  # a GPU's time a job (bench/fleet.py)

    async def predict(self, prompt: str = Input(default=""), seed: int = Input(default=0)) -> Path:
        self.n += 1
        if self.seconds:
            await asyncio.sleep(self.seconds)
        path = self.out_dir / f"out-{self.n}.png"
        path.write_bytes(self.png)
        return Path(path)
