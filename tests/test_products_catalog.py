"""Products: views, presets, availability, estimates, run inputs, version pinning."""

from dataclasses import replace

import pytest

from service.catalog import products as P
from service.catalog.catalog import load_catalog, loads_catalog
from service.catalog.product_defs import TEXT_TO_CLIP, TEXT_TO_CLIP_VERTICAL
from service.catalog.product_types import FromInput, FromStep, Input, Product, Step, Template, make_preset
from service.catalog.request import SubmitRequest
from service.catalog.rules import AssetInfo, plan_submit
from service.errors import Unavailable, Unprocessable

BASE = "https://gen.example"
PROJECT = "11111111-1111-1111-1111-111111111111"
IMG = "aaaaaaaa-0000-0000-0000-000000000001"
VID = "aaaaaaaa-0000-0000-0000-000000000002"
FOREIGN = "aaaaaaaa-0000-0000-0000-000000000003"
GONE = "aaaaaaaa-0000-0000-0000-000000000004"
ASSETS = {
    IMG: AssetInfo(IMG, "image", PROJECT),
    VID: AssetInfo(VID, "video", PROJECT),
    FOREIGN: AssetInfo(FOREIGN, "image", "another-project"),
}


def resolve(ids):
    return {i: ASSETS.get(i) for i in ids}


def everything(_model):
    return True


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def view(slug, cat, runnable=everything, values=None):
    return P.product_view(P.product(slug), cat, runnable, values)


def run_inputs(product, inputs):
    return P.validate_run_inputs(product, inputs, resolve, project_id=PROJECT, base_url=BASE)


# --- the list and the view --------------------------------------------------

def test_products_and_categories():
    assert [p.slug for p in P.list_products()] == [
        "text-to-clip", "text-to-clip-vertical", "talking-portrait", "voiceover",
    ]
    assert [p.slug for p in P.list_products("audio")] == ["voiceover"]
    assert [p.slug for p in P.list_products("image")] == []
    assert len(P.list_products("video")) == 3
    assert P.product("nope") is None


def test_text_to_clip_view(cat):
    v = view("text-to-clip", cat)
    assert set(v) == {
        "slug", "name", "category", "kind", "description", "thumbnail_url", "version", "base",
        "inputs", "outputs", "steps", "available", "unavailable_reasons", "credits_estimate",
    }
    assert (v["category"], v["kind"], v["version"], v["base"], v["thumbnail_url"]) == ("video", "workflow", 1, None, None)
    assert list(v["inputs"]) == ["prompt", "aspect_ratio", "resolution", "seed"]
    assert v["inputs"]["resolution"] == {
        "type": "choice", "label": "Resolution", "description": "Resolution of the clip.",
        "required": True, "default": "480p", "options": ["480p", "720p"], "hidden": False,
    }
    assert v["inputs"]["aspect_ratio"]["default"] == "16:9"
    assert len(v["inputs"]["aspect_ratio"]["options"]) == 10
    assert (v["inputs"]["prompt"]["type"], v["inputs"]["prompt"]["required"]) == ("text", True)
    assert (v["inputs"]["seed"]["type"], v["inputs"]["seed"]["required"]) == ("number", False)
    assert v["outputs"] == ["still", "clip", "cover", "thumbnail"]
    assert v["steps"] == [
        {"key": "still", "capability": "image.generate", "op": None, "model": "proc-image", "needs": []},
        {"key": "clip", "capability": "video.generate", "op": None, "model": "camera-move", "needs": ["still"]},
        {"key": "thumb", "capability": None, "op": "resize_image", "model": None, "needs": ["still"]},
        {"key": "cover", "capability": None, "op": "extract_frame", "model": None, "needs": ["clip"]},
    ]
    assert (v["available"], v["unavailable_reasons"], v["credits_estimate"]) == (True, [], "11.00")


def test_estimate_follows_the_inputs(cat):
    values = run_inputs(P.product("text-to-clip"), {"prompt": "a harbour", "resolution": "720p"})
    assert view("text-to-clip", cat, values=values)["credits_estimate"] == "21.00"
    assert P.require_available(P.product("text-to-clip"), cat, everything, values) == 21_000_000


def test_thumb_runs_beside_the_clip():
    p = P.product("text-to-clip")
    assert [s.key for s in P.ready_steps(p, done=set(), started=set())] == ["still"]
    assert [s.key for s in P.ready_steps(p, done={"still"}, started={"still"})] == ["clip", "thumb"]
    assert [s.key for s in P.ready_steps(p, done={"still", "thumb"}, started={"still", "clip", "thumb"})] == []
    assert [s.key for s in P.ready_steps(p, done={"still", "clip"}, started={"still", "clip", "thumb"})] == ["cover"]


def test_run_outputs_by_name():
    p = P.product("text-to-clip")
    outs = P.run_outputs(p, {"still": ["s"], "clip": ["c"], "thumb": ["t"], "cover": ["f"]})
    assert outs == {"still": ["s"], "clip": ["c"], "cover": ["f"], "thumbnail": ["t"]}


# --- presets ----------------------------------------------------------------

def test_preset_hides_its_fixed_input(cat):
    v = view("text-to-clip-vertical", cat)
    assert (v["kind"], v["base"], v["version"]) == ("preset", "text-to-clip", 1)
    assert "aspect_ratio" not in v["inputs"]
    assert list(v["inputs"]) == ["prompt", "resolution", "seed"]
    assert v["steps"] == view("text-to-clip", cat)["steps"]
    assert (v["available"], v["credits_estimate"]) == (True, "11.00")


def test_preset_fixed_value_reaches_the_steps_and_cannot_be_sent():
    p = P.product("text-to-clip-vertical")
    values = run_inputs(p, {"prompt": "a tower"})
    assert values["aspect_ratio"] == "9:16"
    assert P.step_body(p.step("still"), values, {})["aspect_ratio"] == "9:16"
    with pytest.raises(Unprocessable) as e:
        run_inputs(p, {"prompt": "a tower", "aspect_ratio": "16:9"})
    assert e.value.message == "Input 'aspect_ratio' is fixed to 9:16 by this preset."
    assert e.value.details == {"input": "aspect_ratio"}


# --- unavailable products ---------------------------------------------------

def test_products_waiting_for_models(cat):
    v = view("talking-portrait", cat)
    assert (v["available"], v["credits_estimate"]) == (False, None)
    assert v["unavailable_reasons"] == [
        "step 'lipsync': no model implements video.lipsync yet",
    ]
    v = view("voiceover", cat)
    assert (v["category"], v["available"], v["credits_estimate"]) == ("audio", False, None)
    assert v["unavailable_reasons"] == [
        "step 'script': no model implements text.llm yet",
    ]


def test_require_available_is_503_with_reasons(cat):
    p = P.product("voiceover")
    with pytest.raises(Unavailable) as e:
        P.require_available(p, cat, everything, P.default_values(p))
    assert e.value.status == 503
    assert e.value.message == "Product voiceover is not available on this deployment."
    assert e.value.details == {
        "product": "voiceover",
        "reasons": [
            "step 'script': no model implements text.llm yet",
        ],
    }


def test_missing_backend_blocks_the_step(cat):
    no_video = lambda m: m.backend != "camera_move_video"  # noqa: E731
    v = view("text-to-clip", cat, runnable=no_video)
    assert v["unavailable_reasons"] == ["step 'clip': model camera-move is not available on this deployment"]
    assert v["credits_estimate"] is None


CLIP_MODELS = """
[[models]]
id = "proc-image"
capability = "image.generate"
backend = "procedural_image"
resolutions = ["1k"]
concurrency = 1
prices = [{{ resolution = "1k", credits = "1.00" }}]

[[models]]
id = "camera-move"
capability = "video.generate"
backend = "camera_move_video"
resolutions = {resolutions}
durations = [5]
concurrency = 1
prices = [{{ resolution = "480p", duration = 5, credits = "10.00" }}]
"""


def test_tier_without_price_blocks_only_the_inputs_that_need_it():
    custom = loads_catalog(CLIP_MODELS.format(resolutions='["480p", "720p"]'))
    assert view("text-to-clip", custom)["available"] is True
    values = run_inputs(P.product("text-to-clip"), {"prompt": "x", "resolution": "720p"})
    v = view("text-to-clip", custom, values=values)
    assert v["unavailable_reasons"] == ["step 'clip': model camera-move has no price for 720p/5s"]
    assert v["credits_estimate"] is None


def test_tier_the_model_does_not_offer():
    custom = loads_catalog(CLIP_MODELS.format(resolutions='["480p"]'))
    values = run_inputs(P.product("text-to-clip"), {"prompt": "x", "resolution": "720p"})
    v = view("text-to-clip", custom, values=values)
    assert v["unavailable_reasons"] == ["step 'clip': model camera-move does not offer 720p/5s"]


def test_model_missing_from_an_operator_catalog():
    v = view("text-to-clip", loads_catalog(""))
    assert v["unavailable_reasons"] == [
        "step 'still': model proc-image is not in the catalog",
        "step 'clip': model camera-move is not in the catalog",
    ]


SPEECH_AND_LIPSYNC = """
[[models]]
id = "cloud-voice"
capability = "audio.speech"
backend = "cloud"
resolutions = ["standard"]
concurrency = 1
prices = [{ resolution = "standard", credits = "9.00" }]

[[models]]
id = "local-voice"
capability = "audio.speech"
backend = "local_tts"
resolutions = ["standard"]
concurrency = 1
prices = [{ resolution = "standard", credits = "0.25" }]

[[models]]
id = "lips"
capability = "video.lipsync"
backend = "local_lips"
resolutions = ["480p"]
concurrency = 1
prices = [{ resolution = "480p", credits = "3.00" }]
"""


def test_a_step_without_a_model_uses_the_first_runnable_one(cat):
    custom = loads_catalog(_default_text() + SPEECH_AND_LIPSYNC)
    local = lambda m: m.backend not in ("cloud", "espeak_speech")  # noqa: E731 - the default's voice aside
    v = view("talking-portrait", custom, runnable=local)
    # portrait 1.00 + motion 10.00 + local-voice 0.25 + lips 3.00
    assert (v["available"], v["credits_estimate"]) == (True, "14.25")
    v = view("talking-portrait", custom, runnable=lambda m: m.backend not in ("cloud", "local_tts", "espeak_speech"))
    assert v["unavailable_reasons"] == ["step 'voice': model espeak-ng is not available on this deployment"]  # the first listed


def _default_text():
    from importlib import resources

    return resources.files("service.catalog").joinpath("default.toml").read_text()


# --- step bodies go through the submit rules --------------------------------

def test_step_bodies_pass_the_submit_rules(cat):
    p = P.product("text-to-clip")
    values = run_inputs(p, {"prompt": "a lighthouse", "resolution": "720p", "seed": 3})
    common = dict(runnable=everything, resolve_inputs=resolve, project_id=PROJECT, base_url=BASE)
    still = plan_submit(cat, capability="image.generate", model=None, request=SubmitRequest.of(P.step_body(p.step("still"), values, {})), **common)
    assert (still.model, still.settings.resolution, still.settings.aspect_ratio, still.settings.seed, still.credits) == (
        "proc-image", "1k", "16:9", 3, "1.00",
    )
    body = P.step_body(p.step("clip"), values, {"still": [IMG]})
    clip = plan_submit(cat, capability="video.generate", model=None, request=SubmitRequest.of(body), **common)
    assert (clip.model, clip.settings.tier, clip.credits) == ("camera-move", "720p/5s", "20.00")
    assert clip.settings.inputs == {"start_frame": (IMG,)}
    assert P.step_body(p.step("thumb"), values, {"still": [IMG]}) == {"image": [IMG], "max_side": 512}
    assert P.step_body(p.step("cover"), values, {"clip": [VID]}) == {"video": [VID], "at": "middle"}


def test_optional_inputs_left_out_of_step_bodies_and_templates_filled():
    p = P.product("text-to-clip")
    assert "seed" not in P.step_body(p.step("still"), run_inputs(p, {"prompt": "x"}), {})
    vo = P.product("voiceover")
    values = run_inputs(vo, {"topic": "tea"})
    assert P.step_body(vo.step("script"), values, {}) == {
        "prompt": "Write a calm voiceover script of about 60 words about: tea",
    }
    assert P.step_body(vo.step("voice"), values, {}, texts={"script": "Tea is..."}) == {"prompt": "Tea is..."}


# --- run inputs -------------------------------------------------------------

def test_run_inputs_defaults_and_values():
    p = P.product("text-to-clip")
    assert run_inputs(p, {"prompt": "x"}) == {"prompt": "x", "aspect_ratio": "16:9", "resolution": "480p", "seed": None}
    got = run_inputs(p, {"prompt": "x", "aspect_ratio": "1:1", "resolution": None, "seed": 12.5})
    assert got == {"prompt": "x", "aspect_ratio": "1:1", "resolution": "480p", "seed": 12.5}


@pytest.mark.parametrize(("inputs", "message", "name"), [
    ({"prompt": "x", "style": "noir"}, "Unknown input 'style'. Known: prompt, aspect_ratio, resolution, seed.", "style"),
    ({}, "prompt is required.", "prompt"),
    ({"prompt": None}, "prompt is required.", "prompt"),
    ({"prompt": "  "}, "prompt is required.", "prompt"),
    ({"prompt": 5}, "prompt must be a string.", "prompt"),
    ({"prompt": "x", "seed": "7"}, "seed must be a number.", "seed"),
    ({"prompt": "x", "seed": True}, "seed must be a number.", "seed"),
    ({"prompt": "x", "seed": float("nan")}, "seed must be a number.", "seed"),
    ({"prompt": "x", "resolution": "1080p"}, "resolution must be one of 480p, 720p.", "resolution"),
    ({"prompt": "x", "resolution": 720}, "resolution must be one of 480p, 720p.", "resolution"),
    ({"prompt": "x", "aspect_ratio": "7:5"}, "aspect_ratio must be one of 1:1, 4:3, 3:4, 3:2, 2:3, 16:9, 9:16, 21:9, 4:5, 5:4.", "aspect_ratio"),
    # unknown names are reported before anything else
    ({"style": "noir"}, "Unknown input 'style'. Known: prompt, aspect_ratio, resolution, seed.", "style"),
])
def test_run_input_refusals(inputs, message, name):
    with pytest.raises(Unprocessable) as e:
        run_inputs(P.product("text-to-clip"), inputs)
    assert (e.value.status, e.value.code) == (422, "request.validation_failed")
    assert e.value.message == message
    assert e.value.details["input"] == name


ANIMATE = Product(
    slug="animate-photo", name="Animate a photo", category="video", description="test only", version=1,
    inputs={
        "photo": Input("image", "Photo", required=True),
        "prompt": Input("text", "Motion", required=True),
    },
    steps=(Step("clip", capability="video.generate", model="camera-move", params={
        "prompt": FromInput("prompt"), "inputs": {"start_frame": FromInput("photo")},
    }),),
    outputs={"clip": "clip"},
)


def test_asset_input_accepts_ids_and_our_urls(cat):
    for ref in (IMG, f"{BASE}/v1/generation/assets/{IMG}/content", f"{BASE}/files/{IMG}?sig=1"):
        assert run_inputs(ANIMATE, {"photo": ref, "prompt": "x"})["photo"] == IMG
    values = run_inputs(ANIMATE, {"photo": IMG, "prompt": "x"})
    assert P.step_body(ANIMATE.step("clip"), values, {})["inputs"] == {"start_frame": [IMG]}


@pytest.mark.parametrize(("photo", "message", "details"), [
    ([IMG], "photo must be one asset id or URL.", {"input": "photo"}),
    ("https://elsewhere.example/a.png", "Inputs must be asset ids or URLs returned by /v1/generation.",
     {"input": "photo", "values": ["https://elsewhere.example/a.png"]}),
    (GONE, "Input asset not found in this project.", {"input": "photo", "asset_ids": [GONE]}),
    (FOREIGN, "Input asset not found in this project.", {"input": "photo", "asset_ids": [FOREIGN]}),
    (VID, "Input 'photo' takes image assets.", {"input": "photo", "asset_ids": [VID]}),
])
def test_asset_input_refusals(photo, message, details):
    with pytest.raises(Unprocessable) as e:
        run_inputs(ANIMATE, {"photo": photo, "prompt": "x"})
    assert (e.value.message, e.value.details) == (message, details)


def test_type_checks_come_before_asset_lookups():
    with pytest.raises(Unprocessable, match="prompt is required."):
        run_inputs(ANIMATE, {"photo": GONE})


# --- versions ---------------------------------------------------------------

def test_a_run_keeps_its_version(monkeypatch, cat):
    v2 = replace(
        TEXT_TO_CLIP, version=2,
        steps=TEXT_TO_CLIP.steps[:2] + TEXT_TO_CLIP.steps[3:],
        outputs={"still": "still", "clip": "clip", "cover": "cover"},
    )
    registry = P.ProductRegistry(P.REGISTRY.by_version(p.slug, 1) for p in P.list_products())
    registry.add(v2)
    monkeypatch.setattr(P, "REGISTRY", registry)

    assert P.product("text-to-clip") is v2
    assert view("text-to-clip", cat)["version"] == 2
    assert view("text-to-clip", cat)["outputs"] == ["still", "clip", "cover"]
    pinned = P.product_by_version("text-to-clip", 1)
    assert pinned is TEXT_TO_CLIP
    assert [s.key for s in pinned.steps] == ["still", "clip", "thumb", "cover"]
    assert P.product_by_version("text-to-clip", 3) is None
    assert P.product_by_version("text-to-clip-vertical", 1).base_version == 1
    assert [p.slug for p in P.list_products()][0] == "text-to-clip"


def test_registry_versions_only_go_up():
    registry = P.ProductRegistry([TEXT_TO_CLIP])
    with pytest.raises(ValueError, match="version 1 is not above 1"):
        registry.add(TEXT_TO_CLIP)
    with pytest.raises(ValueError, match="base text-to-clip v1 is not registered"):
        P.ProductRegistry([TEXT_TO_CLIP_VERTICAL])


def test_definitions_cannot_be_changed_in_place():
    with pytest.raises(TypeError):
        TEXT_TO_CLIP.inputs["extra"] = Input("text", "x")  # type: ignore[index]
    with pytest.raises(TypeError):
        TEXT_TO_CLIP.steps[0].params["resolution"] = "2k"  # type: ignore[index]


# --- definition checks ------------------------------------------------------

def _product(**kw):
    base = dict(
        slug="t", name="T", category="image", description="d", version=1,
        inputs={"prompt": Input("text", "Prompt", required=True)},
        steps=(Step("a", capability="image.generate", params={"prompt": FromInput("prompt")}),),
        outputs={"a": "a"},
    )
    return Product(**{**base, **kw})


@pytest.mark.parametrize(("kw", "match"), [
    ({"steps": (Step("a", op="resize_image", params={"image": FromStep("b"), "max_side": 1}),)}, "not an earlier step"),
    ({"steps": (Step("a", op="sharpen", params={}),)}, "unknown op"),
    ({"steps": (Step("a", op="resize_image", params={"image": FromInput("prompt")}),)}, "resize_image takes image, max_side"),
    ({"steps": (Step("a", capability="image.generate", op="resize_image"),)}, "exactly one of capability and op"),
    ({"steps": (Step("a", capability="image.dream"),)}, "unknown capability"),
    ({"steps": (Step("a", capability="image.generate", params={"prompt": FromInput("text")}),)}, "unknown input 'text'"),
    ({"steps": (Step("a", capability="image.generate", params={"prompt": Template("{mood}")}),)}, "unknown input 'mood'"),
    ({"steps": (Step("a", capability="image.generate", params={"prompt": FromInput("prompt"), "style": "x"}),)},
     "step 'a': style is not a submit setting"),
    ({"steps": (Step("a", capability="image.generate", params={"model": "proc-image"}),)},
     "step 'a': model is not a submit setting"),
    ({"outputs": {"x": "zzz"}}, "unknown step 'zzz'"),
    ({"inputs": {"c": Input("choice", "C", default="z", options=("a", "b"))}}, "not a valid value"),
    ({"inputs": {"c": Input("colour", "C")}}, "unknown type"),
    ({"category": "text"}, "bad category"),
    ({"kind": "preset"}, "only a preset, has a base"),
])
def test_bad_definitions_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        _product(**kw)


def test_bad_presets_are_refused():
    with pytest.raises(ValueError, match="does not take"):
        make_preset(TEXT_TO_CLIP, slug="p", name="P", description="d", version=1, fixed={"style": "x"})
    with pytest.raises(ValueError, match="not a valid value"):
        make_preset(TEXT_TO_CLIP, slug="p", name="P", description="d", version=1, fixed={"aspect_ratio": "2:1"})
