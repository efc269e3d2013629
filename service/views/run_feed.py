"""The merged feed of `GET /v1/runs`: standalone jobs and product runs of one project, newest
first, with an opaque signed cursor.

Order: `created_at` descending, then the row type (`run` before `job`), then the id, also
descending: a total order, so a cursor (the last row's position) continues exactly where
the page ended, even when rows share a timestamp or new rows arrive meanwhile.

Cursor: `c1.<base64url JSON [created_at, type, id]>.<base64url HMAC-SHA256, 16 bytes>`,
keyed with a key derived from the node's signing secret (`DATA_DIR/asset-url-secret`), so
it survives restarts. A cursor this endpoint did not produce (bad shape, bad signature,
bad fields) is refused: 422 `request.validation_failed` "Invalid cursor".

`source`: `api` / `studio` = standalone jobs submitted that way; `workflow` = product runs
only (their step jobs never appear as rows); omitted = both. `total` counts the rows that
match `source` over all pages; `next_cursor` is set exactly when the page is full.
Row shapes: see `service.views.runs`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re

from service.views import jobs as job_views, runs as run_views
from service.views.shapes import FeedJob, FeedRun, RunsPage
from service.errors import Unprocessable
from service.storage import generation as gen_sql
from service.storage import products as sql

_B64 = re.compile(r"^[A-Za-z0-9_-]{1,400}$")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def cursor_key(secret: bytes) -> bytes:
    return hmac.new(secret, b"genservice GET /v1/runs cursor v1", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not _B64.match(text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sig(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()[:16]


def encode_cursor(key: bytes, position: tuple[str, str, str]) -> str:
    payload = json.dumps(list(position), separators=(",", ":")).encode()
    return f"c1.{_b64(payload)}.{_b64(_sig(key, payload))}"


def invalid_cursor() -> Unprocessable:
    return Unprocessable("Invalid cursor", {"errors": [{"message": "Invalid cursor", "key": "cursor",
                                                        "source": "query"}]})


def decode_cursor(key: bytes, cursor: str) -> tuple[str, str, str]:
    """The position a cursor names; `invalid_cursor()` for anything this endpoint did not make."""
    try:
        if len(cursor) > 600:
            raise ValueError("too long")
        version, payload_b64, sig_b64 = cursor.split(".")
        if version != "c1":
            raise ValueError("version")
        payload, sig = _unb64(payload_b64), _unb64(sig_b64)
        if not hmac.compare_digest(sig, _sig(key, payload)):
            raise ValueError("signature")
        pos = json.loads(payload)
        if (not isinstance(pos, list) or len(pos) != 3 or not all(isinstance(x, str) for x in pos)
                or not _ISO.match(pos[0]) or pos[1] not in ("job", "run") or not _UUID.match(pos[2])):
            raise ValueError("fields")
        return pos[0], pos[1], pos[2]
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise invalid_cursor() from None


def page(products, project_id: str, source: str | None, limit: int, cursor: str | None) -> RunsPage:
    """`{items, total, next_cursor}` of one page."""
    key = products.cursor_key
    after = decode_cursor(key, cursor) if cursor is not None else None
    rows, total = sql.feed(products.store, project_id, source, limit, after)
    job_ids = [r["id"] for r in rows if r["type"] == "job"]
    run_ids = [r["id"] for r in rows if r["type"] == "run"]
    items: dict[tuple[str, str], FeedJob | FeedRun] = {}
    if job_ids:
        jobs = sql.jobs_by_ids(products.store, job_ids)
        outputs = gen_sql.assets_of_jobs(products.store, job_ids)
        for i in job_ids:
            status = job_views.status_object(jobs[i], outputs[i], products.base_url)
            items[("job", i)] = run_views.feed_job_row(status)
    if run_ids:
        runs = sql.runs_by_ids(products.store, run_ids)
        for view in products.views_of([runs[i] for i in run_ids]):
            items[("run", view["id"])] = run_views.feed_run_row(view)
    ordered = [items[(r["type"], r["id"])] for r in rows]
    next_cursor = None
    if rows and len(rows) == limit:
        last = rows[-1]
        next_cursor = encode_cursor(key, (last["created_at"], last["type"], last["id"]))
    return {"items": ordered, "total": total, "next_cursor": next_cursor}
