"""What a ComfyUI workflow (API format) binds: read from the graph, for `admin add-model`.

A self-hoster exports a workflow with "Save (API)" and should not have to read node ids
to write `[models.engine.bind]`. The graph says it: the positive prompt is the text
input of the encode node feeding a sampler's `positive` (through conditioning
pass-through nodes and guiders), the seed is the sampler's (or its noise node's), the
size is the empty latent's (or empty image's) feeding it, the outputs are the Save
nodes. Pure: `/object_info` is fetched by the caller and handed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from service.digits import ascii_int

from .capabilities import BY_ID

# output nodes whose files land in ComfyUI's output folder (previews go to temp: never fetched)
SAVE_NODES = ("SaveImage", "SaveVideo", "SaveAnimatedWEBP", "SaveAnimatedPNG", "SaveAudio",
              "SaveWEBM", "VHS_VideoCombine", "SaveImageWebsocket")
PREVIEW_NODES = ("PreviewImage", "PreviewAudio", "PreviewAny")
# inputs a sampler's positive conditioning passes through on its way from the text encoder
_PASS = ("positive", "conditioning", "conditioning_to", "conditioning_1", "guider", "cond")
_TEXT = ("text", "text_g", "prompt", "positive_prompt")
_MAX_HOPS = 32


class ImportRefused(ValueError):
    """One line: why this graph cannot become a model."""


@dataclass
class Inferred:
    """What the graph binds, with a line per finding for the operator to read."""

    bind: dict[str, str] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)  # "<node id> (<class>)"
    width: int | None = None
    height: int | None = None
    notes: list[str] = field(default_factory=list)


def load_graph(text: str) -> dict[str, Any]:
    """The API-format graph in `text`, or ImportRefused naming what is wrong."""
    try:
        graph = json.loads(text)
    except json.JSONDecodeError as e:
        raise ImportRefused(f"the workflow is not JSON: {e}") from None
    if isinstance(graph, dict) and "nodes" in graph and "links" in graph:
        raise ImportRefused("the workflow is in ComfyUI's UI format; export it with \"Save (API)\" (Export (API))")
    if not isinstance(graph, dict) or not graph or not all(
        isinstance(n, dict) and isinstance(n.get("class_type"), str) and isinstance(n.get("inputs"), dict)
        for n in graph.values()
    ):
        raise ImportRefused("the workflow is not in API format ({node id: {class_type, inputs}}); "
                            "export it with \"Save (API)\"")
    for node_id, node in graph.items():
        for name, value in node["inputs"].items():
            if _is_link(value) and str(value[0]) not in graph:
                raise ImportRefused(f"node {node_id!r} ({node['class_type']}) input {name!r} links to "
                                    f"node {str(value[0])!r}, which is not in the workflow")
    return graph


def infer(graph: dict[str, Any], *, need_prompt: bool = True, object_info: dict | None = None,
          capability: str = "image.generate") -> Inferred:
    """The bind table and outputs of `graph`; ImportRefused when it has no output, no
    prompt while `need_prompt`, or no LoadImage for an input slot the capability needs.
    With `object_info` (the server's), unknown node classes, bound inputs the server does
    not know and list values it does not offer are refused too."""
    found = Inferred()
    if object_info is not None:
        _check_classes(graph, object_info)
    found.outputs = _outputs(graph, object_info)
    if not found.outputs:
        raise ImportRefused("no output node: the workflow saves nothing (add a SaveImage or SaveVideo node)")
    sampler = _sampler(graph)
    if sampler is not None:
        found.notes.append(f"sampler: node {sampler} ({graph[sampler]['class_type']})")
        prompt = _prompt_of(graph, sampler)
        if prompt:
            found.bind["prompt"] = prompt
        seed = _seed_of(graph, sampler)
        if seed:
            found.bind["seed"] = seed
    size = _size_node(graph, sampler)
    if size is not None:
        found.bind["width"], found.bind["height"] = f"{size}.width", f"{size}.height"
        found.width, found.height = (_int(graph[size]["inputs"].get(k)) for k in ("width", "height"))
    _bind_slots(graph, capability, found)
    if "prompt" not in found.bind and need_prompt:
        raise ImportRefused("no prompt: no text input feeds a sampler's positive conditioning "
                            "(give --no-prompt to import a graph that takes none)")
    if object_info is not None:
        for key, target in found.bind.items():
            node_id, name = target.split(".", 1)
            cls = graph[node_id]["class_type"]
            if name not in _input_names(object_info.get(cls, {})):
                raise ImportRefused(f"bind.{key}: the server's {cls} has no input {name!r}")
        _check_choices(graph, object_info, set(found.bind.values()))
    return found


def _choices(spec: object) -> list | None:
    """The allowed values of a list input (`[[a, b]]`, or v3's `["COMBO", {options}]`), else None."""
    if not isinstance(spec, list) or not spec:
        return None
    if isinstance(spec[0], list):
        return spec[0]
    if spec[0] == "COMBO" and len(spec) > 1 and isinstance(spec[1], dict):
        options = spec[1].get("options")
        return options if isinstance(options, list) else None
    return None


def _check_choices(graph: dict[str, Any], object_info: dict, bound: set[str]) -> None:
    """A literal the server would refuse (a checkpoint, LoRA or sampler it does not have)
    stops the import here, not at the first job."""
    for node_id in sorted(graph, key=_order):
        cls = graph[node_id]["class_type"]
        spec = (object_info.get(cls) or {}).get("input") or {}
        specs = {**(spec.get("optional") or {}), **(spec.get("required") or {})}
        for name, value in graph[node_id]["inputs"].items():
            options = _choices(specs.get(name))
            if options is None or _is_link(value) or f"{node_id}.{name}" in bound or value in options:
                continue
            shown = ", ".join(map(str, options[:5])) + (", ..." if len(options) > 5 else "") or "none"
            raise ImportRefused(f"node {node_id!r} ({cls}) input {name!r}: {value!r} is not on the server "
                                f"(it has: {shown})")


def _bind_slots(graph: dict[str, Any], capability: str, found: Inferred) -> None:
    """The capability's image slots, in order, to the LoadImage nodes, in id order (the node
    uploads the job's asset to the server and binds its name)."""
    loaders = [n for n in sorted(graph, key=_order) if graph[n]["class_type"] == "LoadImage"]
    for slot in BY_ID[capability].inputs:
        if "image" in slot.kinds and loaders:
            found.bind[f"inputs.{slot.name}"] = f"{loaders.pop(0)}.image"
        elif slot.min > 0 and "image" in slot.kinds:
            raise ImportRefused(f"{capability} takes the input {slot.name!r}, but the workflow has no LoadImage node")
        elif slot.min > 0:
            raise ImportRefused(f"{capability} takes the input {slot.name!r} ({'/'.join(slot.kinds)}), which is "
                                "not inferred from a workflow; bind it in the catalog by hand")


def _is_link(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and isinstance(value[0], (str, int)) \
        and isinstance(value[1], int)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _order(node_id: str) -> tuple[int, str]:
    number = ascii_int(node_id, 1 << 62)
    return (1 << 62, node_id) if number is None else (number, node_id)


def _input_names(info: dict) -> set[str]:
    spec = info.get("input") or {}
    return {name for part in ("required", "optional") for name in (spec.get(part) or {})}


def _check_classes(graph: dict[str, Any], object_info: dict) -> None:
    for node_id in sorted(graph, key=_order):
        cls = graph[node_id]["class_type"]
        if cls not in object_info:
            raise ImportRefused(f"node {node_id!r}: class {cls!r} is not installed on the server")


def _outputs(graph: dict[str, Any], object_info: dict | None) -> list[str]:
    out = []
    for node_id in sorted(graph, key=_order):
        cls = graph[node_id]["class_type"]
        is_output = cls in SAVE_NODES
        if object_info is not None and cls in object_info:
            is_output = bool(object_info[cls].get("output_node")) and cls not in PREVIEW_NODES
        if is_output:
            out.append(f"{node_id} ({cls})")
    return out


def _sampler(graph: dict[str, Any]) -> str | None:
    """The first node (by id) with a linked `positive` or `guider`: a sampler."""
    for node_id in sorted(graph, key=_order):
        inputs = graph[node_id]["inputs"]
        if any(_is_link(inputs.get(k)) for k in ("positive", "guider")):
            return node_id
    return None


def _prompt_of(graph: dict[str, Any], sampler: str) -> str | None:
    """`<node>.text` of the encoder at the end of the sampler's positive chain."""
    node_id, seen = sampler, set()
    first = True
    for _ in range(_MAX_HOPS):
        if node_id in seen:
            return None
        seen.add(node_id)
        inputs = graph[node_id]["inputs"]
        if not first:
            for name in _TEXT:
                if isinstance(inputs.get(name), str):
                    return f"{node_id}.{name}"
        first = False
        nxt = next((inputs[k] for k in _PASS if _is_link(inputs.get(k))), None)
        if nxt is None:
            return None
        node_id = str(nxt[0])
    return None


def _seed_of(graph: dict[str, Any], sampler: str) -> str | None:
    inputs = graph[sampler]["inputs"]
    for name in ("seed", "noise_seed"):
        if _int(inputs.get(name)) is not None:
            return f"{sampler}.{name}"
    noise = inputs.get("noise")  # SamplerCustomAdvanced: a RandomNoise node holds it
    if _is_link(noise):
        node = str(noise[0])
        if _int(graph[node]["inputs"].get("noise_seed")) is not None:
            return f"{node}.noise_seed"
    return None


def _size_node(graph: dict[str, Any], sampler: str | None) -> str | None:
    """The node with literal width and height feeding the sampler's latent, else the only
    `Empty*` node with both (an EmptyImage graph)."""
    def sized(node_id: str) -> bool:
        inputs = graph[node_id]["inputs"]
        return _int(inputs.get("width")) is not None and _int(inputs.get("height")) is not None

    if sampler is not None:
        latent = graph[sampler]["inputs"].get("latent_image") or graph[sampler]["inputs"].get("latent")
        if _is_link(latent) and sized(str(latent[0])):
            return str(latent[0])
    empties = [n for n in sorted(graph, key=_order) if graph[n]["class_type"].startswith("Empty") and sized(n)]
    return empties[0] if len(empties) == 1 else None
