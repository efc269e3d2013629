"""The run actor's records (service/actors/runs/record.py): a stored row read back whole, the
JSON columns decoded, a change as a new record whose changed columns are what is written."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest

from service.actors.runs.record import RunRecord, StepRecord, to_json
from service.storage import products as sql
from service.storage.products import RUN_COLUMNS, STEP_COLUMNS

RUN = {"id": "r1", "organization_id": "o1", "project_id": "p1", "product": "text-to-clip", "product_version": 1,
       "status": "queued", "inputs": '{"prompt": "a fox"}', "run_values": '{"prompt": "a fox", "seed": 7}',
       "outputs": None, "estimate_uc": 11_000_000, "actual_uc": None, "error": None, "created_by": "u1",
       "created_at": "2026-09-21T00:00:00Z", "started_at": None, "finished_at": None, "api_key_id": "k1"}
STEP = {"run_id": "r1", "key": "still", "position": 0, "capability": "image.generate", "op": None,
        "model": "proc-image", "status": "pending", "request_id": None, "outputs": "[]", "cost_uc": None,
        "error": None, "started_at": None, "finished_at": None}


def columns(text: str) -> set[str]:
    return {c.strip() for c in text.split(",")}


def test_the_records_are_the_columns_storage_reads():
    assert set(RunRecord.from_row(RUN).row()) == columns(RUN_COLUMNS) == set(RUN)
    assert set(StepRecord.from_row(STEP).row()) == columns(STEP_COLUMNS) == set(STEP)


async def test_a_row_read_back_is_the_record_and_its_json_decoded(node):
    store = node.store
    run, step = RunRecord.from_row(RUN), StepRecord.from_row(STEP)
    await store.write(lambda c: sql.insert_run(c, run.row(), [step.row()]))
    back = RunRecord.from_row(sql.get_run(store, "r1"))
    assert back == run
    assert [StepRecord.from_row(s) for s in sql.steps_of(store, "r1")] == [step]
    assert (back.values, back.submitted, back.output_ids, back.final) == (
        {"prompt": "a fox", "seed": 7}, {"prompt": "a fox"}, None, False)
    assert (step.output_ids, step.final) == ([], False)


async def test_a_change_is_a_new_record_and_writes_only_what_changed(node):
    store = node.store
    step = StepRecord.from_row(STEP)
    await store.write(lambda c: sql.insert_run(c, RunRecord.from_row(RUN).row(), [step.row()]))
    with pytest.raises(FrozenInstanceError):
        step.status = "running"  # type: ignore[misc]  # (frozen: mypy refuses it too)
    done = replace(step, status="completed", outputs=to_json(["a1", "a2"]), cost_uc=1_000_000)
    assert step.changes(done) == {"status": "completed", "outputs": '["a1","a2"]', "cost_uc": 1_000_000}
    assert done.changes(done) == {}
    await store.write(lambda c: sql.update_step(c, "r1", "still", step.changes(done)))
    assert StepRecord.from_row(sql.steps_of(store, "r1")[0]) == done
    assert (done.output_ids, done.final) == (["a1", "a2"], True)
    run = replace(RunRecord.from_row(RUN), status="completed", outputs=to_json({"still": ["a1"]}))
    assert (run.output_ids, run.final) == ({"still": ["a1"]}, True)


def test_a_row_from_before_the_key_column_reads_as_no_key():
    old = {k: v for k, v in RUN.items() if k != "api_key_id"}
    assert RunRecord.from_row(old).api_key_id is None
