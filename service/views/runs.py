"""Run rows -> the spec's ProductRun object, and the rows of the merged `GET /v1/runs` feed.

ProductRun (spec "Product run"): `id, status, product, product_version, project_id, inputs,
steps, outputs, credits {estimate, actual}, error, status_url, cancel_url, created_at,
started_at, finished_at`. Each step: `key, capability, op, model, status, request_id,
outputs, error`, plus (beyond the spec) `started_at` and `finished_at`, which show the
steps that ran at the same time. Nulls are kept, never omitted.

A feed row of `GET /v1/runs` is the item itself with two fields in front:

    {"type": "job", "id": <job id>, ...the job status object...}
    {"type": "run", "id": <run id>, ...the ProductRun...}

Both kinds carry `status` and `created_at`; a job's `source` is `api` or `studio`, a run is
always the `workflow` source (`"source": "workflow"` is added to run rows).

The shapes are declared once, as the TypedDicts of service/views/shapes.py (`ProductRun`,
`RunStep`, `FeedJob`, `FeedRun`): mypy holds each function here to its shape, and the same
classes make the OpenAPI document.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping

from service.views.jobs import asset_output
from service.money import fmt
from service.views.shapes import AssetOutput, FeedJob, FeedRun, JobStatus, ProductRun, RunStep


def run_urls(run_id: str, base_url: str) -> tuple[str, str]:
    status_url = f"{base_url}/v1/workflows/runs/{run_id}"
    return status_url, f"{status_url}/cancel"


def _ids(text_or_list) -> list[str]:
    if text_or_list is None:
        return []
    return json.loads(text_or_list) if isinstance(text_or_list, str) else list(text_or_list)


def asset_ids_of(run: dict, steps: Iterable[dict]) -> list[str]:
    """Every asset id a run's view shows (step outputs; run outputs are among them)."""
    out: list[str] = []
    for s in steps:
        out.extend(_ids(s["outputs"]))
    outputs = run.get("outputs")
    if outputs:
        for ids in (json.loads(outputs) if isinstance(outputs, str) else outputs).values():
            out.extend(ids)
    return list(dict.fromkeys(out))


def _shown(ids: list[str], assets: Mapping[str, dict], base_url: str) -> list[AssetOutput]:
    return [asset_output(assets[i], base_url) for i in ids if i in assets]


def step_view(step: dict, assets: Mapping[str, dict], base_url: str) -> RunStep:
    return {
        "key": step["key"],
        "capability": step["capability"],
        "op": step["op"],
        "model": step["model"],
        "status": step["status"],
        "request_id": step["request_id"] if step["capability"] is not None else None,
        "outputs": _shown(_ids(step["outputs"]), assets, base_url),
        "error": step["error"],
        "started_at": step["started_at"],
        "finished_at": step["finished_at"],
    }


def run_view(run: dict, steps: list[dict], assets: Mapping[str, dict], base_url: str) -> ProductRun:
    """The ProductRun object; `assets` maps asset id -> asset row (at least those shown)."""
    status_url, cancel_url = run_urls(run["id"], base_url)
    outputs_raw = run["outputs"]
    outputs = json.loads(outputs_raw) if isinstance(outputs_raw, str) else (outputs_raw or {})
    inputs = run["inputs"]
    return {
        "id": run["id"],
        "status": run["status"],
        "product": run["product"],
        "product_version": run["product_version"],
        "project_id": run["project_id"],
        "inputs": json.loads(inputs) if isinstance(inputs, str) else inputs,
        "steps": [step_view(s, assets, base_url) for s in steps],
        "outputs": {name: _shown(ids, assets, base_url) for name, ids in outputs.items()},
        "credits": {"estimate": fmt(run["estimate_uc"]), "actual": fmt(run["actual_uc"])},
        "error": run["error"],
        "status_url": status_url,
        "cancel_url": cancel_url,
        "created_at": run["created_at"],
        "started_at": run["started_at"],
        "finished_at": run["finished_at"],
    }


def feed_run_row(view: ProductRun) -> FeedRun:
    row: FeedRun = {"type": "run", "id": view["id"], "source": "workflow", **view}
    return row


def feed_job_row(status: JobStatus) -> FeedJob:
    row: FeedJob = {"type": "job", "id": status["request_id"], **status}
    return row
