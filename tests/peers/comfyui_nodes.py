"""The node classes of the ComfyUI peer and ComfyUI's validation of a prompt.

Input specs are those a real ComfyUI 0.3.64 reports in `/object_info` (min, max, default,
step), because its validation answers quote them (`input_config`). Validation follows
ComfyUI's rules as measured against it (docs/comfyui-peer.md):

- each output node is validated depth-first, every node once (a memo), inputs in the
  class's order, at most one error an input;
- a link to a missing node or a slot out of range fails with the Python exception
  ComfyUI itself raises (`KeyError`, `IndexError`): on the output node it is
  `exception_during_validation` (and the only case where `error.details` is not empty),
  on an upstream node `exception_during_inner_validation`, filed under the linked node;
- a cycle makes every node on it invalid with no reason (`node_errors` `{}`);
- literals are converted with `int()`/`float()`/`str()` before min/max and list checks;
- `node_errors` of an invalid output lists every failed node validated so far, as
  ComfyUI does, so `dependent_outputs` can name an output that does not depend on it.

The node implementations use Pillow; only what a client can observe is reproduced
(sizes, colours, file names, PNG `prompt` metadata).
"""

from __future__ import annotations

import hashlib
import json
import random
import string
import traceback
from fractions import Fraction
from pathlib import Path

import av

from PIL import Image, ImageOps, PngImagePlugin

METHODS = ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]
RESAMPLE = {"nearest-exact": Image.NEAREST, "bilinear": Image.BILINEAR, "area": Image.BOX,
            "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
SIZE = {"default": 512, "min": 0, "max": 16384, "step": 1}
HIDDEN = {"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO"}
CONVERT = {"INT": int, "FLOAT": float, "STRING": str}


def _spec(required: dict, outputs: tuple, output_node: bool, display: str, category: str,
          hidden: dict | None = None, module: str = "nodes") -> dict:
    return {"required": required, "hidden": hidden or {}, "outputs": outputs, "output_node": output_node,
            "display_name": display, "category": category, "module": module}


# class -> spec; an input spec is [type] or [type, options], as /object_info shows it
NODES: dict[str, dict] = {
    "EmptyImage": _spec({"width": ["INT", {"default": 512, "min": 1, "max": 16384, "step": 1}],
                         "height": ["INT", {"default": 512, "min": 1, "max": 16384, "step": 1}],
                         "batch_size": ["INT", {"default": 1, "min": 1, "max": 4096}],
                         "color": ["INT", {"default": 0, "min": 0, "max": 16777215, "step": 1, "display": "color"}]},
                        ("IMAGE",), False, "EmptyImage", "image"),
    "LoadImage": _spec({"image": ["FILES", {"image_upload": True}]}, ("IMAGE", "MASK"), False, "Load Image", "image"),
    "ImageScale": _spec({"image": ["IMAGE"], "upscale_method": [METHODS], "width": ["INT", SIZE],
                         "height": ["INT", SIZE], "crop": [["disabled", "center"]]},
                        ("IMAGE",), False, "Upscale Image", "image/upscaling"),
    "ImageScaleBy": _spec({"image": ["IMAGE"], "upscale_method": [METHODS],
                           "scale_by": ["FLOAT", {"default": 1.0, "min": 0.01, "max": 8.0, "step": 0.01}]},
                          ("IMAGE",), False, "Upscale Image By", "image/upscaling"),
    "ImageInvert": _spec({"image": ["IMAGE"]}, ("IMAGE",), False, "Invert Image", "image"),
    "SaveImage": _spec({"images": ["IMAGE"], "filename_prefix": ["STRING", {"default": "ComfyUI"}]},
                       (), True, "Save Image", "image", HIDDEN),
    "PreviewImage": _spec({"images": ["IMAGE"]}, (), True, "Preview Image", "image", HIDDEN),
    # ComfyUI's newer (v3) nodes: a COMBO input is not checked against its options before the run
    "CreateVideo": _spec({"images": ["IMAGE"],
                          "fps": ["FLOAT", {"default": 30.0, "min": 1.0, "max": 120.0, "step": 1.0}]},
                         ("VIDEO",), False, "Create Video", "image/video", module="comfy_extras.nodes_video"),
    "SaveVideo": _spec({"video": ["VIDEO"], "filename_prefix": ["STRING", {"default": "video/ComfyUI", "multiline": False}],
                        "format": ["COMBO", {"default": "auto", "multiselect": False, "options": ["auto", "mp4"]}],
                        "codec": ["COMBO", {"default": "auto", "multiselect": False, "options": ["auto", "h264"]}]},
                       (), True, "Save Video", "image/video", {"prompt": ["PROMPT"], "extra_pnginfo": ["EXTRA_PNGINFO"]},
                       module="comfy_extras.nodes_video"),
    # the peer's own test nodes (not ComfyUI's)
    "PeerSleep": _spec({"image": ["IMAGE"], "seconds": ["FLOAT", {"default": 1.0, "min": 0.0, "max": 3600.0}]},
                       ("IMAGE",), False, "PeerSleep", "peer"),
    "PeerFail": _spec({"image": ["IMAGE"]}, ("IMAGE",), False, "PeerFail", "peer"),
}


def input_files(in_dir: Path) -> list[str]:
    return sorted(p.name for p in in_dir.iterdir() if p.is_file())


def input_spec(cls: str, name: str, in_dir: Path) -> list:
    spec = NODES[cls]["required"][name]
    if spec[0] == "FILES":  # LoadImage lists the input folder
        return [input_files(in_dir), spec[1]]
    return spec


def object_info(cls: str, in_dir: Path) -> dict:
    node = NODES[cls]
    required = {k: input_spec(cls, k, in_dir) for k in node["required"]}
    info = {"input": {"required": required}, "input_order": {"required": list(required)}}
    if node["hidden"]:
        info["input"]["hidden"] = dict(node["hidden"])
        info["input_order"]["hidden"] = list(node["hidden"])
    outputs = list(node["outputs"])
    return {**info, "output": outputs, "output_is_list": [False] * len(outputs), "output_name": outputs,
            "name": cls, "display_name": node["display_name"], "description": "", "python_module": node["module"],
            "category": node["category"], "output_node": node["output_node"]}


def error(kind: str, message: str, details: str, extra: dict | None = None) -> dict:
    return {"type": kind, "message": message, "details": details, "extra_info": extra or {}}


def type_name(e: BaseException) -> str:
    cls = type(e)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def annotated(name: str) -> tuple[str, str | None]:
    """ComfyUI's `name [output]` / `[input]` / `[temp]` file annotation."""
    for kind in ("output", "input", "temp"):
        if name.endswith(f" [{kind}]"):
            return name[:-len(kind) - 3], kind
    return name, None


class Validation:
    """One prompt's validation: `run(prompt, targets)` -> (ok, error, outputs, node_errors)."""

    def __init__(self, prompt: dict, folders: dict[str, Path]) -> None:
        self.prompt, self.folders = prompt, folders
        self.validated: dict = {}
        self.active: set = set()

    def run(self, targets: list | None) -> tuple[bool, dict | None, list, dict]:
        prompt = self.prompt
        if isinstance(prompt, dict):
            items = list(prompt)
        elif isinstance(prompt, list) and not prompt:
            items = []
        else:
            raise TypeError("a prompt is an object of nodes")
        outputs = []
        for x in items:
            if not isinstance(prompt[x], dict) or "class_type" not in prompt[x]:
                return False, error("invalid_prompt", "Cannot execute because a node is missing the class_type "
                                    "property.", f"Node ID '#{x}'"), [], {}
            cls = prompt[x]["class_type"]
            if cls not in NODES:
                return False, error("invalid_prompt", f"Cannot execute because node {cls} does not exist.",
                                    f"Node ID '#{x}'"), [], {}
            if NODES[cls]["output_node"] and (targets is None or x in targets):
                outputs.append(x)
        if not outputs:
            return False, error("prompt_no_outputs", "Prompt has no outputs", ""), [], {}
        good, failures, node_errors = [], [], {}
        for o in outputs:
            try:
                valid, reasons = self.node(o)
            except Exception as ex:  # noqa: BLE001 - ComfyUI turns it into an answer
                valid, reasons = False, [error("exception_during_validation", "Exception when validating node",
                                               str(ex), {"exception_type": type_name(ex),
                                                         "traceback": traceback.format_tb(ex.__traceback__)})]
                self.validated[o] = (False, reasons)
            if valid:
                good.append(o)
                continue
            failures.append(reasons)
            for nid, (ok, why) in self.validated.items():
                if not ok and why:
                    entry = node_errors.setdefault(nid, {"errors": why, "dependent_outputs": [],
                                                         "class_type": prompt[nid]["class_type"]})
                    entry["dependent_outputs"].append(o)
        if not good:
            details = "\n".join(f"{e['message']}: {e['details']}" for reasons in failures for e in reasons)
            return False, error("prompt_outputs_failed_validation", "Prompt outputs failed validation",
                                details), [], node_errors
        return True, None, good, node_errors

    def node(self, nid) -> tuple[bool, list]:
        if nid in self.validated:
            return self.validated[nid]
        if nid in self.active:  # ComfyUI recurses until Python's limit
            raise RecursionError("maximum recursion depth exceeded")
        self.active.add(nid)
        try:
            return self._node(nid)
        finally:
            self.active.discard(nid)

    def _node(self, nid) -> tuple[bool, list]:
        node = self.prompt[nid]
        cls = node["class_type"]
        inputs = node["inputs"]
        valid, errors = True, []
        for name in NODES[cls]["required"]:
            spec = input_spec(cls, name, self.folders["input"])
            kind, opts = spec[0], (spec[1] if len(spec) > 1 else {})
            info = [kind, opts]
            if name not in inputs:
                errors.append(error("required_input_missing", "Required input is missing", name,
                                    {"input_name": name}))
                continue
            val = inputs[name]
            if isinstance(val, list):
                if len(val) != 2:
                    errors.append(error("bad_linked_input", "Bad linked input, must be a length-2 list of "
                                        "[node_id, slot_index]", name,
                                        {"input_name": name, "input_config": info, "received_value": val}))
                    continue
                source = val[0]
                received = NODES[self.prompt[source]["class_type"]]["outputs"][val[1]]
                if received != kind:
                    errors.append(error("return_type_mismatch", "Return type mismatch between linked nodes",
                                        f"{name}, received_type({received}) mismatch input_type({kind})",
                                        {"input_name": name, "input_config": info, "received_type": received,
                                         "linked_node": val}))
                    continue
                try:
                    if not self.node(source)[0]:
                        valid = False
                except Exception as ex:  # noqa: BLE001
                    valid = False
                    self.validated[source] = (False, [error(
                        "exception_during_inner_validation", "Exception when validating inner node", str(ex),
                        {"input_name": name, "input_config": info, "exception_message": str(ex),
                         "exception_type": type_name(ex), "traceback": traceback.format_tb(ex.__traceback__),
                         "linked_node": val})])
                continue
            if NODES[cls]["required"][name][0] == "FILES":  # LoadImage validates its file itself
                if not self._file_exists(str(val)):
                    errors.append(error("custom_validation_failed", "Custom validation failed for node",
                                        f"{name} - Invalid image file: {val}", {"input_name": name}))
                continue
            try:
                if isinstance(kind, str) and kind in CONVERT:
                    val = CONVERT[kind](val)
            except Exception as ex:  # noqa: BLE001
                errors.append(error("invalid_input_type", f"Failed to convert an input value to a {kind} value",
                                    f"{name}, {val}, {ex}", {"input_name": name, "input_config": info,
                                                             "received_value": val, "exception_message": str(ex)}))
                continue
            inputs[name] = val
            if "min" in opts and val < opts["min"]:
                errors.append(error("value_smaller_than_min", f"Value {val} smaller than min of {opts['min']}", name,
                                    {"input_name": name, "input_config": info, "received_value": val}))
            elif "max" in opts and val > opts["max"]:
                errors.append(error("value_bigger_than_max", f"Value {val} bigger than max of {opts['max']}", name,
                                    {"input_name": name, "input_config": info, "received_value": val}))
            elif isinstance(kind, list) and val not in kind:
                errors.append(error("value_not_in_list", "Value not in list", f"{name}: '{val}' not in {kind}",
                                    {"input_name": name, "input_config": info, "received_value": val}))
        result = (valid and not errors, errors)
        self.validated[nid] = result
        return result

    def _file_exists(self, name: str) -> bool:
        name, kind = annotated(name)
        return (self.folders[kind or "input"] / name).is_file()


# -- running a node ------------------------------------------------------------------------------
def scale(image: Image.Image, method: str, width: int, height: int, crop: str) -> Image.Image:
    if width == 0 and height == 0:
        return image
    width = width or max(1, round(image.width * height / image.height))
    height = height or max(1, round(image.height * width / image.width))
    if crop == "center":
        return ImageOps.fit(image, (width, height), RESAMPLE[method])
    return image.resize((width, height), RESAMPLE[method])


def load_image(path: Path) -> tuple[list, list]:
    image = ImageOps.exif_transpose(Image.open(path))
    rgb = image.convert("RGB")
    if "A" in image.getbands():
        mask = ImageOps.invert(image.getchannel("A"))
    else:
        mask = Image.new("L", (64, 64), 0)  # ComfyUI's mask of an image without alpha
    return [rgb], [mask]


def save_images(images: list, folder: Path, prefix: str, kind: str, prompt: dict | None,
                compress_level: int) -> dict:
    """SaveImage/PreviewImage: `prefix` may hold a subfolder; the counter goes on from the
    highest `prefix_NNNNN_` already there; a prefix escaping the folder is an error."""
    sub, base, target = save_path(folder, prefix)
    counter = next_counter(target, base)
    files = []
    for image in images:
        name = f"{base}_{counter:05}_.png"
        meta = PngImagePlugin.PngInfo()
        if prompt is not None:
            meta.add_text("prompt", json.dumps(prompt_with_hashes(prompt, folder.parent)))
        image.save(target / name, pnginfo=meta, compress_level=compress_level)
        files.append({"filename": name, "subfolder": sub, "type": kind})
        counter += 1
    return {"images": files}


def save_path(folder: Path, prefix: str) -> tuple[str, str, Path]:
    """ComfyUI's get_save_image_path: (subfolder, base name, folder made)."""
    sub, base = str(Path(prefix).parent), Path(prefix).name
    sub = "" if sub == "." else sub
    target = (folder / sub).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise Exception("**** ERROR: Saving image outside the output folder is not allowed.")
    target.mkdir(parents=True, exist_ok=True)
    return sub, base, target


def next_counter(target: Path, base: str) -> int:
    """One past the highest `base_NNNNN_` in the folder, whatever the extension."""
    counters = [int(p.name[len(base) + 1:].split("_")[0]) for p in target.iterdir()
                if p.name[:len(base) + 1] == base + "_" and p.name[len(base) + 1:].split("_")[0].isdigit()]
    return max(counters, default=0) + 1


def save_video(video: dict, folder: Path, prefix: str, container: str, codec: str, prompt: dict) -> dict:
    """SaveVideo: mp4/h264 (what `auto` means too); any other format or codec fails at run
    time with ComfyUI's messages; the prompt goes into the container's metadata."""
    sub, base, target = save_path(folder, prefix)
    if container not in ("auto", "mp4"):
        raise ValueError(f"'{container}' is not a valid VideoContainer")
    name = f"{base}_{next_counter(target, base):05}_.mp4"
    if codec not in ("auto", "h264"):
        raise ValueError("Only H264 codec is supported for now")
    frames = video["frames"]
    with av.open(str(target / name), mode="w", format="mp4", options={"movflags": "use_metadata_tags"}) as out:
        out.metadata["prompt"] = json.dumps(prompt)
        stream = out.add_stream("h264", rate=Fraction(round(video["fps"] * 1000), 1000))
        stream.width, stream.height, stream.pix_fmt = frames[0].width, frames[0].height, "yuv420p"
        for image in frames:
            for packet in stream.encode(av.VideoFrame.from_image(image.convert("RGB"))):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return {"images": [{"filename": name, "subfolder": sub, "type": "output"}], "animated": [True]}


def file_hash(folders_root: Path, name: str) -> str:
    name, kind = annotated(name)
    path = folders_root / (kind or "input") / name
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def prompt_with_hashes(prompt: dict, root: Path) -> dict:
    """The prompt as ComfyUI writes it into a PNG: LoadImage nodes carry `is_changed`."""
    out = {}
    for nid, node in prompt.items():
        node = dict(node)
        if node["class_type"] == "LoadImage":
            node["is_changed"] = [file_hash(root, str(node["inputs"]["image"]))]
        out[nid] = node
    return out


def preview_prefix() -> str:
    return "ComfyUI_temp_" + "".join(random.choice(string.ascii_lowercase) for _ in range(5))
