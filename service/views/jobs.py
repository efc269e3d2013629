"""Job and asset rows -> the spec's response shapes (status object, asset output).

Used by the job actors (webhook bodies, watchers) and the HTTP routes alike, so a job
webhook's body is exactly what the status endpoint returns. Nulls are kept, never omitted.
The shapes are declared once, as the TypedDicts of service/views/shapes.py (`JobStatus`,
`AssetOutput`, `Asset`, `SubmitAccepted`): mypy holds each function here to its shape, and
the same classes make the OpenAPI document.
"""

from __future__ import annotations

import json

from service.machines import JOB
from service.money import fmt
from service.views.shapes import Asset, AssetOutput, JobStatus, SubmitAccepted

FINAL = tuple(sorted(JOB.final))  # the job machine's final statuses (service/machines.py)


def job_urls(job_id: str, base_url: str) -> tuple[str, str]:
    base = f"{base_url}/v1/generation/requests/{job_id}"
    return f"{base}/status", f"{base}/cancel"


def asset_output(row: dict, base_url: str) -> AssetOutput:
    """`{id, url, content_type, width, height, duration_s}` (spec "Asset output")."""
    return {
        "id": row["id"],
        "url": f"{base_url}/v1/generation/assets/{row['id']}/content",
        "content_type": row["content_type"],
        "width": row["width"],
        "height": row["height"],
        "duration_s": row["duration_s"],
    }


def asset_record(row: dict, base_url: str) -> Asset:
    """The single-asset read, list items and upload answer: the output fields plus the
    asset's kind, project, job, size, digest and creation time."""
    return Asset(
        **asset_output(row, base_url),
        kind=row["kind"],
        project_id=row["project_id"],
        job_id=row["job_id"],
        source=row["source"],
        size_bytes=row["size_bytes"],
        sha256=row["sha256"],
        created_at=row["created_at"],
    )


def status_object(job: dict, outputs: list[dict], base_url: str) -> JobStatus:
    """The job status object (spec "Job status object"); `outputs` are the job's asset rows."""
    status_url, cancel_url = job_urls(job["id"], base_url)
    shown = [asset_output(a, base_url) for a in outputs]
    images = [o for a, o in zip(outputs, shown) if a["kind"] == "image"]
    video = next((o for a, o in zip(outputs, shown) if a["kind"] == "video"), None)
    status: JobStatus = {
        "status": job["status"],
        "request_id": job["id"],
        "status_url": status_url,
        "cancel_url": cancel_url,
        "capability": job["capability"],
        "model": job["model"],
        "project_id": job["project_id"],
        "source": job["source"],
        "outputs": shown,
        "images": images,
        "video": video,
        "credits": {"estimate": fmt(job["price_uc"]), "actual": fmt(job["actual_uc"])},
        "error": job["error"],
        "created_at": job["created_at"],
        "finished_at": job["finished_at"],
    }
    if job.get("usage"):  # only jobs whose engine reported it (text.llm on an OpenAI-compatible server)
        status["usage"] = json.loads(job["usage"])
    return status


def submit_response(job: dict, base_url: str) -> SubmitAccepted:
    """The 202 body: `{status, request_id, status_url, cancel_url, credits_estimate}`."""
    status_url, cancel_url = job_urls(job["id"], base_url)
    return {
        "status": "queued",
        "request_id": job["id"],
        "status_url": status_url,
        "cancel_url": cancel_url,
        "credits_estimate": fmt(job["price_uc"]),
    }
