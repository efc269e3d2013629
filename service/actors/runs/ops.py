"""Op steps off the actor loop: the op task (free local media work in a worker thread), run in
its run actor's `tasks` nursery; it only reports `OpDone` to the actor."""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

import trio

from service.actors.runs.context import RunContext
from service.actors.runs.messages import OpDone, OpHandle
from service.actors.runs.record import RunRecord
from service.assets.scopes import scope_of
from service.backends import MSG_INTERNAL

log = logging.getLogger(__name__)


# -- op steps (worker thread) -------------------------------------------------------------------
AT = {"first": 0.0, "middle": 0.5, "last": 1.0}


def run_op(files: Any, work: Path, op: str, args: dict[str, Any], sha256: str,
           duration_s: float | None, scope: str | None, org_id: str) -> dict[str, Any]:
    """Run one op on the input whose digest is `sha256` (a video's `duration_s`); place the PNG it makes
    in `files`; answer the new asset's fields.

    extract_frame(video, at: first|middle|last) -> media.ops.extract_frame(path, at_s, dst)
    resize_image(image, max_side)               -> media.ops.resize_image(src, dst, w=h=max_side)
    """
    from service.assets.files import hash_file
    from service.media import ops

    work.mkdir(parents=True, exist_ok=True)
    try:
        path = files.local(sha256, work, scope)  # an object store's object is fetched into this scratch first
        dst = work / "out.png"
        if op == "extract_frame":
            duration = float(duration_s or 0.0)
            width, height = ops.extract_frame(path, duration * AT[args["at"]], dst)
        elif op == "resize_image":
            side = int(args["max_side"])
            width, height = ops.resize_image(path, dst, side, side)
        else:
            raise ValueError(f"unknown op {op!r}")
        sha, size = hash_file(dst)
        files.place(dst, sha, org_id)  # the new asset's org's object (service/assets/scopes.py)
        return {"kind": "image", "content_type": "image/png", "width": width, "height": height,
                "duration_s": None, "size_bytes": size, "sha256": sha}
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def op_task(ctx: RunContext, run: RunRecord, key: str, handle: OpHandle, op: str,
                  args: dict[str, Any], src: dict[str, Any]) -> None:
    asset: dict[str, Any] | None = None
    error: str | None = None
    work = ctx.files.work / f"run-{run.id}-{key}"
    try:
        with handle.scope:
            fields = await trio.to_thread.run_sync(run_op, ctx.files, work, op, args,
                                                   src["sha256"], src["duration_s"], scope_of(src), run.organization_id,
                                                   abandon_on_cancel=True)
            asset = {"id": str(uuid.uuid4()), "organization_id": run.organization_id,
                     "project_id": run.project_id, "job_id": None, "position": 0, "source": "workflow",
                     **fields}
    except Exception:  # noqa: BLE001 - reported as failure 5
        log.exception("run %s: op step %s (%s) failed", run.id, key, op)
        asset, error = None, MSG_INTERNAL
    if handle.scope.cancelled_caught:
        asset, error = None, None
    ctx.runs.tell(run.id, OpDone(key, handle, asset, error))
