"""Whose object holds an asset row's bytes.

An object store serves its objects itself (presigned URLs) with the object's own
`Last-Modified`, so an object shared by two organizations told the second that the first had
stored the same bytes, and when. Rows stored since are kept per organization (scope: its id);
rows stored before keep naming the node-wide object of their digest (`shared_object` = 1,
scope None), which is never moved or copied: nothing a row names can go missing.
"""

from __future__ import annotations

from typing import Any, Mapping


def scope_of(row: Mapping[str, Any]) -> str | None:
    """The scope of an asset row (a row being made has no `shared_object`: its org's)."""
    return None if row.get("shared_object") else str(row["organization_id"])


def object_name(sha256: str, scope: str | None) -> str:
    """How the start-up sweep's set of referenced contents names a scoped object (a bare
    digest names the node-wide one); service/storage/retention.py builds the same in SQL."""
    return sha256 if scope is None else f"{scope}/{sha256}"
