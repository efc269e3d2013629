"""Tables of product runs: the runs, their steps, and run-start idempotency keys.

- `product_runs`: one row per run. `status` is the spec's run status (machines.RUN).
  `product_version` is the version pinned at start; the run reads only that definition.
  `inputs` is the submitted JSON object as sent; `run_values` the effective values the
  steps read (defaults, asset ids, a preset's fixed values). `outputs` is a JSON object
  output name -> [asset id], null until the run completes. Credits are micro-credits:
  `estimate_uc` at start, `actual_uc` (Σ captured step costs) on completion.
- `product_run_steps`: one row per step of the pinned definition, in definition order
  (`position`). `status` is the spec's step status (machines.STEP). `request_id` is the id
  of the step's generation job (capability steps; chosen by the run before the submit, so
  a restart can tell whether the job was created). `outputs` is a JSON list of asset ids,
  filled when the step completes. `cost_uc` is what the step's job was charged.
- `product_run_keys`: the 202 answer (`response`, JSON) of a run start by (organization,
  Idempotency-Key), kept 24 h (`created_at` is service time in seconds); `request_hash`
  decides "same body".
"""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("products")


@migrations()
def m001_products(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE product_runs (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            project_id TEXT NOT NULL,
            product TEXT NOT NULL,
            product_version INTEGER NOT NULL,
            status TEXT NOT NULL,
            inputs TEXT NOT NULL,
            run_values TEXT NOT NULL,
            outputs TEXT,
            estimate_uc INTEGER NOT NULL,
            actual_uc INTEGER,
            error TEXT,
            created_by TEXT,
            created_at TEXT NOT NULL,
            started_at TEXT,
            finished_at TEXT
        );
        CREATE INDEX product_runs_project ON product_runs(project_id, created_at);
        CREATE INDEX product_runs_open ON product_runs(status) WHERE status IN ('queued', 'running');

        CREATE TABLE product_run_steps (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            position INTEGER NOT NULL,
            capability TEXT,
            op TEXT,
            model TEXT,
            status TEXT NOT NULL,
            request_id TEXT,
            outputs TEXT NOT NULL DEFAULT '[]',
            cost_uc INTEGER,
            error TEXT,
            started_at TEXT,
            finished_at TEXT,
            PRIMARY KEY (run_id, key)
        );
        CREATE INDEX product_run_steps_job ON product_run_steps(request_id) WHERE request_id IS NOT NULL;

        CREATE TABLE product_run_keys (
            organization_id TEXT NOT NULL,
            key TEXT NOT NULL,
            request_hash TEXT NOT NULL,
            run_id TEXT NOT NULL,
            response TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (organization_id, key)
        );
        """
    )
