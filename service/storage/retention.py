"""What the retention sweep deletes, table by table (service/actors/retention.py runs it).

Each rule names a table and the condition under which a row is no longer needed: only
finished rows (a dispatched event, a delivery with its outcome, a sent mail) older than the
retention age, idempotency keys after 24 hours, sessions and sign-in flows once expired.
Rows still in flight are never touched. A table the node does not have (a feature not
installed) is skipped. A new table joins with one line here.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.storage.db import Store


BATCH = 500  # rows per transaction: the writer is never held for long


@dataclass(frozen=True)
class Rule:
    table: str
    where: str  # SQL condition with one `?`: the cutoff
    cutoff: str  # "age" (ISO text, retention age), "day" (epoch seconds, 24 h), "now" (epoch seconds)


RULES = (
    Rule("events", "dispatched = 1 AND created_at < ?", "age"),
    Rule("webhook_deliveries", "status IN ('delivered', 'failed', 'skipped', 'unknown') AND created_at < ?", "age"),
    Rule("job_webhooks", "state NOT IN ('waiting', 'pending', 'sending') AND created_at < ?", "age"),
    Rule("emails", "finished_at IS NOT NULL AND created_at < ?", "age"),  # sent, failed or unknown
    Rule("mail_tokens", "expires_at < ?", "age"),
    Rule("idempotency_keys", "created_at < ?", "day"),
    Rule("product_run_keys", "created_at < ?", "day"),
    Rule("sessions", "expires_at < ?", "now"),
    Rule("login_flows", "expires_at < ?", "now"),
)


def tables(store: Store) -> set[str]:
    return {r["name"] for r in store.all("SELECT name FROM sqlite_master WHERE type = 'table'")}


def has_some(store: Store, rule: Rule, cutoff: object) -> bool:
    """A read first: a sweep with nothing to delete takes no write."""
    return store.one(f"SELECT 1 AS x FROM {rule.table} WHERE {rule.where} LIMIT 1", (cutoff,)) is not None


def delete_batch(conn: sqlite3.Connection, rule: Rule, cutoff: object) -> int:
    """Delete up to BATCH rows matching the rule; how many went."""
    return conn.execute(f"DELETE FROM {rule.table} WHERE rowid IN "
                        f"(SELECT rowid FROM {rule.table} WHERE {rule.where} LIMIT {BATCH})", (cutoff,)).rowcount


def content_shas(store: Store) -> set[str]:
    """Every content a row names, as service.assets.scopes.object_name names it: the start-up
    sweep deletes what is outside it. A stored thumbnail (named by `thumbnails`, not by an
    asset) counts too, or each would be deleted at every start while its row still names it.
    Every row's bare digest is in, so a node-wide object is kept while any row names its
    bytes (only rows stored before name it, but keeping one too many loses nothing)."""
    return {r["name"] for r in store.all(
        "SELECT sha256 AS name FROM assets UNION SELECT thumb_sha256 FROM thumbnails "
        "UNION SELECT organization_id || '/' || sha256 FROM assets WHERE shared_object = 0")}


BACKLOG = {
    "events": "SELECT COUNT(*) FROM events WHERE dispatched = 0",
    "webhook_deliveries": "SELECT COUNT(*) FROM webhook_deliveries WHERE status IN ('pending', 'sending')",
    "job_webhooks": "SELECT COUNT(*) FROM job_webhooks WHERE state IN ('waiting', 'pending', 'sending')",
    "emails": "SELECT COUNT(*) FROM emails WHERE state IN ('pending', 'sending')",
}


def backlog(store: Store) -> dict[str, int]:
    """Rows waiting in each outbox table (the metrics gauge)."""
    present = tables(store)
    return {t: store.scalar(q) for t, q in BACKLOG.items() if t in present}
