"""Capabilities, the TOML model catalog and the two list views."""

from decimal import Decimal

import pytest

from service.catalog.capabilities import ASPECT_RATIOS, CAPABILITIES
from service.catalog.catalog import CatalogError, load_catalog, loads_catalog

SPEC_ORDER = [
    "image.generate", "video.generate", "image.edit", "mask.segment",
    "media.upscale", "audio.speech", "video.lipsync", "text.llm",
]


def everything(_model):
    return True


@pytest.fixture(scope="module")
def default():
    return load_catalog()


def test_capabilities_in_spec_order_with_every_field(default):
    view = default.capabilities_view(everything)
    assert [c["id"] for c in view] == SPEC_ORDER
    for c in view:
        assert set(c) == {
            "id", "description", "output", "prompt_required", "prompt_meaning",
            "inputs", "aspect_ratios", "models",
        }
        assert c["description"] and c["prompt_meaning"]


def test_capability_outputs_and_prompt_rules(default):
    view = {c["id"]: c for c in default.capabilities_view(everything)}
    assert {k: v["output"] for k, v in view.items()} == {
        "image.generate": "image", "video.generate": "video", "image.edit": "image",
        "mask.segment": "mask", "media.upscale": None, "audio.speech": "audio",
        "video.lipsync": "video", "text.llm": "text",
    }
    not_required = {k for k, v in view.items() if not v["prompt_required"]}
    assert not_required == {"media.upscale", "video.lipsync"}
    assert "speak" in view["audio.speech"]["prompt_meaning"]
    assert "segment" in view["mask.segment"]["prompt_meaning"]


def test_capability_slots(default):
    view = {c["id"]: c["inputs"] for c in default.capabilities_view(everything)}
    assert view["image.generate"] == [] and view["audio.speech"] == [] and view["text.llm"] == []
    assert view["video.generate"] == [
        {"name": "start_frame", "kinds": ["image"], "min": 0, "max": 1, "required": False}]
    assert view["image.edit"] == [{"name": "image", "kinds": ["image"], "min": 1, "max": 1, "required": True}]
    assert view["mask.segment"] == [{"name": "image", "kinds": ["image"], "min": 1, "max": 1, "required": True}]
    assert view["media.upscale"] == [
        {"name": "media", "kinds": ["image", "video"], "min": 1, "max": 1, "required": True}]
    assert view["video.lipsync"] == [
        {"name": "video", "kinds": ["video"], "min": 1, "max": 1, "required": True},
        {"name": "audio", "kinds": ["audio"], "min": 1, "max": 1, "required": True},
    ]


def test_aspect_ratios_only_where_the_request_shapes_the_output(default):
    assert list(ASPECT_RATIOS) == ["1:1", "4:3", "3:4", "3:2", "2:3", "16:9", "9:16", "21:9", "4:5", "5:4"]
    view = {c["id"]: c["aspect_ratios"] for c in default.capabilities_view(everything)}
    with_ratios = {k for k, v in view.items() if v}
    assert with_ratios == {"image.generate", "video.generate", "image.edit"}
    assert view["image.generate"] == list(ASPECT_RATIOS)


def test_default_models_and_offerings(default):
    view = {c["id"]: c["models"] for c in default.capabilities_view(everything)}
    assert [m["id"] for m in view["image.generate"]] == ["proc-image"]
    assert [m["id"] for m in view["video.generate"]] == ["camera-move"]
    assert [m["id"] for m in view["media.upscale"]] == ["lanczos-upscale"]
    assert [m["id"] for m in view["audio.speech"]] == ["espeak-ng"]
    assert [m["id"] for m in view["mask.segment"]] == ["mediapipe-selfie"]
    for empty in ("image.edit", "video.lipsync", "text.llm"):
        assert view[empty] == []
    assert view["video.generate"][0] == {
        "id": "camera-move",
        "description": view["video.generate"][0]["description"],
        "available": True,
        "resolutions": ["480p", "720p"],
        "durations": [5],
        "inputs": [{"name": "start_frame", "kinds": ["image"], "count": 1, "required": True}],
        "prices": [
            {"resolution": "480p", "duration": 5, "credits": "10.00"},
            {"resolution": "720p", "duration": 5, "credits": "20.00"},
        ],
    }
    assert view["image.generate"][0]["prices"] == [
        {"resolution": "1k", "duration": None, "credits": "1.00"},
        {"resolution": "2k", "duration": None, "credits": "2.00"},
    ]
    assert view["media.upscale"][0]["prices"] == [{"resolution": "2x", "duration": None, "credits": "0.50"}]
    assert view["media.upscale"][0]["inputs"] == [
        {"name": "media", "kinds": ["image", "video"], "count": 1, "required": True}]


def test_default_model_details(default):
    by_id = {m.id: m for m in default.models}
    assert list(by_id) == ["proc-image", "camera-move", "lanczos-upscale", "espeak-ng", "mediapipe-selfie"]
    assert {k: (m.backend, m.concurrency) for k, m in by_id.items()} == {
        "proc-image": ("procedural_image", 2),
        "camera-move": ("camera_move_video", 1),
        "lanczos-upscale": ("lanczos_upscale", 2),
        "espeak-ng": ("espeak_speech", 2),
        "mediapipe-selfie": ("selfie_segment", 1),
    }
    assert by_id["camera-move"].price_uc("720p", 5) == 20_000_000
    assert by_id["camera-move"].price_uc("720p", None) is None


def test_availability_follows_runnable(default):
    only_images = lambda model: model.backend == "procedural_image"  # noqa: E731
    offers = {m["id"]: m["available"] for c in default.capabilities_view(only_images) for m in c["models"]}
    assert offers == {"proc-image": True, "camera-move": False, "lanczos-upscale": False,
                      "espeak-ng": False, "mediapipe-selfie": False}
    models = {m["id"]: m["available"] for m in default.models_view(only_images)}
    assert models == offers


def test_models_view_shape(default):
    view = default.models_view(everything)
    assert [m["id"] for m in view] == ["proc-image", "camera-move", "lanczos-upscale", "espeak-ng", "mediapipe-selfie"]
    assert view[1]["capabilities"] == [{
        "id": "video.generate",
        "prices": [
            {"resolution": "480p", "duration": 5, "credits": "10.00"},
            {"resolution": "720p", "duration": 5, "credits": "20.00"},
        ],
    }]
    for m in view:
        assert "inputs" not in m["capabilities"][0]
        for p in m["capabilities"][0]["prices"]:
            assert Decimal(p["credits"]).as_tuple().exponent == -2


def test_capability_objects_match_the_view():
    assert [c.id for c in CAPABILITIES] == SPEC_ORDER


# --- the loader -------------------------------------------------------------

GOOD = """
[[models]]
id = "m1"
capability = "image.generate"
backend = "b"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "3" }]
"""


def test_custom_catalog_from_file(tmp_path):
    path = tmp_path / "catalog.toml"
    path.write_text(GOOD)
    cat = load_catalog(str(path))
    assert [m.id for m in cat.models] == ["m1"]
    assert cat.models[0].prices[0].view() == {"resolution": "1k", "duration": None, "credits": "3.00"}
    assert cat.source == str(path)


def test_empty_catalog_lists_every_capability_without_models():
    cat = loads_catalog("")
    view = cat.capabilities_view(everything)
    assert [c["id"] for c in view] == SPEC_ORDER
    assert all(c["models"] == [] for c in view)


def test_prices_view_follows_tier_order_not_file_order():
    cat = loads_catalog("""
[[models]]
id = "v"
capability = "video.generate"
backend = "b"
resolutions = ["480p", "720p"]
durations = [5, 10]
concurrency = 1
prices = [
  { resolution = "720p", duration = 5, credits = "4" },
  { resolution = "480p", duration = 10, credits = "2" },
  { resolution = "480p", duration = 5, credits = "1" },
]
""")
    assert [(p.resolution, p.duration) for p in cat.models[0].prices] == [
        ("480p", 5), ("480p", 10), ("720p", 5),
    ]


def test_model_slot_defaults_to_the_capability_maximum_and_can_tighten():
    cat = loads_catalog("""
[[models]]
id = "t2v"
capability = "video.generate"
backend = "b"
resolutions = ["480p"]
concurrency = 1
slots = { start_frame = 0 }

[[models]]
id = "i2v"
capability = "video.generate"
backend = "b"
resolutions = ["480p"]
concurrency = 1
""")
    assert cat.model("t2v").slot("start_frame").count == 0
    assert cat.model("i2v").slot("start_frame").count == 1


def _error(text: str) -> str:
    with pytest.raises(CatalogError) as e:
        loads_catalog(text, source="x.toml")
    return str(e.value)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ('colour = "red"', "models[0].colour: Extra inputs are not permitted"),
        ('capability = "image.dream"', "models[0].capability: unknown capability 'image.dream'"),
        ("concurrency = 0", "models[0].concurrency: Input should be greater than or equal to 1"),
        ('concurrency = "2"', "models[0].concurrency: Input should be a valid integer"),
        ("resolutions = []", "models[0].resolutions: List should have at least 1 item"),
        ('resolutions = ["1k", "1k"]', "models[0].resolutions: resolutions must be distinct"),
        ("durations = [0]", "models[0].durations: durations must be distinct positive whole seconds"),
        ('id = "Bad Id"', "models[0].id: String should match pattern"),
        ("slots = { image = 1 }", "models[0]: slot 'image' is not a slot of image.generate (slots: none)"),
    ],
)
def test_loader_refuses_bad_models(change, expected):
    lines = [ln for ln in GOOD.strip().splitlines() if not ln.startswith(change.split(" = ")[0] + " =")]
    text = "\n".join(lines[:2] + [change] + lines[2:])
    message = _error(text)
    assert message.startswith("x.toml: invalid catalog:")
    assert expected in message


@pytest.mark.parametrize(
    ("prices", "expected"),
    [
        ('[{ resolution = "1k", credits = 1.5 }]', "prices[0].credits: Input should be a valid string"),
        ('[{ resolution = "1k", credits = "1.005" }]', "credits take at most two decimal places"),
        ('[{ resolution = "1k", credits = "-1" }]', "credits cannot be negative"),
        ('[{ resolution = "4k", credits = "1" }]', "price for resolution '4k' which the model does not list"),
        ('[{ resolution = "1k", duration = 5, credits = "1" }]', "price has a duration but the model takes none"),
        ('[{ resolution = "1k", credits = "1" }, { resolution = "1k", credits = "2" }]', "two prices for tier 1k"),
        ('[{ resolution = "1k", credits = "1", note = "x" }]', "prices[0].note: Extra inputs are not permitted"),
    ],
)
def test_loader_refuses_bad_prices(prices, expected):
    text = GOOD.replace('[{ resolution = "1k", credits = "3" }]', prices)
    assert expected in _error(text)


def test_loader_refuses_video_price_outside_durations_and_slot_over_limit():
    base = """
[[models]]
id = "v"
capability = "video.generate"
backend = "b"
resolutions = ["480p"]
durations = [5]
concurrency = 1
"""
    assert "price for duration 10 which the model does not list" in _error(
        base + 'prices = [{ resolution = "480p", duration = 10, credits = "1" }]'
    )
    assert "price for duration None which the model does not list" in _error(
        base + 'prices = [{ resolution = "480p", credits = "1" }]'
    )
    assert "slot 'start_frame' count must be between 0 and 1" in _error(base + "slots = { start_frame = 2 }")


def test_loader_refuses_duplicate_ids_unknown_top_level_keys_and_bad_toml(tmp_path):
    assert "duplicate model ids: m1" in _error(GOOD + GOOD)
    assert "(top level)" not in _error("version = 2\n" + GOOD)
    assert "version: Extra inputs are not permitted" in _error("version = 2\n" + GOOD)
    assert _error("[[models]\nid=").startswith("x.toml: not valid TOML:")
    with pytest.raises(CatalogError, match="cannot read catalog"):
        load_catalog(str(tmp_path / "missing.toml"))


def test_catalog_layer_is_pure():
    """stdlib + pydantic (+ the errors tree, money helpers and the digits reader) only: no trio, SQL or HTTP. The
    response shapes the views return (service/views/catalog_shapes.py) are imported for type
    checking only (`if TYPE_CHECKING:`), never at run time."""
    import ast
    import pathlib
    import sys

    import service.catalog as pkg

    allowed_service = {"service.errors", "service.money", "service.digits"}
    io_modules = {"sqlite3", "http", "urllib.request", "socket", "ssl", "asyncio", "threading", "subprocess"}
    for path in pathlib.Path(pkg.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for block in tree.body
                       if isinstance(block, ast.If) and isinstance(block.test, ast.Name)
                       and block.test.id == "TYPE_CHECKING" for n in ast.walk(block)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in io_modules and name not in io_modules, f"{path.name} imports {name}"
                ok = (
                    top in sys.stdlib_module_names
                    or top == "pydantic"
                    or name in allowed_service
                    or top == "__future__"
                    or (name == "service.views" and id(node) in typing_only)
                )
                assert ok, f"{path.name} imports {name}"
