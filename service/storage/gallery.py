"""Reads and writes of Studio's gallery: a project's recent jobs with their first output,
newest first, cursor-paged; hidden jobs; stored thumbnails."""

from __future__ import annotations

from service.storage.rows import Connection, Row, Source, all_rows, one

PAGE = 24


def page(store: Source, org_id: str, project_id: str, capability: str | None, before: tuple[str, str] | None,
         limit: int = PAGE) -> list[Row]:
    """Up to `limit` jobs (not hidden) older than `before` = (created_at, id), each with its
    first output's id, kind, content type, size and digest (null while it has none)."""
    where = ["j.organization_id = ?", "j.project_id = ?", "h.job_id IS NULL"]
    params: list[object] = [org_id, project_id]
    if capability:
        where.append("j.capability = ?")
        params.append(capability)
    if before is not None:
        where.append("(j.created_at < ? OR (j.created_at = ? AND j.id < ?))")
        params += [before[0], before[0], before[1]]
    sql = (
        "SELECT j.id, j.capability, j.model, j.status, j.prompt, j.created_at, j.source, "
        "a.id AS asset_id, a.kind, a.content_type, a.width, a.height, a.sha256 "
        "FROM jobs j LEFT JOIN studio_hidden h ON h.job_id = j.id "
        "LEFT JOIN assets a ON a.job_id = j.id AND a.position = 0 "
        f"WHERE {' AND '.join(where)} ORDER BY j.created_at DESC, j.id DESC LIMIT ?"
    )
    return all_rows(store, sql, [*params, limit])


def hide(conn: Connection, org_id: str, job_id: str, now: str) -> None:
    conn.execute("INSERT OR IGNORE INTO studio_hidden (job_id, organization_id, hidden_at) VALUES (?, ?, ?)",
                 (job_id, org_id, now))


def thumbnail(store: Source, sha256: str) -> Row | None:
    return one(store, "SELECT * FROM thumbnails WHERE sha256 = ?", (sha256,))


def save_thumbnail(conn: Connection, row: Row) -> None:
    conn.execute("INSERT OR IGNORE INTO thumbnails (sha256, thumb_sha256, content_type, width, height, size_bytes, "
                 "created_at) VALUES (:sha256, :thumb_sha256, :content_type, :width, :height, :size_bytes, :created_at)",
                 row)
