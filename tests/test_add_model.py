"""`genservice admin add-model comfyui`: a workflow exported in API format becomes a catalog
entry the node starts with: the bind table inferred from the graph, refusals in one line
(exit 2), the graph checked against the server's /object_info (the ComfyUI peer)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import trio

from peers.comfyui import run_peer
from service.catalog.catalog import load_catalog
from service.engines.table import tables
from service.catalog.comfy_import import ImportRefused, infer, load_graph
from service.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "comfyui"
NOWHERE = "http://127.0.0.1:9"  # discard port: nothing answers on loopback


def graph_of(name: str) -> dict:
    return load_graph((FIXTURES / name).read_text())


def run(tmp_path: Path, capsys, *extra: str, workflow: str = "txt2img.json", url: str = NOWHERE,
        model_id: str = "sd15") -> tuple[int, str, str]:
    code = main(["admin", "add-model", "comfyui", "--id", model_id, "--url", url,
                 "--workflow", str(FIXTURES / workflow), "--price", "4.00",
                 "--catalog", str(tmp_path / "catalog.toml"), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_txt2img_binds_the_positive_prompt_the_seed_and_the_latent_size():
    found = infer(graph_of("txt2img.json"))
    assert found.bind == {"prompt": "6.text", "seed": "3.seed", "width": "5.width", "height": "5.height"}
    assert found.outputs == ["9 (SaveImage)"]
    assert (found.width, found.height) == (512, 768)


def test_a_flux_graph_binds_through_the_guider_and_the_noise_node():
    found = infer(graph_of("flux_custom_sampler.json"))
    assert found.bind == {"prompt": "6.text", "seed": "25.noise_seed", "width": "27.width", "height": "27.height"}
    assert found.outputs == ["9 (SaveImage)"]


def test_the_weight_free_graph_has_no_prompt_and_imports_only_with_no_prompt():
    with pytest.raises(ImportRefused) as e:
        infer(graph_of("weightfree.json"))
    assert str(e.value) == ("no prompt: no text input feeds a sampler's positive conditioning "
                            "(give --no-prompt to import a graph that takes none)")
    found = infer(graph_of("weightfree.json"), need_prompt=False)
    assert found.bind == {"width": "1.width", "height": "1.height"}
    assert found.outputs == ["3 (SaveImage)"]


@pytest.mark.parametrize(("name", "message"), [
    ("preview_only.json", "no output node: the workflow saves nothing (add a SaveImage or SaveVideo node)"),
    ("broken_link.json", "node '3' (SaveImage) input 'images' links to node '2', which is not in the workflow"),
    ("ui_format.json", "the workflow is in ComfyUI's UI format; export it with \"Save (API)\" (Export (API))"),
])
def test_broken_graphs_are_refused_with_one_line(tmp_path, capsys, name, message):
    code, out, err = run(tmp_path, capsys, workflow=name)
    assert code == 2
    assert err == f"genservice: add-model refused: {message}\n"
    assert not (tmp_path / "catalog.toml").exists()
    assert not (tmp_path / "workflows").exists()


def test_not_json_and_not_api_format_are_refused():
    with pytest.raises(ImportRefused, match=r"^the workflow is not JSON: "):
        load_graph("{")
    with pytest.raises(ImportRefused) as e:
        load_graph('{"1": {"inputs": {}}}')
    assert str(e.value) == ("the workflow is not in API format ({node id: {class_type, inputs}}); "
                            "export it with \"Save (API)\"")


def test_the_entry_is_written_and_the_node_loads_it(tmp_path, capsys):
    code, out, err = run(tmp_path, capsys)
    assert code == 0, err
    assert f"note: {NOWHERE} did not answer /object_info" in out
    assert "  prompt   <- 6.text" in out and "  seed     <- 3.seed" in out
    assert "  outputs  9 (SaveImage)" in out
    assert "  tier     512x768 at 4.00 credits" in out
    # a node on the built-in catalog must be told to read the new file: a restart
    assert "set GENSERVICE_CATALOG_FILE=" in out and "restart the node to serve it" in out
    # the built-in catalog is kept: the new file starts as a copy of it
    assert "the node used the built-in catalog" in out
    catalog = load_catalog(str(tmp_path / "catalog.toml"), tables())
    assert catalog.model("proc-image") is not None
    model = catalog.model("sd15")
    assert model is not None and model.backend == "comfyui" and model.capability == "image.generate"
    assert model.resolutions == ("512x768",) and model.prices[0].uc == 4_000_000
    assert model.engine.urls == [NOWHERE]
    assert model.engine.bind == {"prompt": "6.text", "seed": "3.seed", "width": "5.width", "height": "5.height"}
    assert model.engine.graph == json.loads((FIXTURES / "txt2img.json").read_text())
    assert (tmp_path / "workflows" / "sd15.json").read_text() == (FIXTURES / "txt2img.json").read_text()


def test_a_second_model_is_appended_and_a_taken_id_is_refused(tmp_path, capsys):
    assert run(tmp_path, capsys)[0] == 0
    code, out, err = run(tmp_path, capsys, "--resolution", "1k", workflow="flux_custom_sampler.json",
                         model_id="flux")
    assert code == 0, err
    assert "the node used the built-in catalog" not in out
    # a node reading this file already serves the model after a reload, no restart
    assert "POST /operator/v1/catalog/reload" in out and "restart the node" not in out
    raw = tomllib.loads((tmp_path / "catalog.toml").read_text())
    assert [m["id"] for m in raw["models"]][-2:] == ["sd15", "flux"]
    assert raw["models"][-1]["resolutions"] == ["1k"]
    before = (tmp_path / "catalog.toml").read_text()
    code, out, err = run(tmp_path, capsys, workflow="flux_custom_sampler.json", model_id="flux")
    assert code == 2
    assert err == f"genservice: add-model refused: model 'flux' is already in {tmp_path / 'catalog.toml'}\n"
    assert (tmp_path / "catalog.toml").read_text() == before


@pytest.mark.parametrize(("args", "message"), [
    (("--price", "4.001"), "--price '4.001' is not an amount of credits (e.g. 4.00)"),
    (("--price", "-1"), "--price '-1' is not an amount of credits (e.g. 4.00)"),
    (("--capability", "image.paint"), "--capability 'image.paint' is unknown; known: "),
])
def test_bad_arguments_are_refused(tmp_path, capsys, args, message):
    code, out, err = run(tmp_path, capsys, *args)
    assert code == 2
    assert err.startswith(f"genservice: add-model refused: {message}")


def test_a_bad_id_or_url_is_refused(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, model_id="SD 1.5")
    assert (code, err) == (2, "genservice: add-model refused: --id 'SD 1.5' is not a model id "
                              "(lower-case letters, digits, '.', '_', '-')\n")
    code, _, err = run(tmp_path, capsys, url="ftp://gpu1")
    assert (code, err) == (2, "genservice: add-model refused: --url 'ftp://gpu1' is not an http(s) base URL\n")


def test_the_catalog_setting_is_the_default_file(tmp_path, capsys, monkeypatch):
    target = tmp_path / "etc" / "catalog.toml"
    target.parent.mkdir()
    target.write_text('[[models]]\nid = "proc-image"\ncapability = "image.generate"\nbackend = "procedural_image"\n'
                      'resolutions = ["1k"]\nconcurrency = 1\nprices = [{ resolution = "1k", credits = "1.00" }]\n')
    monkeypatch.setenv("GENSERVICE_CATALOG_FILE", str(target))
    monkeypatch.setenv("GENSERVICE_DATA_DIR", str(tmp_path / "data"))
    code = main(["admin", "add-model", "comfyui", "--id", "sd15", "--url", NOWHERE,
                 "--workflow", str(FIXTURES / "txt2img.json"), "--price", "4"])
    out = capsys.readouterr().out
    assert code == 0
    assert [m.id for m in load_catalog(str(target), tables()).models] == ["proc-image", "sd15"]
    assert tomllib.loads(target.read_text())["models"][1]["prices"] == [{"resolution": "512x768", "credits": "4.00"}]
    assert "the node used the built-in catalog" not in out


async def test_validated_against_the_servers_object_info(tmp_path, capsys):
    async with run_peer(tmp_path / "comfy") as peer:
        # the peer has EmptyImage, ImageInvert and SaveImage, not the diffusion nodes
        code, out, err = await trio.to_thread.run_sync(
            lambda: run(tmp_path, capsys, workflow="txt2img.json", url=peer.url))
        assert code == 2
        assert err == "genservice: add-model refused: node '3': class 'KSampler' is not installed on the server\n"
        code, out, err = await trio.to_thread.run_sync(
            lambda: run(tmp_path, capsys, "--no-prompt", workflow="weightfree.json", url=peer.url, model_id="invert"))
    assert code == 0, err
    assert f"  checked  against {peer.url}/object_info" in out
    assert "  prompt   (not bound: the job's prompt is not sent to ComfyUI)" in out
    model = load_catalog(str(tmp_path / "catalog.toml"), tables()).model("invert")
    assert model is not None and model.resolutions == ("96x64",)
    assert model.engine.bind == {"width": "1.width", "height": "1.height"}


def test_object_info_refuses_an_input_the_server_does_not_have():
    info = {"EmptyImage": {"input": {"required": {"w": ["INT"], "height": ["INT"]}}},
            "ImageInvert": {"input": {"required": {"image": ["IMAGE"]}}},
            "SaveImage": {"input": {"required": {"images": ["IMAGE"]}}, "output_node": True}}
    with pytest.raises(ImportRefused) as e:
        infer(graph_of("weightfree.json"), need_prompt=False, object_info=info)
    assert str(e.value) == "bind.width: the server's EmptyImage has no input 'width'"


def txt2img_info(checkpoints: list[str]) -> dict:
    """/object_info of a server with the default graph's nodes and these checkpoint files."""
    def node(required: dict, output: bool = False) -> dict:
        return {"input": {"required": required}, "output_node": output}

    return {"KSampler": node({"seed": ["INT"], "sampler_name": [["euler", "dpmpp_2m"]], "positive": ["CONDITIONING"]}),
            "CheckpointLoaderSimple": node({"ckpt_name": [checkpoints]}),
            "EmptyLatentImage": node({"width": ["INT"], "height": ["INT"]}),
            "CLIPTextEncode": node({"text": ["STRING"], "clip": ["CLIP"]}),
            "VAEDecode": node({"samples": ["LATENT"], "vae": ["VAE"]}),
            "SaveImage": node({"images": ["IMAGE"]}, output=True)}


def test_a_checkpoint_the_server_does_not_have_is_refused():
    with pytest.raises(ImportRefused) as e:
        infer(graph_of("txt2img.json"), object_info=txt2img_info(["sdxl.safetensors", "flux.safetensors"]))
    assert str(e.value) == ("node '4' (CheckpointLoaderSimple) input 'ckpt_name': 'v1-5-pruned-emaonly.safetensors' "
                            "is not on the server (it has: sdxl.safetensors, flux.safetensors)")
    found = infer(graph_of("txt2img.json"), object_info=txt2img_info(["v1-5-pruned-emaonly.safetensors"]))
    assert found.bind["prompt"] == "6.text" and found.outputs == ["9 (SaveImage)"]


def test_v3_combo_options_are_checked_too():
    g = {"1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}},
         "2": {"class_type": "CreateVideo", "inputs": {"images": ["1", 0], "fps": 24}},
         "3": {"class_type": "SaveVideo", "inputs": {"video": ["2", 0], "filename_prefix": "v", "format": "webm",
                                                     "codec": "auto"}}}
    info = {"EmptyImage": {"input": {"required": {"width": ["INT"], "height": ["INT"]}}},
            "CreateVideo": {"input": {"required": {"images": ["IMAGE"], "fps": ["FLOAT"]}}},
            "SaveVideo": {"input": {"required": {"format": ["COMBO", {"options": ["auto", "mp4"]}]}},
                          "output_node": True}}
    with pytest.raises(ImportRefused) as e:
        infer(g, need_prompt=False, object_info=info)
    assert str(e.value) == "node '3' (SaveVideo) input 'format': 'webm' is not on the server (it has: auto, mp4)"


def test_an_edit_workflow_binds_the_input_image_to_its_load_image(tmp_path, capsys):
    found = infer(graph_of("img2img.json"), capability="image.edit")
    assert found.bind == {"prompt": "6.text", "seed": "3.seed", "inputs.image": "10.image"}
    code, out, err = run(tmp_path, capsys, "--capability", "image.edit", "--resolution", "1k", workflow="img2img.json",
                         model_id="edit")
    assert code == 0, err
    model = load_catalog(str(tmp_path / "catalog.toml"), tables()).model("edit")
    assert model.capability == "image.edit" and model.engine.bind["inputs.image"] == "10.image"


def test_an_input_the_workflow_cannot_take_is_refused(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, "--capability", "image.edit")
    assert (code, err) == (2, "genservice: add-model refused: image.edit takes the input 'image', "
                              "but the workflow has no LoadImage node\n")
    with pytest.raises(ImportRefused) as e:
        infer(graph_of("weightfree.json"), need_prompt=False, capability="video.lipsync")
    assert str(e.value) == ("video.lipsync takes the input 'video' (video), which is not inferred from a workflow; "
                            "bind it in the catalog by hand")


def test_an_upscale_workflow_needs_no_prompt(tmp_path, capsys):
    g = {"1": {"class_type": "LoadImage", "inputs": {"image": "x.png"}},
         "2": {"class_type": "ImageScaleBy", "inputs": {"image": ["1", 0], "upscale_method": "lanczos", "scale_by": 2.0}},
         "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "up"}}}
    (tmp_path / "up.json").write_text(json.dumps(g))
    code = main(["admin", "add-model", "comfyui", "--id", "up2x", "--url", NOWHERE, "--workflow", str(tmp_path / "up.json"),
                 "--price", "0.50", "--capability", "media.upscale", "--resolution", "2x",
                 "--catalog", str(tmp_path / "catalog.toml")])
    assert code == 0, capsys.readouterr().err
    model = load_catalog(str(tmp_path / "catalog.toml"), tables()).model("up2x")
    assert model.engine.bind == {"inputs.media": "1.image"}


def test_a_node_id_of_other_digits_is_ordered_last_not_a_crash():
    """`'²'.isdigit()` is True and `int('²')` raises: a graph keyed so was a traceback."""
    graph = graph_of("txt2img.json")
    graph["²"] = graph.pop("9")  # the SaveImage node
    found = infer(graph)
    assert found.outputs == ["² (SaveImage)"]
