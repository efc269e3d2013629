"""The accounts actor: the one owner of organizations, members, API keys and projects.

One actor for the node: account changes are rare next to generation traffic, and one owner
keeps slug uniqueness, key revocation and member removal plainly serial. Key `last_used_at`
touches are coalesced (at most one write per key per minute).
"""

from __future__ import annotations


import re
from typing import Any

from service.actors.balance.actor import SIGNUP_DAYS, SIGNUP_UC
from service.actors.accounts.messages import (  # noqa: F401 - re-exported: the routes send these
    AcceptInvite, AddMember, ApproveOrg, ArchiveProject, ChangeRole, CreateKey, CreateOrg, CreateProject, Invite,
    LinkIdentity, RemoveMember, RenameOrg, ResendInvite, RevokeKey, TouchKey, UnlinkIdentity, UpdateKey,
    UpdateProject,
)
from service.actors.runtime import Actor, on
from service.clock import TOUCH_EVERY, Clock, iso
from service.money import fmt
from service.errors import Conflict, Forbidden, NotFound, Unprocessable
from service.roles import ROLE_BY_ID, within
from service.actors.accounts import credentials
from service.actors.accounts.member_rules import Identity, check_caller, not_last_owner  # noqa: F401
from service.actors.accounts.invite_rules import not_a_member
from service.actors.accounts.org_rules import check_email, check_org_name
from service.actors.accounts.invitations import (  # noqa: F401 - re-exported for the pages
    EXISTING_PERSON, INVALID_INVITE, INVITE_EMAIL_MISMATCH, INVITE_VALID, NOT_LINKED, InvitationHandlers,
    check_role, new_key, require_org,
)
from service.mail import messages
from service.storage import accounts as sql
from service.storage import sessions as sessions_sql
from service.storage.db import Store
from service.storage.events import emit
from service.storage.rows import Connection

SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?\Z")  # \Z: `$` also matches before a final newline
PROJECT_NAME_MAX, PROJECT_DESCRIPTION_MAX = 200, 2000
PROJECT_NAME_LENGTH = f"name must be 1 to {PROJECT_NAME_MAX} characters."
SLUG_MESSAGE = ("slug must be 1 to 64 lowercase letters, digits and hyphens, "
                "and cannot start or end with a hyphen.")


# a project id's shape (a UUID's text): a slug never takes it, or one value would name two
# projects of an organization (routes take a project by id or slug)
PROJECT_ID_SHAPE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def check_project_text(fields: dict[str, Any]) -> None:
    """Bounded, as the OpenAPI document states (routes/projects.py): a name is shown on pages
    and in spend-limit mail subjects (which fold line breaks: service/mail/messages.py)."""
    name = fields.get("name")
    if isinstance(name, str) and len(name.strip()) > PROJECT_NAME_MAX:
        raise Unprocessable(PROJECT_NAME_LENGTH, {"field": "name"})
    description = fields.get("description")
    if isinstance(description, str) and len(description) > PROJECT_DESCRIPTION_MAX:
        raise Unprocessable(f"description must be at most {PROJECT_DESCRIPTION_MAX} characters.",
                            {"field": "description", "max_length": PROJECT_DESCRIPTION_MAX})


def derive_slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:64].strip("-")
    if PROJECT_ID_SHAPE.match(slug):  # a name written like an id
        return "project-" + slug
    return slug or "project"


def key_event_data(k: dict[str, Any]) -> dict[str, Any]:
    return {f: k[f] for f in ("name", "key_prefix", "user_id", "role_id", "expires_at")} | {"key_id": k["id"]}


class AccountsActor(InvitationHandlers, Actor):
    def __init__(self, store: Store, clock: Clock, mail: Any = None) -> None:
        self.store = store
        self.clock = clock
        self.mail = mail  # service.mail.outbox.MailOutbox: seals mail links, knows the base URL
        self.touched: dict[str, float] = {}

    # -- organizations and members ---------------------------------------------------------
    @on(CreateOrg)
    async def on_CreateOrg(self, m: CreateOrg) -> dict[str, Any]:
        name = check_org_name(m.name)
        check_email(m.owner_email)
        now = self.clock.iso_now()
        org_id, user_id, project_id = sql.new_id(), sql.new_id(), sql.new_id()
        key = new_key()

        def tx(conn: Any) -> Any:
            sql.insert_org(conn, org_id, name, now, m.approved)
            sql.insert_user(conn, user_id, org_id, m.owner_email, "owner", now)
            sql.insert_project(conn, dict(id=project_id, organization_id=org_id, name="Default",
                                          slug="default", is_default=1, created_by=user_id, created_at=now))
            self._insert_key(conn, org_id, user_id, key, "Default key", None, None, now)
            if m.identity is not None:
                credentials.link_identity(conn, user_id, m.owner_email, m.identity, now, self.base_url)

        await self.store.write(tx)
        return {"organization_id": org_id, "owner_user_id": user_id, "api_key": key,
                "default_project_id": project_id}

    @on(ApproveOrg)
    async def on_ApproveOrg(self, m: ApproveOrg) -> dict[str, Any]:
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            org = sql.get_org(conn, m.org_id)
            if org is None:
                raise NotFound("Organization not found.")
            approved_at = sql.approve_org(conn, m.org_id, now)
            if org["approved_at"] is None:  # approved now: welcome mail to the owner
                to = sql.owner_email(conn, m.org_id)
                if to:
                    self.queue_mail(conn, m.org_id, to, messages.welcome(
                        org["name"], self.base_url, fmt(SIGNUP_UC), SIGNUP_DAYS), now)
            return approved_at

        approved_at = await self.store.write(tx)
        return {"organization_id": m.org_id, "approved_at": approved_at}

    @on(RenameOrg)
    async def on_RenameOrg(self, m: RenameOrg) -> dict[str, Any]:
        """The organization's name (the dashboard's Settings page): 1 to 200 characters."""
        name = check_org_name(m.name)

        def tx(conn: Any) -> Any:
            if not sql.rename_org(conn, m.org_id, name):
                raise NotFound("Organization not found.")

        await self.store.write(tx)
        return {"organization_id": m.org_id, "name": name}

    @on(AddMember)
    async def on_AddMember(self, m: AddMember) -> dict[str, Any]:
        check_role(m.role)
        check_email(m.email)
        now = self.clock.iso_now()
        user_id = sql.new_id()
        key = new_key()

        def tx(conn: Any) -> Any:
            require_org(conn, m.org_id)
            not_a_member(conn, m.org_id, m.email)
            sql.insert_user(conn, user_id, m.org_id, m.email, m.role, now)
            self._insert_key(conn, m.org_id, user_id, key, "Default key", None, None, now)
            emit(conn, m.org_id, "member.joined",
                 {"member_id": user_id, "member_email": m.email, "role": m.role}, now)

        await self.store.write(tx)
        return {"user_id": user_id, "api_key": key}

    @on(ChangeRole)
    async def on_ChangeRole(self, m: ChangeRole) -> dict[str, Any]:
        check_role(m.role)
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            user = sql.get_user(conn, m.org_id, m.user_id)
            if user is None or not user["is_active"]:
                raise NotFound("Member not found.")
            check_caller(m.caller_role, user["role"], m.role)
            if user["role"] == "owner" and m.role != "owner":
                not_last_owner(conn, m.org_id, "demoted")
            if user["role"] != m.role:
                sql.set_user_role(conn, m.user_id, m.role)
                emit(conn, m.org_id, "member.role_changed",
                     {"member_id": m.user_id, "member_email": user["email"], "role": m.role}, now)
            return {"user_id": m.user_id, "email": user["email"], "role": m.role}

        return await self.store.write(tx)

    @on(RemoveMember)
    async def on_RemoveMember(self, m: RemoveMember) -> None:
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            user = sql.get_user(conn, m.org_id, m.user_id)
            if user is None:
                raise NotFound("Member not found.")
            if user["is_active"]:
                check_caller(m.caller_role, user["role"], None)
                if user["role"] == "owner":
                    not_last_owner(conn, m.org_id, "removed")
                sql.deactivate_user(conn, m.user_id, now)
                sessions_sql.delete_for_user(conn, m.user_id)
                emit(conn, m.org_id, "member.removed",
                     {"member_id": m.user_id, "member_email": user["email"], "role": user["role"]}, now)

        await self.store.write(tx)

    # -- API keys ----------------------------------------------------------------------------
    def _insert_key(self, conn: Connection, org_id: str, user_id: str, key: str, name: str | None,
                    role_id: str | None, expires_at: str | None, now: str) -> dict[str, Any]:
        row = dict(id=sql.new_id(), organization_id=org_id, user_id=user_id, name=name,
                   key_prefix=key[:12], key_hash=sql.key_digest(key), role_id=role_id,
                   expires_at=expires_at, created_at=now)
        sql.insert_key(conn, row)
        emit(conn, org_id, "api_key.created", key_event_data(row), now)
        return row

    @on(CreateKey)
    async def on_CreateKey(self, m: CreateKey) -> dict[str, Any]:
        if m.role_id is not None:
            granted = ROLE_BY_ID.get(m.role_id)
            if granted is None:
                raise Unprocessable("role_id is not a known role.", {"role_id": m.role_id})
            if not within(granted, m.caller_role):
                raise Forbidden("You cannot create a key with a broader role than your own.",
                                {"role_id": m.role_id})
        elif m.caller_user_role is not None and not within(m.caller_user_role, m.caller_role):
            raise Forbidden("You cannot create a key with a broader role than your own.", {"role_id": None})
        now = self.clock.iso_now()
        key = new_key()

        def tx(conn: Any) -> dict[str, Any]:
            row = self._insert_key(conn, m.org_id, m.user_id, key, m.name, m.role_id, m.expires_at, now)
            got = sql.get_key(conn, m.org_id, row["id"])
            assert got is not None  # written in this transaction
            return got

        row = await self.store.write(tx)
        return row | {"key": key}

    @on(UpdateKey)
    async def on_UpdateKey(self, m: UpdateKey) -> dict[str, Any]:
        def tx(conn: Any) -> Any:
            if sql.get_key(conn, m.org_id, m.key_id) is None:
                raise NotFound("API key not found.", code="api_key.not_found")
            if m.fields:
                sql.update_key(conn, m.key_id, m.fields)
            return sql.get_key(conn, m.org_id, m.key_id)

        return await self.store.write(tx)

    @on(RevokeKey)
    async def on_RevokeKey(self, m: RevokeKey) -> None:
        """Revoking twice is fine (204 again); an id never seen in the org is 404."""
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            row = sql.key_row(conn, m.org_id, m.key_id)
            if row is None:
                raise NotFound("API key not found.", code="api_key.not_found")
            if row["revoked_at"] is None:
                sql.revoke_key(conn, m.key_id, now)
                emit(conn, m.org_id, "api_key.revoked", key_event_data(row), now)

        await self.store.write(tx)

    @on(TouchKey)
    async def on_TouchKey(self, m: TouchKey) -> None:
        last = self.touched.get(m.key_id)
        if last is not None and m.at - last < TOUCH_EVERY:
            return
        self.touched[m.key_id] = m.at
        await self.store.write(lambda conn: sql.touch_keys(conn, {m.key_id: iso(m.at)}))

    # -- projects ------------------------------------------------------------------------------
    @on(CreateProject)
    async def on_CreateProject(self, m: CreateProject) -> dict[str, Any]:
        if not m.name or not m.name.strip():
            raise Unprocessable("name is required.", {"field": "name"})
        check_project_text({"name": m.name, "description": m.description})
        if m.slug is not None and not SLUG_RE.match(m.slug):
            raise Unprocessable(SLUG_MESSAGE, {"slug": m.slug})
        now = self.clock.iso_now()
        project_id = sql.new_id()

        def tx(conn: Any) -> Any:
            slug = m.slug
            if slug is None:  # derived slugs get a numeric suffix instead of a 409
                base = derive_slug(m.name)
                slug, n = base, 2
                while sql.slug_taken(conn, m.org_id, slug):
                    suffix = f"-{n}"
                    slug, n = base[: 64 - len(suffix)].rstrip("-") + suffix, n + 1
            sql.insert_project(conn, dict(id=project_id, organization_id=m.org_id, name=m.name.strip(),
                                          slug=slug, description=m.description, created_by=m.user_id,
                                          created_at=now))
            return sql.get_project(conn, m.org_id, project_id)

        return await self.store.write(tx)

    @on(UpdateProject)
    async def on_UpdateProject(self, m: UpdateProject) -> dict[str, Any]:
        fields = dict(m.fields)
        if "name" in fields and (fields["name"] is None or not str(fields["name"]).strip()):
            raise Unprocessable("name is required.", {"field": "name"})
        check_project_text(fields)
        if "slug" in fields and (fields["slug"] is None or not SLUG_RE.match(fields["slug"])):
            raise Unprocessable(SLUG_MESSAGE, {"slug": fields["slug"]})
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            p = sql.get_project(conn, m.org_id, m.project_ref)
            if p is None:
                raise NotFound("Project not found.")
            if p["is_archived"]:
                raise Conflict("The project is archived.", {"project_id": p["id"]})
            if fields:
                sql.update_project(conn, p["id"], fields | {"updated_at": now})
            return sql.get_project(conn, m.org_id, p["id"])

        return await self.store.write(tx)

    @on(ArchiveProject)
    async def on_ArchiveProject(self, m: ArchiveProject) -> dict[str, Any]:
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            p = sql.get_project(conn, m.org_id, m.project_ref)
            if p is None:
                raise NotFound("Project not found.")
            if p["is_default"]:
                raise Conflict("The default project cannot be archived.", {"project_id": p["id"]})
            if not p["is_archived"]:
                sql.update_project(conn, p["id"], {"is_archived": 1, "archived_at": now, "updated_at": now})
            return sql.get_project(conn, m.org_id, p["id"])

        return await self.store.write(tx)

