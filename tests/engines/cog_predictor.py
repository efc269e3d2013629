"""A small real Cog predictor for the tests and the engines bench: Pillow draws a
picture from the prompt and seed. A prompt containing `[slow:S]` takes S seconds
(cancel and capacity tests); `[fail]` raises inside the predictor (a failed prediction);
`[empty]` returns no file."""

import hashlib
import re
import tempfile
import time

from cog import BasePredictor, Input, Path
from PIL import Image, ImageDraw


class Predictor(BasePredictor):
    def setup(self) -> None:
        self.out_dir = Path(tempfile.mkdtemp(prefix="cog-out-"))

    def predict(
        self,
        prompt: str = Input(default=""),
        seed: int = Input(default=0),
        width: int = Input(default=64),
        height: int = Input(default=64),
    ) -> Path:
        slow = re.search(r"\[slow:([\d.]+)\]", prompt)
        if slow:  # in short naps: Cog's cancel lands between them
            end = time.monotonic() + float(slow.group(1))
            while time.monotonic() < end:
                time.sleep(0.05)
        if "[fail]" in prompt:
            raise RuntimeError("the predictor was asked to fail")
        if "[empty]" in prompt:
            return None
        digest = hashlib.sha256(f"{seed}:{prompt}".encode()).digest()
        image = Image.new("RGB", (width, height), tuple(digest[:3]))
        ImageDraw.Draw(image).ellipse((width // 4, height // 4, 3 * width // 4, 3 * height // 4), fill=tuple(digest[3:6]))
        path = self.out_dir / f"{digest.hex()[:16]}.png"
        image.save(path)
        return Path(path)
