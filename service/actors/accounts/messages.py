"""The accounts actor's messages (service/actors/accounts/actor.py, which re-exports them for the
routes that send them)."""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field

from service.actors.accounts.member_rules import Identity


@dataclass
class CreateOrg:
    name: str
    owner_email: str
    approved: bool = True
    identity: Identity | None = None  # a person arriving through a provider


@dataclass
class ApproveOrg:
    org_id: str


@dataclass
class RenameOrg:
    org_id: str
    name: str


@dataclass
class AddMember:
    org_id: str
    email: str
    role: str


@dataclass
class ChangeRole:
    org_id: str
    user_id: str
    role: str
    caller_role: str | None = None  # None: the operator


@dataclass
class RemoveMember:
    org_id: str
    user_id: str
    caller_role: str | None = None  # None: the operator


@dataclass
class Invite:
    org_id: str
    email: str
    role: str


@dataclass
class ResendInvite:
    org_id: str
    invitation_id: str


@dataclass
class AcceptInvite:
    token: str | None = None
    token_hash: str | None = None   # the digest, when the token itself is not kept (provider flow)
    identity: Identity | None = None  # accepted through a provider: its email must be the invited one
    password_hash: str | None = None  # accepted with a new password (a brand-new address only)
    signed_in_email: str | None = None  # the acceptor is signed in as this person (session or password)


@dataclass
class LinkIdentity:
    user_id: str
    identity: Identity


@dataclass
class UnlinkIdentity:
    """The signed-in person `email` unlinks their account at the provider `issuer`."""
    email: str
    issuer: str


@dataclass
class CreateKey:
    org_id: str
    user_id: str
    caller_role: str
    name: str
    role_id: str | None = None
    expires_at: str | None = None
    # the person's own role when the caller's key is bound to a narrower one: an unbound key
    # made now would act with it, so it must be within `caller_role` too
    caller_user_role: str | None = None


@dataclass
class UpdateKey:
    org_id: str
    key_id: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class RevokeKey:
    org_id: str
    key_id: str


@dataclass
class TouchKey:
    key_id: str
    at: float


@dataclass
class CreateProject:
    org_id: str
    user_id: str
    name: str
    slug: str | None = None
    description: str | None = None


@dataclass
class UpdateProject:
    org_id: str
    project_ref: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class ArchiveProject:
    org_id: str
    project_ref: str
