"""`procedural_image`: a deterministic landscape-like picture from prompt and seed.

No model weights: a hash of (seed, prompt) picks a palette and a layout, and
Pillow paints a sky gradient, a glowing sun or moon, drifting haze and layered
ridges fading toward the horizon. Same prompt and seed, same bytes; change
either and the picture changes. It is honest filler for a self-hosted node
without a GPU, and fast (a 2k render well under a second).

It follows the prompt only as far as a palette can, and says no more than that:
a colour word sets the sky's hue ("a red fox" gives a red sky, not a fox), a
night word ("night", "moon", "stars") a dark sky, a day word ("noon") a bright one,
a dawn or dusk word a warm horizon, a winter word ("snow", "ice") pale ridges
(`cues`).
"""

from __future__ import annotations

import colorsys
import hashlib
import random
import threading
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFilter

from ..media.ops import save_png
from .base import Output, RenderRequest

ASPECT_RATIOS = ["1:1", "4:3", "3:4", "3:2", "2:3", "16:9", "9:16", "21:9", "4:5", "5:4"]
RESOLUTIONS = {"1k": 1024, "2k": 2048}  # long side in pixels

RGB = tuple[int, int, int]


def image_size(aspect_ratio: str | None, resolution: str) -> tuple[int, int]:
    """Width and height: long side from the resolution, both multiples of 16."""
    if resolution not in RESOLUTIONS:
        raise ValueError(f"unknown resolution {resolution!r}")
    ratio = aspect_ratio or "1:1"
    if ratio not in ASPECT_RATIOS:
        raise ValueError(f"unknown aspect ratio {ratio!r}")
    w, h = (int(x) for x in ratio.split(":"))
    long = RESOLUTIONS[resolution]
    short = max(16, round(long * min(w, h) / max(w, h) / 16) * 16)
    return (long, short) if w >= h else (short, long)


def run(req: RenderRequest, stop: threading.Event) -> list[Output]:
    width, height = image_size(req.aspect_ratio, req.resolution)
    image = paint(req.prompt, req.seed, width, height)
    Path(req.work_dir).mkdir(parents=True, exist_ok=True)
    path = Path(req.work_dir) / f"{req.job_id}.png"
    save_png(image, path)
    return [Output(path, "image/png", "image", width, height, None)]


COLOURS = {  # word -> hue (0..1)
    "red": 0.0, "crimson": 0.97, "scarlet": 0.99, "orange": 0.07, "amber": 0.1, "gold": 0.13, "golden": 0.13,
    "yellow": 0.15, "green": 0.33, "emerald": 0.38, "teal": 0.47, "turquoise": 0.48, "cyan": 0.5, "blue": 0.6,
    "azure": 0.58, "navy": 0.64, "indigo": 0.7, "purple": 0.77, "violet": 0.75, "lavender": 0.74,
    "magenta": 0.85, "pink": 0.93, "rose": 0.95,
}
NIGHT = {"night", "midnight", "moon", "moonlit", "moonlight", "stars", "starry", "nocturnal"}
DAY = {"day", "daylight", "daytime", "noon", "midday", "morning", "sunny", "afternoon"}
WARM = {"dawn", "sunrise", "sunset", "dusk", "twilight", "evening"}
WINTER = {"snow", "snowy", "winter", "ice", "icy", "frozen", "glacier", "frost", "frosty"}


def cues(prompt: str) -> dict[str, Any]:
    """What the palette takes from the prompt's words: the first colour's hue, night or day,
    a warm horizon, winter."""
    words = [w.strip(".,;:!?\"'()[]") for w in prompt.lower().split()]
    hue = next((COLOURS[w] for w in words if w in COLOURS), None)
    found = set(words)
    return {"hue": hue, "night": bool(found & NIGHT), "day": bool(found & DAY), "warm": bool(found & WARM),
            "winter": bool(found & WINTER)}


def paint(prompt: str, seed: int, width: int, height: int) -> Image.Image:
    """The picture for (prompt, seed) at this size, as RGB."""
    digest = hashlib.sha256(f"{seed}\x00{prompt}".encode()).digest()
    rng = random.Random(digest)
    palette = _palette(rng, cues(prompt))
    horizon = rng.uniform(0.45, 0.7)

    image = _sky(width, height, palette["zenith"], palette["horizon"], horizon)
    _glow(image, rng, palette["sun"], horizon)
    _haze(image, rng, palette["haze"], horizon)
    _ridges(image, rng, palette, horizon)
    return image


def _palette(rng: random.Random, cue: dict[str, Any] | None = None) -> dict[str, RGB]:
    """Colours from one base hue and a scheme (analogous, complementary, split); the prompt's
    cues, when it has any, fix the hue (kept analogous so the named colour fills the sky),
    night or day, a warm horizon, pale winter ridges."""
    cue = cue or {"hue": None, "night": False, "day": False, "warm": False, "winter": False}
    base = rng.random()
    night = rng.random() < 0.3
    offset = rng.choice([0.08, 0.5, 0.42, 0.58])
    if cue["hue"] is not None:
        base, offset = cue["hue"] + rng.uniform(-0.02, 0.02), rng.choice([0.04, -0.04, 0.08])
    if cue["night"] or cue["day"] or cue["warm"] or cue["hue"] is not None:
        night = cue["night"]  # a named colour or time of day is seen in daylight unless night is named
    val = 0.35 if night else 0.95

    def hsv(h: float, s: float, v: float) -> RGB:
        r, g, b = colorsys.hsv_to_rgb(h % 1.0, min(1.0, s), min(1.0, v))
        return round(r * 255), round(g * 255), round(b * 255)

    colours = {
        "zenith": hsv(base, rng.uniform(0.5, 0.9), val * rng.uniform(0.45, 0.8)),
        "horizon": hsv(base + offset, rng.uniform(0.25, 0.6), val),
        "sun": hsv(base + offset + 0.05, rng.uniform(0.1, 0.45), 1.0),
        "haze": hsv(base + offset, 0.15, min(1.0, val + 0.1)),
        "far": hsv(base + 0.5 * offset, rng.uniform(0.2, 0.45), val * 0.75),
        "near": hsv(base - offset / 2, rng.uniform(0.5, 0.85), rng.uniform(0.08, 0.22)),
    }
    if cue["warm"]:  # the sun low on an orange horizon
        colours["horizon"] = hsv(0.06, 0.65, 1.0 if not night else 0.6)
        colours["sun"] = hsv(0.1, 0.45, 1.0)
    if cue["winter"]:  # snow on the ridges: pale, slightly blue, the near ones in shade
        colours["far"] = hsv(0.6, 0.06, 0.95 if not night else 0.6)
        colours["near"] = hsv(0.6, 0.12, 0.85 if not night else 0.45)
    return colours


def _sky(width: int, height: int, top: RGB, bottom: RGB, horizon: float) -> Image.Image:
    """Vertical gradient from `top` to `bottom`, reaching `bottom` at the horizon."""
    ramp = Image.linear_gradient("L").resize((1, max(2, round(height * horizon))))
    mask = Image.new("L", (1, height), 255)
    mask.paste(ramp, (0, 0))
    mask = mask.resize((width, height))
    image = Image.new("RGB", (width, height), top)
    image.paste(bottom, (0, 0, width, height), mask)
    return image


def _glow(image: Image.Image, rng: random.Random, colour: RGB, horizon: float) -> None:
    """A soft disc with a wide halo, painted small and scaled up (blur is cheap there)."""
    w, h = image.size
    small = (max(8, w // 8), max(8, h // 8))
    cx = rng.uniform(0.15, 0.85) * small[0]
    cy = rng.uniform(0.15, horizon * 0.85) * small[1]
    r = rng.uniform(0.04, 0.09) * min(small)
    halo = Image.new("L", small, 0)
    draw = ImageDraw.Draw(halo)
    for i, alpha in enumerate((40, 70, 110)):
        k = 4.0 - i * 1.1
        draw.ellipse((cx - r * k, cy - r * k, cx + r * k, cy + r * k), fill=alpha)
    halo = halo.filter(ImageFilter.GaussianBlur(r * 1.2)).resize((w, h), Image.Resampling.BILINEAR)
    image.paste(colour, (0, 0, w, h), halo)

    disc = Image.new("L", (w, h), 0)
    R, X, Y = r * 8, cx * w / small[0], cy * h / small[1]
    ImageDraw.Draw(disc).ellipse((X - R, Y - R, X + R, Y + R), fill=235)
    image.paste(colour, (0, 0, w, h), disc)


def _haze(image: Image.Image, rng: random.Random, colour: RGB, horizon: float) -> None:
    """A few long translucent cloud bands across the sky."""
    w, h = image.size
    small = (max(8, w // 8), max(8, h // 8))
    mask = Image.new("L", small, 0)
    draw = ImageDraw.Draw(mask)
    for _ in range(rng.randint(3, 7)):
        y = rng.uniform(0.05, horizon) * small[1]
        x = rng.uniform(-0.2, 0.8) * small[0]
        length = rng.uniform(0.3, 0.9) * small[0]
        thick = rng.uniform(0.01, 0.035) * small[1]
        draw.ellipse((x, y - thick, x + length, y + thick), fill=rng.randint(40, 110))
    mask = mask.filter(ImageFilter.GaussianBlur(small[1] * 0.015)).resize((w, h), Image.Resampling.BILINEAR)
    image.paste(colour, (0, 0, w, h), mask)


def _ridges(image: Image.Image, rng: random.Random, palette: dict[str, RGB], horizon: float) -> None:
    """Layered ridge silhouettes, far ones pale and high, near ones dark and low."""
    w, h = image.size
    layers = rng.randint(3, 5)
    roughness = rng.uniform(0.35, 0.6)
    draw = ImageDraw.Draw(image)
    for i in range(layers):
        t = i / max(1, layers - 1)
        colour = _mix(palette["far"], palette["near"], t)
        base = h * (horizon + (1 - horizon) * 0.6 * t)
        amplitude = h * (0.16 - 0.08 * t) * rng.uniform(0.7, 1.3)
        heights = _ridge_line(rng, 2 ** rng.randint(5, 7), roughness)
        step = w / (len(heights) - 1)
        points = [(j * step, base - amplitude * y) for j, y in enumerate(heights)]
        draw.polygon([(0, h), *points, (w, h)], fill=colour)


def _ridge_line(rng: random.Random, segments: int, roughness: float) -> list[float]:
    """Midpoint displacement: `segments + 1` heights in about [-1, 1]."""
    heights = [0.0] * (segments + 1)
    heights[0], heights[-1] = rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5)
    step, scale = segments, 1.0
    while step > 1:
        half = step // 2
        for left in range(0, segments, step):
            mid = (heights[left] + heights[left + step]) / 2
            heights[left + half] = mid + rng.uniform(-scale, scale)
        step, scale = half, scale * roughness
    return heights


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b))  # type: ignore[return-value]
