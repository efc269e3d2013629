"""The client package's typed results cannot drift from the node: genservice_client/models.py
is regenerated from the document a node serves and must equal the checked-in file, and each
public method returns the model its operation's document names."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import typing
from pathlib import Path

import trio

import genservice_client as gc
from genservice_client import aio, client, models

PACKAGE = Path(__file__).resolve().parent.parent / "clients" / "python"
GENERATOR = PACKAGE / "scripts" / "gen_models.py"

# public method -> (operationId, how its answer wraps the model: "" bare, "data" or "data[]")
METHODS = {
    "submit": ("submit_capability", ""), "status": ("request_status", ""), "cancel": ("cancel_request", ""),
    "jobs": ("list_requests", "data[]"), "balance": ("get_balance", "data"), "upload": ("upload", "data"),
    "wait": ("request_status", ""),
}
PRODUCT_METHODS = {"list": ("list_products", "data[]"), "get": ("get_product", "data"),
                   "run": ("start_run", "data"), "get_run": ("get_run", "data"), "cancel_run": ("cancel_run", "data")}


async def _doc(node) -> dict:
    r = await node.client.get("/v1/openapi.json")
    assert r.status_code == 200
    return await r.get_json()


async def test_the_models_are_generated_from_the_served_document(node):
    doc = await _doc(node)
    out = await trio.run_process([sys.executable, str(GENERATOR), "-"], stdin=json.dumps(doc).encode(),
                                 capture_stdout=True, check=True)
    checked_in = (PACKAGE / "genservice_client" / "models.py").read_text()
    assert out.stdout.decode() == checked_in, "regenerate: python clients/python/scripts/gen_models.py (see its docstring)"
    shapes = {n for n in doc["components"]["schemas"] if n not in ("Error", "Unauthorized", "Forbidden", "Timeout")}
    assert set(models.__all__) == shapes | {"ProgressEvent"}  # the one event shape given inline
    assert models.STREAMS["job_events"] == {"status": models.JobStatus, "reset": models.JobStatus,
                                            "progress": models.ProgressEvent}
    assert models.STREAMS.keys() == {"job_events", "run_events", "project_events"}
    r = await node.client.get("/v1/openapi.json?version=3.2")  # itemSchema: the same models
    out32 = await trio.run_process([sys.executable, str(GENERATOR), "-"], stdin=json.dumps(await r.get_json()).encode(),
                                   capture_stdout=True, check=True)
    assert out32.stdout.decode() == checked_in


def _model_of(answer: dict, wrap: str) -> str:
    schema = answer["content"]["application/json"]["schema"]
    if wrap:
        schema = schema["properties"]["data"]
    if wrap == "data[]":
        schema = schema["items"]
    return schema["$ref"].rsplit("/", 1)[-1]


async def test_every_public_method_returns_its_operations_model(node):
    doc = await _doc(node)
    ops = {op["operationId"]: op for ops in doc["paths"].values() for op in ops.values()}
    for owner, table in ((client.Client, METHODS), (aio.AsyncClient, METHODS), (client.Products, PRODUCT_METHODS),
                         (aio.AsyncProducts, PRODUCT_METHODS)):
        for name, (op_id, wrap) in table.items():
            responses = ops[op_id]["responses"]
            # a submit's 200 comes only with `Prefer: wait`: its plain answer is the 202
            answer = responses.get("202") or next(a for s, a in responses.items() if s.startswith("2"))
            expected = getattr(models, _model_of(answer, wrap))
            returned = typing.get_type_hints(getattr(owner, name))["return"]
            returned = typing.get_args(returned)[0] if wrap == "data[]" else returned
            assert returned is expected, (owner.__name__, name, returned, expected)
    generate = typing.get_type_hints(client.Client.generate)["return"]
    assert set(typing.get_args(generate)) == {models.JobStatus, models.SubmitAccepted}


def test_models_are_open_and_exact_about_money():
    job = gc.JobStatus.model_validate({
        "request_id": "r1", "status": "completed", "capability": "image.generate", "model": "proc-image",
        "source": "api", "project_id": "p1", "created_at": "2026-01-02T03:04:05Z", "finished_at": None,
        "credits": {"estimate": "1.00", "actual": "0.10"}, "outputs": [], "images": [], "error": None,
        "video": None, "status_url": "/s", "cancel_url": "/c", "added_later": 1})
    assert str(job.credits.actual) == "0.10" and job.added_later == 1
    assert job.model_dump(mode="json")["credits"] == {"estimate": "1.00", "actual": "0.10"}


def test_the_generator_stops_on_what_it_cannot_read(tmp_path):
    """A keyword it does not read (here `not`) is an error, never a guess."""
    doc = {"components": {"schemas": {"Thing": {"type": "object", "required": ["a"],
                                                "properties": {"a": {"type": "string", "not": {"const": ""}}}}}}}
    (tmp_path / "doc.json").write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, str(GENERATOR), str(tmp_path / "doc.json")], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 1 and "Unsupported: keywords this script does not read: ['not']" in out.stderr
    doc["components"]["schemas"]["Thing"]["properties"]["a"] = {"type": "string", "format": "date-time"}
    (tmp_path / "doc.json").write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, str(GENERATOR), str(tmp_path / "doc.json")], capture_output=True,
                         text=True, timeout=60, check=True)
    assert "class Thing(_Model):\n    a: datetime\n" in out.stdout
    (tmp_path / "thing_models.py").write_text(out.stdout)  # the output is a working module
    spec = importlib.util.spec_from_file_location("thing_models", tmp_path / "thing_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["thing_models"] = module
    try:
        spec.loader.exec_module(module)
        assert module.Thing.model_validate({"a": "2026-01-02T03:04:05Z"}).a.year == 2026
    finally:
        del sys.modules["thing_models"]
