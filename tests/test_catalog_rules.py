"""Submit rules: exact 422/503 texts of the spec, and the fixed order of checks."""

import pytest

from service.catalog.catalog import load_catalog, loads_catalog
from service.catalog.request import SubmitRequest
from service.catalog.rules import AssetInfo, estimate, plan_submit
from service.errors import NotFound, Unavailable, Unprocessable

BASE = "https://gen.example"
PROJECT = "11111111-1111-1111-1111-111111111111"
OTHER = "22222222-2222-2222-2222-222222222222"
IMG = "aaaaaaaa-0000-0000-0000-000000000001"
IMG2 = "aaaaaaaa-0000-0000-0000-000000000002"
VID = "aaaaaaaa-0000-0000-0000-000000000003"
AUD = "aaaaaaaa-0000-0000-0000-000000000004"
ELSEWHERE = "aaaaaaaa-0000-0000-0000-000000000005"
GONE = "aaaaaaaa-0000-0000-0000-000000000006"

ASSETS = {
    IMG: AssetInfo(IMG, "image", PROJECT),
    IMG2: AssetInfo(IMG2, "image", PROJECT),
    VID: AssetInfo(VID, "video", PROJECT),
    AUD: AssetInfo(AUD, "audio", PROJECT),
    ELSEWHERE: AssetInfo(ELSEWHERE, "image", OTHER),
}


def resolve(ids):
    return {i: ASSETS.get(i) for i in ids}


def everything(_model):
    return True


def nothing(_model):
    return False


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def plan(cat, body, *, capability=None, model=None, runnable=everything, catalog=None):
    return plan_submit(
        catalog or cat, capability=capability, model=model, request=SubmitRequest(**body),
        runnable=runnable, resolve_inputs=resolve, project_id=PROJECT, base_url=BASE,
    )


def refused(cat, body, *, exc=Unprocessable, **kw):
    with pytest.raises(exc) as e:
        plan(cat, body, **kw)
    return e.value


CLIP = {"prompt": "a slow pan", "inputs": {"start_frame": [IMG]}}


def test_image_plan_with_defaults(cat):
    p = plan(cat, {"prompt": "a red fox"}, capability="image.generate")
    assert (p.capability, p.model, p.backend) == ("image.generate", "proc-image", "procedural_image")
    s = p.settings
    assert (s.resolution, s.duration, s.tier, p.price_uc, p.credits) == ("1k", None, "1k", 1_000_000, "1.00")
    assert (p.prompt, s.aspect_ratio, s.inputs, s.seed) == ("a red fox", None, {}, None)


def test_video_plan_by_model_route_with_url_input(cat):
    body = {
        "prompt": "pan", "resolution": "720p", "duration": 5, "aspect_ratio": "9:16", "seed": 7,
        "inputs": {"start_frame": [f"{BASE}/v1/generation/assets/{IMG}/content"]},
    }
    p = plan(cat, body, model="camera-move")
    assert (p.capability, p.model, p.settings.resolution, p.settings.duration, p.settings.tier) == (
        "video.generate", "camera-move", "720p", 5, "720p/5s",
    )
    assert (p.price_uc, p.settings.aspect_ratio, p.settings.seed) == (20_000_000, "9:16", 7)
    assert p.settings.inputs == {"start_frame": (IMG,)}


@pytest.mark.parametrize(("seed", "expected"), [(7, 7), (12.9, 12), (-3.0, -3), (None, None), ("7", None), (True, None),
                                             (2 ** 31 - 1, 2 ** 31 - 1), (2 ** 31 + 5, 5), (1e308, int(1e308) % 2 ** 31),
                                             (10 ** 30, 10 ** 30 % 2 ** 31)])
def test_seed_is_passed_on_as_a_whole_number(cat, seed, expected):
    assert plan(cat, {"prompt": "x", "seed": seed}, capability="image.generate").settings.seed == expected


def test_video_duration_defaults_and_accepts_whole_float(cat):
    assert plan(cat, CLIP, capability="video.generate").settings.duration == 5
    assert plan(cat, {**CLIP, "duration": 5.0}, capability="video.generate").settings.duration == 5


def test_upscale_needs_no_prompt_and_takes_image_or_video(cat):
    for asset in (IMG, VID):
        p = plan(cat, {"inputs": {"media": [asset]}}, capability="media.upscale")
        assert (p.model, p.settings.resolution, p.credits, p.settings.inputs) == ("lanczos-upscale", "2x", "0.50", {"media": (asset,)})


def test_signed_url_counts_as_input(cat):
    body = {**CLIP, "inputs": {"start_frame": [f"{BASE}/files/{IMG}?expires=1&sig=ab"]}}
    assert plan(cat, body, capability="video.generate").settings.inputs == {"start_frame": (IMG,)}


# --- model ------------------------------------------------------------------

@pytest.mark.parametrize("cap", ["image.edit", "video.lipsync", "text.llm"])
def test_capability_without_model(cat, cap):
    e = refused(cat, {"prompt": "x"}, capability=cap)
    assert e.message == f"No model implements {cap} yet."
    assert (e.status, e.code) == (422, "request.validation_failed")


def test_unknown_model_on_model_route_lists_every_model(cat):
    e = refused(cat, {"prompt": "x"}, model="dall-x")
    assert e.message == "Unknown model 'dall-x'. Known: proc-image, camera-move, lanczos-upscale, espeak-ng, mediapipe-selfie."
    assert e.details["model"] == "dall-x"


def test_unknown_model_in_body_lists_the_capabilitys_models(cat):
    e = refused(cat, {"prompt": "x", "model": "dall-x"}, capability="image.generate")
    assert e.message == "Unknown model 'dall-x'. Known: proc-image."


def test_model_of_another_capability_is_unknown_for_this_one(cat):
    e = refused(cat, {"prompt": "x", "model": "camera-move"}, capability="image.generate")
    assert e.message == "Unknown model 'camera-move'. Known: proc-image."


def test_body_model_must_match_the_model_route(cat):
    assert plan(cat, {"prompt": "x", "model": "proc-image"}, model="proc-image").model == "proc-image"
    e = refused(cat, {"prompt": "x", "model": "camera-move"}, model="proc-image")
    assert e.message == "Unknown model 'camera-move'. Known: proc-image."


def test_unknown_capability_is_not_found(cat):
    e = refused(cat, {"prompt": "x"}, capability="image.dream", exc=NotFound)
    assert e.status == 404


# --- availability -----------------------------------------------------------

def test_model_on_missing_backend_is_503_with_model(cat):
    e = refused(cat, {"prompt": "x"}, capability="image.generate", runnable=nothing, exc=Unavailable)
    assert (e.status, e.code) == (503, "request.service_unavailable")
    assert e.message == "Model proc-image is not available on this deployment."
    assert e.details == {"model": "proc-image"}


TWO_IMAGE_MODELS = """
[[models]]
id = "remote-image"
capability = "image.generate"
backend = "remote"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "5" }]

[[models]]
id = "local-image"
capability = "image.generate"
backend = "local"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "1" }]
"""


def test_omitted_model_takes_the_first_runnable_one(cat):
    custom = loads_catalog(TWO_IMAGE_MODELS)
    only_local = lambda m: m.backend == "local"  # noqa: E731
    p = plan(cat, {"prompt": "x"}, capability="image.generate", runnable=only_local, catalog=custom)
    assert p.model == "local-image"
    assert plan(cat, {"prompt": "x"}, capability="image.generate", catalog=custom).model == "remote-image"
    e = refused(cat, {"prompt": "x"}, capability="image.generate", runnable=nothing, catalog=custom, exc=Unavailable)
    assert e.details == {"model": "remote-image"}


def test_a_named_model_on_a_missing_backend_is_not_replaced(cat):
    custom = loads_catalog(TWO_IMAGE_MODELS)
    only_local = lambda m: m.backend == "local"  # noqa: E731
    e = refused(cat, {"prompt": "x", "model": "remote-image"}, capability="image.generate",
                runnable=only_local, catalog=custom, exc=Unavailable)
    assert e.message == "Model remote-image is not available on this deployment."


# --- prompt, aspect_ratio, resolution, duration, quality ----------------------

@pytest.mark.parametrize("prompt", [None, "", "   "])
def test_prompt_is_required(cat, prompt):
    body = {} if prompt is None else {"prompt": prompt}
    assert refused(cat, body, capability="image.generate").message == "prompt is required."


def test_aspect_ratio_must_be_listed(cat):
    e = refused(cat, {"prompt": "x", "aspect_ratio": "7:5"}, capability="image.generate")
    assert e.message == "aspect_ratio must be one of 1:1, 4:3, 3:4, 3:2, 2:3, 16:9, 9:16, 21:9, 4:5, 5:4."


def test_aspect_ratio_on_a_capability_without_ratios(cat):
    e = refused(cat, {"aspect_ratio": "1:1", "inputs": {"media": [IMG]}}, capability="media.upscale")
    assert e.message == "media.upscale has no aspect_ratio setting."


def test_resolution_must_be_listed(cat):
    e = refused(cat, {"prompt": "x", "resolution": "4k"}, capability="image.generate")
    assert e.message == "proc-image resolution must be one of 1k, 2k."
    e = refused(cat, {**CLIP, "resolution": "1080p"}, capability="video.generate")
    assert e.message == "camera-move resolution must be one of 480p, 720p."


@pytest.mark.parametrize("duration", [10, 5.5, 0, True])
def test_duration_must_be_listed(cat, duration):
    e = refused(cat, {**CLIP, "duration": duration}, capability="video.generate")
    assert e.message == "camera-move duration must be one of 5 seconds."


def test_duration_on_a_model_without_durations(cat):
    e = refused(cat, {"prompt": "x", "duration": 5}, capability="image.generate")
    assert e.message == "proc-image has no duration setting."


def test_quality_is_refused(cat):
    e = refused(cat, {"prompt": "x", "quality": "high"}, capability="image.generate")
    assert e.message == "proc-image has no quality setting."


# --- inputs -----------------------------------------------------------------

@pytest.mark.parametrize("given", [[], [IMG, IMG2]])
def test_slot_count(cat, given):
    e = refused(cat, {"prompt": "x", "inputs": {"start_frame": given}}, capability="video.generate")
    assert e.message == f"video.generate on camera-move: slot 'start_frame' takes 1 asset(s); got {len(given)}."


def test_missing_inputs_object_counts_as_zero(cat):
    e = refused(cat, {"prompt": "x"}, capability="video.generate")
    assert e.message == "video.generate on camera-move: slot 'start_frame' takes 1 asset(s); got 0."


def test_unknown_slot(cat):
    e = refused(cat, {**CLIP, "inputs": {"start_frame": [IMG], "end_frame": [IMG2]}}, capability="video.generate")
    assert e.message == "video.generate on camera-move: unknown slot 'end_frame'. Known: start_frame."
    e = refused(cat, {"prompt": "x", "inputs": {"image": [IMG]}}, capability="image.generate")
    assert e.message == "image.generate on proc-image: unknown slot 'image'. Known: none."


@pytest.mark.parametrize("value", [
    "https://elsewhere.example/cat.png",
    f"https://evil.example/v1/generation/assets/{IMG}/content",
    f"{BASE}/v1/generation/assets/{IMG}",
    "not-an-id",
])
def test_inputs_must_be_ours(cat, value):
    e = refused(cat, {"prompt": "x", "inputs": {"start_frame": [value]}}, capability="video.generate")
    assert e.message == "Inputs must be asset ids or URLs returned by /v1/generation."
    assert e.details == {"slot": "start_frame", "values": [value]}


def test_missing_or_foreign_assets_are_not_found(cat):
    for asset in (GONE, ELSEWHERE):
        e = refused(cat, {"prompt": "x", "inputs": {"start_frame": [asset]}}, capability="video.generate")
        assert e.message == "Input asset not found in this project."
        assert e.details == {"asset_ids": [asset]}


def test_wrong_kind(cat):
    e = refused(cat, {"prompt": "x", "inputs": {"start_frame": [VID]}}, capability="video.generate")
    assert e.message == "Input slot 'start_frame' takes image assets."
    assert e.details["asset_ids"] == [VID]
    e = refused(cat, {"inputs": {"media": [AUD]}}, capability="media.upscale")
    assert e.message == "Input slot 'media' takes image or video assets."


LIPSYNC = """
[[models]]
id = "lips"
capability = "video.lipsync"
backend = "b"
resolutions = ["720p"]
concurrency = 1
prices = [{ resolution = "720p", credits = "1" }]
"""


@pytest.mark.parametrize(("inputs", "expected"), [
    ({"video": [IMG], "audio": [], "mouth": [AUD]}, "video.lipsync on lips: unknown slot 'mouth'. Known: video, audio."),
    ({"video": [IMG], "audio": ["https://x.example/a.mp3", GONE]}, "video.lipsync on lips: slot 'audio' takes 1 asset(s); got 2."),
    ({"video": [GONE], "audio": ["https://x.example/a.mp3"]}, "Inputs must be asset ids or URLs returned by /v1/generation."),
    ({"video": [IMG], "audio": [GONE]}, "Input asset not found in this project."),
    ({"video": [IMG], "audio": [AUD]}, "Input slot 'video' takes video assets."),
])
def test_inputs_checks_in_order_slot_count_ours_found_kind(cat, inputs, expected):
    custom = loads_catalog(LIPSYNC)
    e = refused(cat, {"inputs": inputs}, capability="video.lipsync", catalog=custom)
    assert e.message == expected


def test_every_missing_asset_is_listed_once(cat):
    custom = loads_catalog(LIPSYNC)
    e = refused(cat, {"inputs": {"video": [GONE], "audio": [ELSEWHERE]}}, capability="video.lipsync", catalog=custom)
    assert e.details == {"asset_ids": [GONE, ELSEWHERE]}
    p = plan(cat, {"inputs": {"video": [VID], "audio": [AUD.upper()]}}, capability="video.lipsync", catalog=custom)
    assert p.settings.inputs == {"video": (VID,), "audio": (AUD,)}


# --- price ------------------------------------------------------------------

PARTLY_PRICED = """
[[models]]
id = "half-priced"
capability = "video.generate"
backend = "b"
resolutions = ["480p", "720p"]
durations = [5]
concurrency = 1
prices = [{ resolution = "480p", duration = 5, credits = "3.25" }]
"""


def test_missing_price_is_503_with_the_tier(cat):
    custom = loads_catalog(PARTLY_PRICED)
    assert plan(cat, CLIP, capability="video.generate", catalog=custom).credits == "3.25"
    e = refused(cat, {**CLIP, "resolution": "720p"}, capability="video.generate", catalog=custom, exc=Unavailable)
    assert e.status == 503
    assert e.message == "Model half-priced has no price for this tier and cannot be run."
    assert e.details == {"capability": "video.generate", "model": "half-priced", "resolution": "720p", "duration": 5}


# --- the fixed order --------------------------------------------------------

# One way to break each rule after the model, in the spec's order; the last
# one breaks the price (720p has no price in PARTLY_PRICED).
BREAKERS = [
    ("prompt", {"prompt": ""}, "prompt is required."),
    ("aspect_ratio", {"aspect_ratio": "7:5"}, "aspect_ratio must be one of"),
    ("resolution", {"resolution": "4k"}, "half-priced resolution must be one of 480p, 720p."),
    ("duration", {"duration": 7}, "half-priced duration must be one of 5 seconds."),
    ("quality", {"quality": "hd"}, "half-priced has no quality setting."),
    ("inputs", {"inputs": {}}, "slot 'start_frame' takes 1 asset(s); got 0."),
]


def _broken_from(i: int) -> dict:
    body = {**CLIP, "resolution": "720p"}  # breaks only the price
    for _, change, _ in reversed(BREAKERS[i:]):
        body.update(change)
    return body


@pytest.mark.parametrize("i", range(len(BREAKERS)))
def test_earlier_rule_wins(cat, i):
    custom = loads_catalog(PARTLY_PRICED)
    e = refused(cat, _broken_from(i), capability="video.generate", catalog=custom)
    assert BREAKERS[i][2] in e.message


def test_price_is_checked_last(cat):
    custom = loads_catalog(PARTLY_PRICED)
    e = refused(cat, _broken_from(len(BREAKERS)), capability="video.generate", catalog=custom, exc=Unavailable)
    assert "has no price for this tier" in e.message


def test_model_then_availability_come_first(cat):
    custom = loads_catalog(PARTLY_PRICED)
    everything_wrong = _broken_from(0)
    e = refused(cat, {**everything_wrong, "model": "nope"}, capability="video.generate",
                catalog=custom, runnable=nothing)
    assert e.message == "Unknown model 'nope'. Known: half-priced."
    e = refused(cat, everything_wrong, capability="video.generate", catalog=custom,
                runnable=nothing, exc=Unavailable)
    assert e.message == "Model half-priced is not available on this deployment."


# --- estimate ---------------------------------------------------------------

def test_estimate_needs_no_prompt_or_inputs(cat):
    assert estimate(cat, capability="video.generate", model=None, request=SubmitRequest(resolution="720p"),
                    runnable=everything) == {
        "capability": "video.generate", "model": "camera-move",
        "resolution": "720p", "duration": 5, "tier": "720p/5s", "credits": "20.00",
    }


def test_estimate_reads_the_model_from_the_request_without_a_capability(cat):
    by_cap = estimate(cat, capability="image.generate", model=None, request=SubmitRequest(), runnable=everything)
    assert (by_cap["model"], by_cap["credits"], by_cap["duration"]) == ("proc-image", "1.00", None)
    by_model = estimate(cat, capability=None, model=None, request=SubmitRequest(model="proc-image", resolution="2k"),
                        runnable=everything)
    assert (by_model["capability"], by_model["credits"]) == ("image.generate", "2.00")
    with pytest.raises(Unprocessable, match="capability or model is required."):
        estimate(cat, capability=None, model=None, request=SubmitRequest(), runnable=everything)


def test_estimate_refuses_like_a_submit(cat):
    with pytest.raises(Unprocessable, match=r"^proc-image resolution must be one of 1k, 2k\.$"):
        estimate(cat, capability="image.generate", model=None, request=SubmitRequest(resolution="8k"), runnable=everything)
    with pytest.raises(Unavailable):
        estimate(cat, capability=None, model="camera-move", request=SubmitRequest(), runnable=nothing)
