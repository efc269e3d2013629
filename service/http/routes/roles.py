"""Roles: the four fixed roles (spec "Roles"; `GET /v1/roles` needs only a valid key)."""

from quart import Blueprint

from service.errors import NotFound
from service.http.auth import principal, requires, node
from service.http.responses import Data, Role, RoleUser
from service.roles import ROLE_BY_ID, ROLE_NAMES, role_view
from service.storage import accounts as sql

bp = Blueprint("roles", __name__)


def _role(role_id: str) -> str:
    name = ROLE_BY_ID.get(role_id)
    if name is None:
        raise NotFound("Role not found.", code="role.not_found")
    return name


@bp.get("/v1/roles")
@requires(None)
async def list_roles() -> Data[list[Role]]:
    return {"data": [role_view(n) for n in ROLE_NAMES]}


@bp.get("/v1/roles/<role_id>")
@requires("roles:read")
async def get_role(role_id: str) -> Data[Role]:
    return {"data": role_view(_role(role_id))}


@bp.get("/v1/roles/<role_id>/users")
@requires("roles:read")
async def role_users(role_id: str) -> Data[list[RoleUser]]:
    rows = sql.role_users(node().store, principal().org_id, _role(role_id))
    return {"data": [{"id": r["id"], "email": r["email"], "role": r["role"], "created_at": r["created_at"]}
                     for r in rows]}
