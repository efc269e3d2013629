"""The typed submit path: `SubmitRequest` (a submit as given), `JobSettings` (as checked,
kept as the job's `params` JSON) and the record and render request built from it. Nodes
upgrade in place, so a row written by an earlier version must still load and render."""

from __future__ import annotations

import json
import uuid

import pytest

from service.actors.jobs.record import JobRecord
from service.actors.jobs.render import render_request
from service.catalog.request import JobSettings, SubmitRequest
from service.engines.common import field_values
from test_generation_support import VIDEO, job_row, running_node, submit, upload_ok, wait_status
from test_media_samples import image_bytes

JOB_ID = "0b7c5a34-3f0e-4c1e-9a57-6d1f2b9e8a10"
IMG = "aaaaaaaa-0000-0000-0000-000000000001"

# the params of a job written before `timeout_s` existed (the first job actor's format)
FIRST_CUT = ('{"resolution":"720p","duration":5,"aspect_ratio":"9:16","inputs":{"start_frame":["' + IMG
             + '"]},"seed":7,"tier":"720p/5s"}')


def test_settings_write_the_params_json_as_jobs_always_had_it():
    s = JobSettings(resolution="720p", duration=5, aspect_ratio="9:16", inputs={"start_frame": (IMG,)},
                    seed=7, timeout_s=120)
    assert s.to_json() == ('{"resolution":"720p","duration":5,"aspect_ratio":"9:16","inputs":{"start_frame":'
                           f'["{IMG}"]}},"seed":7,"tier":"720p/5s","timeout_s":120}}')
    assert JobSettings.from_json(s.to_json()) == s


def test_a_row_from_before_timeout_s_loads_with_its_default():
    s = JobSettings.from_json(FIRST_CUT)
    assert s == JobSettings(resolution="720p", duration=5, aspect_ratio="9:16", inputs={"start_frame": (IMG,)},
                            seed=7, timeout_s=None)
    assert s.tier == "720p/5s"


def test_every_setting_but_the_resolution_has_a_default():
    s = JobSettings.from_json('{"resolution":"1k"}')
    assert (s.duration, s.aspect_ratio, s.inputs, s.seed, s.timeout_s, s.tier) == (None, None, {}, None, None, "1k")
    with pytest.raises(KeyError):
        JobSettings.from_json('{"duration":5}')


def test_the_render_seed_is_the_given_one_else_drawn_from_the_job_id():
    assert JobSettings(resolution="1k", seed=7).render_seed(JOB_ID) == 7
    drawn = JobSettings(resolution="1k").render_seed(JOB_ID)
    assert drawn == uuid.UUID(JOB_ID).int % 2 ** 31 and drawn == JobSettings(resolution="1k").render_seed(JOB_ID)


def test_a_record_reads_its_settings_from_params():
    row = {"id": JOB_ID, "organization_id": "o", "project_id": "p", "capability": "video.generate",
           "model": "camera-move", "backend": "camera_move_video", "source": "api", "workflow_run_id": None,
           "status": "queued", "prompt": "a slow pan", "params": FIRST_CUT, "price_uc": 1, "actual_uc": None,
           "hold_id": "h", "hold_settled": 0, "webhook_url": None, "error": None, "created_at": "t",
           "started_at": None, "finished_at": None}
    job = JobRecord.from_row(row)
    assert job.settings == JobSettings.from_json(FIRST_CUT)
    assert job.row() == {**row, "usage": None}  # the settings are read, not added to the row


def test_a_product_step_body_becomes_a_request_and_a_stray_name_is_refused():
    assert SubmitRequest.of({"prompt": "x", "seed": 12.5, "inputs": {"a": [IMG]}}) == SubmitRequest(
        prompt="x", seed=12.5, inputs={"a": [IMG]})
    with pytest.raises(ValueError, match="^not submit settings: colour, size$"):
        SubmitRequest.of({"prompt": "x", "size": 1, "colour": "red"})


async def test_a_job_row_from_an_earlier_version_renders_after_the_upgrade(tmp_path):
    """A rendering job whose params lack `timeout_s` (as rows written before it) is resumed by
    the next node and renders with the settings of its row (here 16:9: a 1024x576 image)."""
    async with running_node(tmp_path, test_mode=True) as n1:
        key = (await n1.create_org())["api_key"]
        rid = (await submit(n1, key, {"prompt": "old [[delay:5]]"}))["request_id"]
        await wait_status(n1, key, rid, wanted=("rendering",))
        old = '{"resolution":"1k","duration":null,"aspect_ratio":"16:9","inputs":{},"seed":null,"tier":"1k"}'
        await n1.store.write(lambda c: c.execute("UPDATE jobs SET params = ? WHERE id = ?", (old, rid)))
    async with running_node(tmp_path, test_mode=True) as n2:
        st = await wait_status(n2, key, rid)
        assert st["status"] == "completed", st
        [out] = st["outputs"]
        assert (out["width"], out["height"]) == (1024, 576)
        assert json.loads(job_row(n2, rid)["params"]) == json.loads(old)


async def test_the_render_request_is_the_record_and_its_settings(node, org):
    """The prompt as submitted, the settings as checked (a whole duration stays an int up to
    the engine's fields), the input assets as files; the seed drawn from the job id."""
    key = org["api_key"]
    frame = await upload_ok(node, key, image_bytes("PNG", 320, 180))
    prompt = "  a slow pan, unstripped  [[fail:internal]]"
    rid = (await submit(node, key, {"prompt": prompt, "resolution": "480p", "duration": 5.0, "aspect_ratio": "9:16",
                                    "inputs": {"start_frame": [frame["id"]]}}, path=VIDEO))["request_id"]
    job = JobRecord.from_row(job_row(node, rid))
    req = render_request(node.parts.generation.context, job, resumed=False)
    assert (req.prompt, req.resolution, req.aspect_ratio, req.seed) == (
        prompt, "480p", "9:16", uuid.UUID(rid).int % 2 ** 31)
    assert type(req.duration) is int and req.duration == 5
    [start] = req.inputs["start_frame"]
    assert (start.kind, start.content_type, start.width, start.height) == ("image", "image/png", 320, 180)
    assert field_values(req)["duration"] == 5 and type(field_values(req)["duration"]) is int
    await wait_status(node, key, rid)
