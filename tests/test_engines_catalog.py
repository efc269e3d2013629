"""Catalog checks of engine models at start-up: every problem is refused with one line
naming the model and the key, and the node does not start half-configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from service.catalog.catalog import CatalogError
from service.catalog.engines import ComfyEngine
from service.node import read_catalog

GRAPH = {"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
         "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "gen"}}}


def model(backend: str, engine: str = "", capability: str = "image.generate", model_id: str = "m1") -> str:
    return f"""
[[models]]
id = "{model_id}"
capability = "{capability}"
backend = "{backend}"
resolutions = ["1k"]
concurrency = 1
prices = [{{ resolution = "1k", credits = "1.00" }}]
{engine}
"""


def refused(tmp_path, text: str, graph: dict | None = GRAPH) -> str:
    if graph is not None:
        (tmp_path / "wf.json").write_text(json.dumps(graph))
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    with pytest.raises(CatalogError) as e:
        read_catalog(str(path))
    message = str(e.value)
    assert message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


COMFY = '[models.engine]\nurls = ["http://gpu1:8188"]\nworkflow = "wf.json"\n'


def test_a_complete_comfyui_model_loads_with_its_graph(tmp_path):
    (tmp_path / "wf.json").write_text(json.dumps(GRAPH))
    (tmp_path / "catalog.toml").write_text(model("comfyui", COMFY + '[models.engine.bind]\nseed = "1.color"\n'))
    cat = read_catalog(str(tmp_path / "catalog.toml"))
    engine = cat.model("m1").engine
    assert isinstance(engine, ComfyEngine)
    assert engine.graph == GRAPH and engine.urls == ["http://gpu1:8188"] and engine.bind == {"seed": "1.color"}


@pytest.mark.parametrize("text, line", [
    (model("stable_diffusion"),
     "model 'm1': backend: unknown backend 'stable_diffusion' (known: procedural_image, camera_move_video, "
     "lanczos_upscale, espeak_speech, selfie_segment, comfyui, cog, replicate, openai, fal)"),
    (model("comfyui"), "model 'm1': engine: backend 'comfyui' needs a [models.engine] table"),
    (model("procedural_image", '[models.engine]\nurls = ["http://x"]\n'),
     "model 'm1': engine: backend 'procedural_image' is built in and takes no [models.engine]"),
    (model("comfyui", '[models.engine]\nurls = ["http://gpu1:8188"]\nworkflow = "missing.json"\n'),
     "model 'm1': engine.workflow: file not found: {dir}/missing.json"),
    (model("comfyui", COMFY + '[models.engine.bind]\nprompt = "9.text"\n'),
     "model 'm1': engine.bind.prompt: node '9' is not in the workflow"),
    (model("comfyui", COMFY + '[models.engine.bind]\nprompt = "1.text"\n'),
     "model 'm1': engine.bind.prompt: node '1' (EmptyImage) has no input 'text'"),
    (model("comfyui", COMFY + '[models.engine.bind]\nprompt = "1"\n'),
     "model 'm1': engine.bind.prompt: '1' is not \"<node id>.<input name>\""),
    (model("comfyui", COMFY + '[models.engine.bind]\nstyle = "1.color"\n'),
     "model 'm1': engine.bind: unknown request field 'style' (known: prompt, seed, width, height, duration, "
     "aspect_ratio, inputs.<slot>)"),
    (model("comfyui", COMFY + '[models.engine.bind]\n"inputs.image" = "1.color"\n'),
     "model 'm1': engine.bind.inputs.image: the model has no input slot 'image' (slots: none)"),
    (model("cog", '[models.engine]\nurls = ["gpu1:5000"]\n'),
     "model 'm1': engine.urls: 'gpu1:5000' is not an http(s) base URL"),
    (model("cog", '[models.engine]\nurls = []\n'),
     "model 'm1': engine.urls: List should have at least 1 item after validation, not 0"),
    (model("cog", '[models.engine]\nurls = ["http://a"]\ntoken = "x"\n'),
     "model 'm1': engine.token: Extra inputs are not permitted"),
    (model("cog", '[models.engine]\nurls = ["http://a"]\noutcome = "poll"\n'),
     "model 'm1': engine.outcome: Input should be 'webhook' or 'response'"),
    (model("replicate", '[models.engine]\nmodel = "acme/sdxl"\ntoken_env = "GENSERVICE_TEST_UNSET_TOKEN"\n'),
     "model 'm1': engine.token_env: the variable GENSERVICE_TEST_UNSET_TOKEN is not set"),
    (model("replicate", '[models.engine]\ntoken_env = "GENSERVICE_TEST_UNSET_TOKEN"\n'),
     "model 'm1': engine.model: give either model (owner/name) or version, not both or neither"),
])
def test_each_problem_is_one_line_naming_the_model_and_the_key(tmp_path, text, line):
    os.environ.pop("GENSERVICE_TEST_UNSET_TOKEN", None)
    assert refused(tmp_path, text) == line.format(dir=tmp_path)


def test_a_workflow_that_is_not_api_format_is_refused(tmp_path):
    ui_format = {"nodes": [{"id": 1, "type": "EmptyImage"}], "links": []}
    assert refused(tmp_path, model("comfyui", COMFY), graph=ui_format) == (
        f"model 'm1': engine.workflow: {tmp_path}/wf.json is not an API-format workflow "
        "({node id: {class_type, inputs}}; export it with \"Save (API)\")")


def test_a_set_token_variable_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("GENSERVICE_TEST_TOKEN", "r8_secret")
    (tmp_path / "catalog.toml").write_text(
        model("replicate", '[models.engine]\nmodel = "acme/sdxl"\ntoken_env = "GENSERVICE_TEST_TOKEN"\n'))
    cat = read_catalog(str(tmp_path / "catalog.toml"))
    assert "r8_secret" not in repr(cat.model("m1"))  # the token itself is never read into the catalog


def test_serve_refuses_to_start_with_one_line_per_problem(tmp_path):
    (tmp_path / "catalog.toml").write_text(model("stable_diffusion") + model("nope", model_id="m2"))
    env = {**os.environ, "GENSERVICE_CATALOG_FILE": str(tmp_path / "catalog.toml"),
           "GENSERVICE_DATA_DIR": str(tmp_path / "data"), "GENSERVICE_PORT": "0"}
    out = subprocess.run([sys.executable, "-m", "service", "serve"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert [ln.split(": ", 2)[2].split(" (known")[0] for ln in lines] == [
        "model 'm1': backend: unknown backend 'stable_diffusion'", "model 'm2': backend: unknown backend 'nope'"]
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_response_mode_cog_models_may_not_hold_more_than_half_the_engine_connections(tmp_path):
    """`outcome = "response"` holds an engine connection for each running prediction: the
    catalog's response-mode models together may run at most HELD_MAX, so other engine calls
    always find a connection. The webhook models do not count."""
    from service.catalog.engines import ENGINE_CONNECTIONS, HELD_MAX
    from service.engines.transport import MAX_CONNECTIONS

    assert (HELD_MAX, MAX_CONNECTIONS) == (ENGINE_CONNECTIONS // 2, ENGINE_CONNECTIONS) == (128, 256)

    def cog(model_id: str, urls: int, concurrency: int, outcome: str) -> str:
        listed = ", ".join(f'"http://gpu{i}:5000"' for i in range(urls))
        return model("cog", f'[models.engine]\nurls = [{listed}]\noutcome = "{outcome}"\n',
                     model_id=model_id).replace("concurrency = 1", f"concurrency = {concurrency}")

    ok = cog("a", 4, 16, "response") + cog("b", 2, 32, "response") + cog("c", 8, 64, "webhook")  # 64 + 64 held
    (tmp_path / "catalog.toml").write_text(ok)
    assert [m.id for m in read_catalog(str(tmp_path / "catalog.toml")).models] == ["a", "b", "c"]
    too_many = cog("a", 4, 16, "response") + cog("b", 1, 65, "response")
    assert refused(tmp_path, too_many, graph=None) == (
        'engine.outcome: "response" holds an engine connection for each running prediction: 129 at once '
        "(concurrency x urls: 'a' 64, 'b' 65), more than the node's 128; give some of them the webhook")
