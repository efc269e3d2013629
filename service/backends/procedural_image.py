"""`procedural_image`: a deterministic landscape-like picture from prompt and seed.

No model weights: a hash of (seed, prompt) picks a palette and a layout, and
Pillow paints a sky gradient, a glowing sun or moon, drifting haze and layered
ridges fading toward the horizon. Same prompt and seed, same bytes; change
either and the picture changes. It is honest filler for a self-hosted node
without a GPU, and fast (a 2k render well under a second).
"""

from __future__ import annotations

import colorsys
import hashlib
import random
import threading
from pathlib import Path

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


def paint(prompt: str, seed: int, width: int, height: int) -> Image.Image:
    """The picture for (prompt, seed) at this size, as RGB."""
    digest = hashlib.sha256(f"{seed}\x00{prompt}".encode()).digest()
    rng = random.Random(digest)
    palette = _palette(rng)
    horizon = rng.uniform(0.45, 0.7)

    image = _sky(width, height, palette["zenith"], palette["horizon"], horizon)
    _glow(image, rng, palette["sun"], horizon)
    _haze(image, rng, palette["haze"], horizon)
    _ridges(image, rng, palette, horizon)
    return image


def _palette(rng: random.Random) -> dict[str, RGB]:
    """Colours from one base hue and a scheme (analogous, complementary, split)."""
    base = rng.random()
    night = rng.random() < 0.3
    offset = rng.choice([0.08, 0.5, 0.42, 0.58])
    val = 0.35 if night else 0.95

    def hsv(h: float, s: float, v: float) -> RGB:
        r, g, b = colorsys.hsv_to_rgb(h % 1.0, min(1.0, s), min(1.0, v))
        return round(r * 255), round(g * 255), round(b * 255)

    return {
        "zenith": hsv(base, rng.uniform(0.5, 0.9), val * rng.uniform(0.45, 0.8)),
        "horizon": hsv(base + offset, rng.uniform(0.25, 0.6), val),
        "sun": hsv(base + offset + 0.05, rng.uniform(0.1, 0.45), 1.0),
        "haze": hsv(base + offset, 0.15, min(1.0, val + 0.1)),
        "far": hsv(base + 0.5 * offset, rng.uniform(0.2, 0.45), val * 0.75),
        "near": hsv(base - offset / 2, rng.uniform(0.5, 0.85), rng.uniform(0.08, 0.22)),
    }


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
