"""The work a video input asks for (issue 22, M6): a 78 KB, 30 s video upscale held a model
slot for the whole 600 s timeout and then failed at no cost. Now a video input's duration
and frame count are bounded at submit (422, before any hold), a render that could not end
within the model's timeout is refused, and the render's budget follows its input. Times
are read on trio's mock clock."""

from __future__ import annotations

import pytest
import trio
from test_generation_support import (
    balance,
    holds,
    submit,
    upload_ok,
    wait_hold,
    wait_status,
)
from test_media_samples import DISTINCT, write_mp4

from service.catalog.catalog import load_catalog
from service.catalog.request import SubmitRequest
from service.catalog.rules import AssetInfo, plan_submit
from service.catalog.work import render_budget
from service.errors import Unprocessable

UPSCALE = "/v1/generation/capabilities/media.upscale"
PROJECT = "11111111-1111-1111-1111-111111111111"
VID = "aaaaaaaa-0000-0000-0000-000000000003"
INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def plan(cat, info: AssetInfo):
    return plan_submit(cat, capability="media.upscale", model=None, request=SubmitRequest(inputs={"media": [VID]}),
                       runnable=lambda m: True, resolve_inputs=lambda ids: {VID: info},
                       project_id=PROJECT, base_url=None)


def refusal(cat, info: AssetInfo) -> Unprocessable:
    with pytest.raises(Unprocessable) as exc:
        plan(cat, info)
    assert (exc.value.status, exc.value.code) == (422, "request.validation_failed")
    return exc.value


def video(width=64, height=48, duration_s=1.0, frames=24) -> AssetInfo:
    return AssetInfo(VID, "video", PROJECT, width, height, duration_s, frames)


def test_a_video_longer_than_the_model_takes_is_refused(cat):
    err = refusal(cat, video(duration_s=30.0, frames=30))
    assert err.message == "lanczos-upscale takes videos of at most 20 seconds; this one is 30 seconds."
    assert err.details == {"model": "lanczos-upscale", "asset_id": VID, "duration_s": 30.0,
                           "max_input_seconds": 20.0}
    assert plan(cat, video(duration_s=20.0, frames=30)).capability == "media.upscale"  # at the limit


def test_a_video_with_more_frames_than_the_model_takes_is_refused(cat):
    err = refusal(cat, video(duration_s=10.0, frames=1201))
    assert err.message == "lanczos-upscale takes videos of at most 1200 frames; this one has 1201."
    assert err.details == {"model": "lanczos-upscale", "asset_id": VID, "frames": 1201, "max_input_frames": 1200}
    assert plan(cat, video(duration_s=10.0, frames=1200)).settings.timeout_s == 60  # 14.7 MP-frames out: the floor


def test_a_video_that_could_not_be_rendered_within_the_timeout_is_refused(cat):
    # 1920 x 1080 made 3840 x 2160 (8.29 MP) x 145 frames x 0.5 s/MP = 601.3 s > 600 s
    err = refusal(cat, video(1920, 1080, 6.0, 145))
    assert err.message == ("lanczos-upscale would need about 602 seconds for these video frames; the limit is "
                           "600 seconds. Send a shorter or smaller video.")
    assert err.details == {"model": "lanczos-upscale", "estimated_s": 602, "timeout_s": 600}
    assert plan(cat, video(1920, 1080, 6.0, 144)).settings.timeout_s == 598  # 597.2 s, rounded up


def test_the_render_budget_follows_the_input_between_floor_and_ceiling(cat):
    m = cat.model("lanczos-upscale")
    assert render_budget(m, "2x", {VID: video(64, 48, 1.0, 24)}) == 60  # 0.3 MP-frames: the floor
    assert render_budget(m, "2x", {VID: video(1280, 720, 10.0, 240)}) == 443  # 884.7 MP-frames x 0.5
    assert render_budget(m, "2x", {VID: video(1280, 720, 2.0, None)}) == 222  # unknown count: 60 fps assumed
    assert render_budget(m, "2x", {VID: video(1280, 720, 10.0, 1200)}) == 600  # the ceiling, timeout_s
    image = AssetInfo(VID, "image", PROJECT, 2048, 2048)
    assert render_budget(m, "2x", {VID: image}) is None  # an image: the model's timeout_s
    assert plan(cat, image).settings.timeout_s is None


async def test_upload_then_upscale_of_a_30_second_video_is_refused_before_any_hold(node, tmp_path):
    """The probe's case: a small 30 s video (here 1 frame a second) sent to the upscale."""
    org = await node.create_org()
    key = org["api_key"]
    clip = write_mp4(tmp_path / "long.mp4", (DISTINCT * 5)[:30], size=(64, 48), fps=1)
    asset = await upload_ok(node, key, clip.read_bytes(), "video/mp4")
    assert asset["duration_s"] == 30.0
    r = await node.call("POST", UPSCALE, key, json={"inputs": {"media": [asset["id"]]}})
    body = await r.get_json()
    assert r.status_code == 422
    body["error"].pop("request_id")
    assert body == {"error": {
        "code": "request.validation_failed",
        "message": "lanczos-upscale takes videos of at most 20 seconds; this one is 30 seconds.",
        "details": {"model": "lanczos-upscale", "asset_id": asset["id"], "duration_s": 30.0,
                    "max_input_seconds": 20.0}}}
    assert await holds(node, key) == []


async def test_a_video_render_past_its_budget_fails_at_the_budget_not_the_timeout(node, tmp_path, mock_clock):
    """A 2 s clip's upscale gets the 60 s floor; a render with no outcome fails then (not at
    600 s), its hold released and its slot free."""
    org = await node.create_org()
    key = org["api_key"]
    clip = write_mp4(tmp_path / "short.mp4", DISTINCT * 4, size=(64, 48), fps=12)
    asset = await upload_ok(node, key, clip.read_bytes(), "video/mp4")  # a worker thread: clock still
    mock_clock.autojump_threshold = 0
    rid = (await submit(node, key, {"prompt": "[[delay:3600]]", "inputs": {"media": [asset["id"]]}},
                        path=UPSCALE))["request_id"]
    await wait_status(node, key, rid, wanted=("rendering",))
    started = trio.current_time()
    st = await wait_status(node, key, rid, timeout=3600)
    assert (st["status"], st["error"]) == ("failed", INCOMPLETE)
    assert 60 <= trio.current_time() - started < 61
    assert (await wait_hold(node, key, rid, "released"))["captured"] is None
    assert (await balance(node, key))["held"] == "0.00"
    assert node.parts.generation.slots.stats("lanczos-upscale") == (0, 0)  # its slot is free
