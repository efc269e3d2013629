"""A product run and its steps as the run actor holds them: the `product_runs` and
`product_run_steps` rows (service/storage/schema_products.py), typed and frozen. A change is
a new record (`dataclasses.replace`), installed once the change is committed; `changes` (service/actors/row_record.py) names
the columns that differ, which is what the update writes.

JSON columns stay JSON text in the record (as stored); the typed properties decode them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from service.actors.row_record import RowRecord
from service.machines import RUN, STEP


def to_json(value: Any) -> str:
    """A JSON column's text, as storage writes it."""
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class RunRecord(RowRecord):
    id: str
    organization_id: str
    project_id: str
    product: str
    product_version: int
    status: str
    inputs: str  # JSON object: the inputs as submitted
    run_values: str  # JSON object: the effective values the steps read
    outputs: str | None  # JSON object output name -> [asset id], once completed
    estimate_uc: int
    actual_uc: int | None
    error: str | None
    created_by: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    api_key_id: str | None = None  # the API key that started it (its spend limit applies to each step)

    @property
    def final(self) -> bool:
        return RUN.is_final(self.status)

    @property
    def values(self) -> dict[str, Any]:
        """The decoded `run_values`."""
        value: dict[str, Any] = json.loads(self.run_values)
        return value

    @property
    def submitted(self) -> dict[str, Any]:
        """The decoded `inputs`."""
        value: dict[str, Any] = json.loads(self.inputs)
        return value

    @property
    def output_ids(self) -> dict[str, list[str]] | None:
        """The decoded `outputs`: output name -> asset ids (None until completed)."""
        if self.outputs is None:
            return None
        value: dict[str, list[str]] = json.loads(self.outputs)
        return value


@dataclass(frozen=True)
class StepRecord(RowRecord):
    run_id: str
    key: str
    position: int
    capability: str | None  # a capability step runs a generation job ...
    op: str | None  # ... an op step a local media op
    model: str | None
    status: str
    request_id: str | None  # the step job's id, chosen before its submit
    outputs: str  # JSON list of asset ids
    cost_uc: int | None
    error: str | None
    started_at: str | None
    finished_at: str | None

    @property
    def final(self) -> bool:
        return STEP.is_final(self.status)

    @property
    def output_ids(self) -> list[str]:
        """The decoded `outputs`."""
        value: list[str] = json.loads(self.outputs)
        return value
