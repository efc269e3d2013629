"""Tables of generation: jobs, assets, the job-webhook outbox and idempotency keys.

- `jobs`: one row per generation job; `status` is the spec's status string (machines.JOB).
  `hold_settled` is 0 until the job's hold was captured or released after a final status,
  so recovery can settle holds a crash left open.
- `assets`: uploaded and generated files. The bytes live content-addressed under
  `DATA_DIR/assets/` (see service.assets.files); `sha256` names the file. Generated assets
  carry `job_id` and their `position` among the job's outputs.
- `job_webhooks`: the outbox of job webhooks, written in the same transaction as the
  job's final status. `state`: `waiting` (canceled while rendering; becomes `pending` when
  the render ends), `pending`, `sending` (marked before the POST), `delivered`, `failed`,
  `unknown` (was `sending` when the node stopped; never re-sent), `skipped` (not https).
- `idempotency_keys`: submit responses by (organization, Idempotency-Key), 24 h.
"""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("generation")


@migrations()
def m001_generation(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            project_id TEXT NOT NULL,
            capability TEXT NOT NULL,
            model TEXT NOT NULL,
            backend TEXT NOT NULL,
            source TEXT NOT NULL,
            workflow_run_id TEXT,
            status TEXT NOT NULL,
            prompt TEXT NOT NULL,
            params TEXT NOT NULL,
            price_uc INTEGER NOT NULL,
            actual_uc INTEGER,
            hold_id TEXT NOT NULL,
            hold_settled INTEGER NOT NULL DEFAULT 0,
            webhook_url TEXT,
            error TEXT,
            created_at TEXT NOT NULL,
            started_at TEXT,
            finished_at TEXT
        );
        CREATE INDEX jobs_project ON jobs(project_id, created_at);
        CREATE INDEX jobs_org ON jobs(organization_id, created_at);
        CREATE INDEX jobs_open ON jobs(status) WHERE status IN ('queued', 'rendering');
        CREATE INDEX jobs_unsettled ON jobs(hold_settled) WHERE hold_settled = 0;
        CREATE INDEX jobs_run ON jobs(workflow_run_id) WHERE workflow_run_id IS NOT NULL;

        CREATE TABLE assets (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            project_id TEXT NOT NULL,
            job_id TEXT,
            position INTEGER NOT NULL DEFAULT 0,
            source TEXT NOT NULL,
            kind TEXT NOT NULL,
            content_type TEXT NOT NULL,
            width INTEGER,
            height INTEGER,
            duration_s REAL,
            size_bytes INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX assets_project ON assets(project_id, created_at);
        CREATE INDEX assets_job ON assets(job_id, position) WHERE job_id IS NOT NULL;
        CREATE INDEX assets_sha ON assets(sha256);

        CREATE TABLE job_webhooks (
            id TEXT PRIMARY KEY,
            job_id TEXT NOT NULL UNIQUE,
            url TEXT NOT NULL,
            body TEXT NOT NULL,
            state TEXT NOT NULL,
            created_at TEXT NOT NULL,
            sent_at TEXT,
            status_code INTEGER,
            error TEXT,
            error_class TEXT,
            duration_ms INTEGER
        );
        CREATE INDEX job_webhooks_state ON job_webhooks(state)
            WHERE state IN ('waiting', 'pending', 'sending');

        CREATE TABLE idempotency_keys (
            organization_id TEXT NOT NULL,
            key TEXT NOT NULL,
            request_hash TEXT NOT NULL,
            job_id TEXT NOT NULL,
            response TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (organization_id, key)
        );
        """
    )


@migrations()
def m002_job_usage(db: Database) -> None:
    """`usage`: what an engine reported it used for a completed job (JSON; token counts of
    an OpenAI-compatible chat), shown on the job's status."""
    db.execute("ALTER TABLE jobs ADD COLUMN usage TEXT")


@migrations()
def m003_asset_frames(db: Database) -> None:
    """`assets.frames`: a video's frame count from its header (NULL for other kinds and for
    videos stored before), so a submit can bound the work a video input asks for."""
    db.execute("ALTER TABLE assets ADD COLUMN frames INTEGER")


@migrations()
def m004_asset_shared_object(db: Database) -> None:
    """`assets.shared_object`: 1 when the row's bytes are the node-wide object of its digest
    (every row stored before objects were kept per organization: service/assets/scopes.py),
    0 (the default, so a new row needs no word of it) when they are its organization's."""
    db.execute("ALTER TABLE assets ADD COLUMN shared_object INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE assets SET shared_object = 1")
