"""The built-in image model follows the prompt as far as a palette can: colour words set the
sky's hue, night words darken it, winter words whiten the ridges (docs/engines.md)."""

from __future__ import annotations

import colorsys

from service.backends.procedural_image import cues, paint


def sky(prompt: str, seed: int) -> tuple[float, float, float]:
    """Hue, saturation and value of the picture's top band, averaged."""
    im = paint(prompt, seed, 256, 256)
    r, g, b = im.crop((0, 0, 256, 40)).resize((1, 1)).getpixel((0, 0))
    return colorsys.rgb_to_hsv(r / 255, g / 255, b / 255)


def hue_distance(a: float, b: float) -> float:
    d = abs(a - b) % 1.0
    return min(d, 1.0 - d)


def test_words_the_palette_takes():
    assert cues("A RED fox, in the snow at dawn.") == {"hue": 0.0, "night": False, "day": False,
                                                 "warm": True, "winter": True}
    assert cues("a lighthouse on a cliff") == {"hue": None, "night": False, "day": False,
                                                 "warm": False, "winter": False}
    assert cues("blue hills, then a green field")["hue"] == 0.6  # the first colour named


def test_a_colour_word_sets_the_sky_over_any_seed():
    for word, hue in (("red", 0.0), ("green", 0.33), ("blue", 0.6), ("purple", 0.77)):
        for seed in range(6):
            h, s, _ = sky(f"a {word} landscape", seed)
            assert s > 0.2 and hue_distance(h, hue) < 0.1, (word, seed, h)


def test_night_is_darker_than_day_and_snow_is_pale():
    for seed in range(6):
        assert sky("hills at night", seed)[2] < sky("hills at noon, sunny", seed)[2] - 0.2
        im = paint("mountains in the snow at noon", seed, 256, 256)
        r, g, b = im.crop((0, 216, 256, 256)).resize((1, 1)).getpixel((0, 0))
        assert min(r, g, b) > 150, (seed, (r, g, b))  # the near ridges are snow, not dark rock
        rock = paint("mountains at noon", seed, 256, 256).crop((0, 216, 256, 256)).resize((1, 1)).getpixel((0, 0))
        assert max(rock) < 120, (seed, rock)
