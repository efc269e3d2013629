"""`genservice admin add-model comfyui ...`: a ComfyUI workflow becomes a catalog entry.

Reads the API-format graph, infers the bind table (service/catalog/comfy_import.py),
checks it against the server's `/object_info` when the server answers, copies the
workflow next to the catalog (`workflows/<id>.json`) and appends the `[[models]]` entry.
The whole new catalog is loaded as the node would load it before anything is written,
so the command never leaves a catalog the node refuses to start with.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from importlib import resources
from pathlib import Path

import httpx

from service.catalog.capabilities import BY_ID
from service.catalog.catalog import CatalogError, loads_catalog
from service.catalog.comfy_import import ImportRefused, Inferred, infer, load_graph
from service.catalog.engines import _URL
from service.catalog.schema import SLUG
from service.engines.table import tables as engine_tables
from service.money import fmt, to_uc

OBJECT_INFO_S = 10.0


def add_model(args, settings) -> int:
    """Exit 0 when the entry is written, 2 (one line on stderr) when refused."""
    try:
        return _add(args, settings)
    except ImportRefused as e:
        print(f"genservice: add-model refused: {e}", file=sys.stderr)
        return 2


def _add(args, settings) -> int:
    if not re.fullmatch(SLUG, args.id):
        raise ImportRefused(f"--id {args.id!r} is not a model id (lower-case letters, digits, '.', '_', '-')")
    if args.capability not in BY_ID:
        raise ImportRefused(f"--capability {args.capability!r} is unknown; known: {', '.join(BY_ID)}")
    url = args.engine_url.rstrip("/")
    if not re.fullmatch(_URL, url):
        raise ImportRefused(f"--url {args.engine_url!r} is not an http(s) base URL")
    try:
        price_uc = to_uc(args.price)
        if price_uc < 0:
            raise ValueError
    except ValueError:
        raise ImportRefused(f"--price {args.price!r} is not an amount of credits (e.g. 4.00)") from None
    args.price = fmt(price_uc)
    try:
        text = Path(args.workflow).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ImportRefused(f"cannot read {args.workflow}: {getattr(e, 'strerror', None) or e}") from None
    graph = load_graph(text)
    info = _object_info(url)
    need_prompt = BY_ID[args.capability].prompt_required and not args.no_prompt
    found = infer(graph, need_prompt=need_prompt, object_info=info, capability=args.capability)
    resolution = args.resolution or (f"{found.width}x{found.height}" if found.width and found.height else "1k")

    catalog_path, seeded = _catalog_path(args, settings)
    existing = catalog_path.read_text(encoding="utf-8") if catalog_path.exists() else _builtin_text()
    try:
        listed = tomllib.loads(existing).get("models", [])
    except tomllib.TOMLDecodeError as e:
        raise ImportRefused(f"{catalog_path} is not valid TOML: {e}") from None
    if any(isinstance(m, dict) and m.get("id") == args.id for m in listed):
        raise ImportRefused(f"model {args.id!r} is already in {catalog_path}")
    rel = Path("workflows") / f"{args.id}.json"
    workflow_path = catalog_path.parent / rel
    entry = _entry(args, url, rel.as_posix(), resolution, found)
    new_text = existing.rstrip("\n") + "\n\n" + entry
    if workflow_path.exists() and workflow_path.read_text(encoding="utf-8") != text:
        raise ImportRefused(f"{workflow_path} already exists with another workflow; remove it or pick another --id")
    created = not workflow_path.exists()
    workflow_path.parent.mkdir(parents=True, exist_ok=True)
    workflow_path.write_text(text, encoding="utf-8")
    try:
        _check(new_text, catalog_path, args.id)
    except ImportRefused:
        if created:
            workflow_path.unlink()
        raise
    _report(args, url, info is not None, found, resolution)
    _write_atomic(catalog_path, new_text)
    print(f"wrote model {args.id!r} to {catalog_path} (workflow copied to {workflow_path})")
    if seeded:
        print(f"the node used the built-in catalog: {catalog_path} starts as a copy of it; "
              f"set GENSERVICE_CATALOG_FILE={catalog_path} and restart the node to serve it")
    else:  # the running node reads the same file again on a reload (service/reload.py)
        print("serve it without a restart: \"Reload catalog\" on /operator/catalog, "
              "POST /operator/v1/catalog/reload, or SIGHUP to genservice serve")
    return 0


def _object_info(url: str) -> dict | None:
    """The server's node classes, or None (said on stdout) when it does not answer."""
    try:
        resp = httpx.get(f"{url}/object_info", timeout=OBJECT_INFO_S)
        resp.raise_for_status()
        info = resp.json()
    except (httpx.HTTPError, ValueError) as e:
        print(f"note: {url} did not answer /object_info ({type(e).__name__}); the graph is not checked "
              "against the server's nodes")
        return None
    if not isinstance(info, dict):
        print(f"note: {url}/object_info is not an object; the graph is not checked against the server's nodes")
        return None
    return info


def _catalog_path(args, settings) -> tuple[Path, bool]:
    """The catalog file to write, and whether it starts as a copy of the built-in one."""
    if args.catalog:
        path = Path(args.catalog)
    elif settings.catalog_file:
        path = Path(settings.catalog_file)
    else:
        path = Path(settings.data_dir) / "catalog.toml"
    return path.resolve(), not path.exists()


def _builtin_text() -> str:
    return resources.files("service.catalog").joinpath("default.toml").read_text(encoding="utf-8")


def _toml(value: object) -> str:
    """A TOML value: JSON's strings, numbers and arrays are TOML's too."""
    return json.dumps(value, ensure_ascii=False)


def _entry(args, url: str, workflow: str, resolution: str, found: Inferred) -> str:
    lines = ["[[models]]", f"id = {_toml(args.id)}", f"capability = {_toml(args.capability)}",
             'backend = "comfyui"']
    if args.description:
        lines.append(f"description = {_toml(args.description)}")
    lines += [f"resolutions = [{_toml(resolution)}]",
              "concurrency = 1                      # per ComfyUI server: it runs one prompt at a time",
              f"prices = [{{ resolution = {_toml(resolution)}, credits = {_toml(args.price)} }}]",
              "", "[models.engine]", f"urls = [{_toml(url)}]", f"workflow = {_toml(workflow)}", "",
              "[models.engine.bind]"]
    lines += [f"{_toml(key) if '.' in key else key} = {_toml(target)}" for key, target in found.bind.items()]
    return "\n".join(lines) + "\n"


def _check(new_text: str, catalog_path: Path, model_id: str) -> None:
    """Load the new catalog as the node will at its next start."""
    try:
        loads_catalog(new_text, source=str(catalog_path), base_dir=catalog_path.parent, engines=engine_tables())
    except CatalogError as e:
        if "duplicate model ids" in str(e):
            raise ImportRefused(f"model {model_id!r} is already in {catalog_path}") from None
        lines = str(e).splitlines()
        raise ImportRefused(lines[-1].strip() if len(lines) > 1 else lines[0]) from None


def _report(args, url: str, checked: bool, found: Inferred, resolution: str) -> None:
    print(f"model {args.id!r} ({args.capability}) on {url}:")
    for note in found.notes:
        print(f"  {note}")
    for key, target in found.bind.items():
        print(f"  {key:<8} <- {target}")
    if "prompt" not in found.bind:
        print("  prompt   (not bound: the job's prompt is not sent to ComfyUI)")
    if "seed" not in found.bind:
        print("  seed     (not bound: an identical graph is answered from ComfyUI's cache)")
    print(f"  outputs  {', '.join(found.outputs)}")
    print(f"  tier     {resolution} at {args.price} credits")
    print(f"  checked  {'against ' + url + '/object_info' if checked else 'no (server not reachable)'}")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
