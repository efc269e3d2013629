"""Tables of spend limits: each limit of a project or API key, and the figures they count.

`spend_limits` holds a project's monthly or a key's lifetime limit (`limit_uc` null: none)
and when its warning last went out. `spend_figures` holds what is held or captured per
project per UTC month (`period` `YYYY-MM`) and per key (`period` ''); the balance actor
writes both with the batch that changes them (`service.storage.spend`). Holds and product
runs name the key their work was submitted with.
"""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("spend")


@migrations()
def m001_spend_limits(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE spend_limits (
            organization_id TEXT NOT NULL,
            scope TEXT NOT NULL CHECK (scope IN ('project', 'api_key')),
            scope_id TEXT NOT NULL,
            limit_uc INTEGER CHECK (limit_uc IS NULL OR limit_uc >= 0),
            notified_at TEXT,
            PRIMARY KEY (scope, scope_id)
        );
        CREATE INDEX spend_limits_org ON spend_limits(organization_id);
        CREATE TABLE spend_figures (
            organization_id TEXT NOT NULL,
            scope TEXT NOT NULL CHECK (scope IN ('project', 'api_key')),
            scope_id TEXT NOT NULL,
            period TEXT NOT NULL,
            spent_uc INTEGER NOT NULL CHECK (spent_uc >= 0),
            PRIMARY KEY (scope, scope_id, period)
        );
        CREATE INDEX spend_figures_org ON spend_figures(organization_id, period);
        ALTER TABLE credit_holds ADD COLUMN api_key_id TEXT;
        ALTER TABLE product_runs ADD COLUMN api_key_id TEXT;
        -- what projects spent before limits existed, month by month (holds named no key then)
        INSERT INTO spend_figures (organization_id, scope, scope_id, period, spent_uc)
            SELECT organization_id, 'project', project_id, substr(created_at, 1, 7),
                   SUM(CASE status WHEN 'held' THEN amount_uc WHEN 'captured' THEN captured_uc ELSE 0 END)
            FROM credit_holds WHERE project_id IS NOT NULL
            GROUP BY organization_id, project_id, substr(created_at, 1, 7);
        """
    )
