"""The `mediapipe-selfie` built-in model (`mask.segment` with MediaPipe's selfie
segmentation, weights inside its wheel), through the public API, on scikit-image's
bundled `astronaut` photo: the mask covers her face and leaves a background corner off."""

from __future__ import annotations

import io

from PIL import Image
from skimage import data

from test_builtin_speech import fetch
from test_generation_support import balance, submit, upload_ok, wait_hold, wait_status

SEGMENT = "/v1/generation/capabilities/mask.segment"


def on(mask: Image.Image) -> int:
    return mask.histogram()[255]


def off(mask: Image.Image) -> int:
    return mask.histogram()[0]


def astronaut_png() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(data.astronaut()).save(buf, "PNG")
    return buf.getvalue()


async def test_the_mask_covers_the_person_and_not_the_background(node):
    key = (await node.create_org())["api_key"]
    asset = await upload_ok(node, key, astronaut_png())
    rid = (await submit(node, key, {"prompt": "the astronaut", "inputs": {"image": [asset["id"]]}},
                        path=SEGMENT))["request_id"]
    st = await wait_status(node, key, rid, timeout=60)
    assert (st["status"], st["model"]) == ("completed", "mediapipe-selfie"), st
    [out] = st["outputs"]
    assert (out["content_type"], out["width"], out["height"]) == ("image/png", 512, 512)
    mask = Image.open(io.BytesIO(await fetch(node, key, out["url"])))
    assert mask.mode == "L" and on(mask) + off(mask) == 512 * 512  # black or white, nothing between
    assert on(mask.crop((180, 90, 260, 190))) / (80 * 100) > 0.9  # her face in the 512 x 512 photo
    assert on(mask.crop((0, 0, 60, 60))) == 0  # the wall behind her, top left
    assert 0.3 < on(mask) / (512 * 512) < 0.8
    assert (await wait_hold(node, key, rid, "captured"))["amount"] == "0.20"
    assert (await balance(node, key))["available"] == "199.80"


async def test_a_picture_without_anyone_gives_an_empty_mask(node):
    key = (await node.create_org())["api_key"]
    buf = io.BytesIO()
    Image.new("RGB", (256, 256), (30, 120, 200)).save(buf, "PNG")
    asset = await upload_ok(node, key, buf.getvalue())
    rid = (await submit(node, key, {"prompt": "a person", "inputs": {"image": [asset["id"]]}},
                        path=SEGMENT))["request_id"]
    st = await wait_status(node, key, rid, timeout=60)
    mask = Image.open(io.BytesIO(await fetch(node, key, st["outputs"][0]["url"])))
    assert mask.size == (256, 256) and on(mask) == 0
