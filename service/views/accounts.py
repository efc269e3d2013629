"""Project and API-key rows -> the spec's response shapes (service/views/shapes.py), shared by
the API routes and any caller that answers with a project or key. Nulls are kept, never
omitted; the spend figures come from service/views/spend.py."""

from __future__ import annotations

from service.views.shapes import ApiKey, ApiKeyCreated, KeySpend, Project, ProjectSpend


def project(row: dict, spend: ProjectSpend) -> Project:
    return {
        "id": row["id"], "organization_id": row["organization_id"], "name": row["name"],
        "slug": row["slug"], "description": row["description"],
        "is_default": bool(row["is_default"]), "is_archived": bool(row["is_archived"]),
        "created_by": row["created_by"], "created_at": row["created_at"],
        "updated_at": row["updated_at"], "archived_at": row["archived_at"], **spend,
    }


def api_key(row: dict, spend: KeySpend) -> ApiKey:
    return {
        "id": row["id"], "name": row["name"], "key_prefix": row["key_prefix"], "user_id": row["user_id"],
        "role_id": row["role_id"], "expires_at": row["expires_at"], "is_active": bool(row["is_active"]),
        "created_at": row["created_at"], "last_used_at": row["last_used_at"], **spend,
    }


def api_key_created(view: ApiKey, key: str) -> ApiKeyCreated:
    """The create answer: the key's view and, this once, the full key."""
    return {**view, "key": key}
