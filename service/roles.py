"""The four fixed roles and the spec's permission table (Authentication, item 5).

Role ids are stable UUIDs derived from the role name, the same on every install.
`roles:read` is held by owner, admin and read_only (operations.md).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the shape reads the role names from here: imported for mypy only
    from service.views.shapes import Role

_NS = uuid.UUID("6f1c2d4e-8a3b-4c5d-9e0f-1a2b3c4d5e6f")

ROLE_NAMES = ("owner", "admin", "member", "read_only")
ROLE_IDS = {name: str(uuid.uuid5(_NS, f"role:{name}")) for name in ROLE_NAMES}
ROLE_BY_ID = {v: k for k, v in ROLE_IDS.items()}

_ALL = {"owner", "admin", "member", "read_only"}
_ADMINS = {"owner", "admin"}

TABLE: dict[str, set[str]] = {
    "generation:read": _ALL,
    "generation:write": {"owner", "admin", "member"},
    "projects:read": _ALL,
    "projects:write": _ADMINS,
    "billing:read": _ALL,
    "billing:write": _ADMINS,
    "api_keys:read": _ALL,
    "api_keys:create": _ADMINS,
    "api_keys:revoke": _ADMINS,
    "webhooks:read": {"owner", "admin", "read_only"},
    "webhooks:create": _ADMINS,
    "webhooks:update": _ADMINS,
    "webhooks:delete": _ADMINS,
    "users:read": _ALL,
    "users:create": _ADMINS,
    "users:update": _ADMINS,
    "users:delete": _ADMINS,
    "orgs:update": _ADMINS,
    "roles:read": {"owner", "admin", "read_only"},
}

PERMISSIONS = {role: sorted(p for p, roles in TABLE.items() if role in roles) for role in ROLE_NAMES}


def allows(role: str, permission: str) -> bool:
    return role in TABLE.get(permission, ())


def within(granted: str, holder: str) -> bool:
    """True when `holder` may hand out `granted`: only an owner grants owner (owner and admin
    share one permission list, but owner is the broader role), and never a permission the
    holder lacks."""
    if granted == "owner" and holder != "owner":
        return False
    return set(PERMISSIONS[granted]) <= set(PERMISSIONS[holder])


def role_view(name: str) -> Role:
    return {"id": ROLE_IDS[name], "name": name, "permissions": PERMISSIONS[name]}
