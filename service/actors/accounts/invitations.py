"""Invitations: handlers of the accounts actor (mixed into `AccountsActor`, the one owner of
organizations and members): invite, resend, accept, and linking a provider account.

An invitation's link goes to the invited address by mail only (never to a page of the
inviter). Accepting never changes the credentials of a person who already exists: see
`on_AcceptInvite` and docs/security-identity.md.
"""

from __future__ import annotations


import hashlib
import secrets
from typing import Any, Callable

from service.actors.runtime import on
from service.actors.accounts import credentials
from service.actors.accounts.messages import AcceptInvite, Invite, LinkIdentity, ResendInvite, UnlinkIdentity
from service.actors.accounts.invite_rules import mail_allowed, not_a_member
from service.actors.accounts.member_rules import IDENTITY_TAKEN
from service.actors.accounts.org_rules import check_email
from service.actors.accounts.people import PeopleHandlers
from service.clock import iso
from service.errors import Conflict, Forbidden, NotFound, Unprocessable
from service.mail import messages
from service.roles import ROLE_IDS
from service.storage import accounts as sql
from service.storage import identity as identity_sql
from service.storage.events import emit
from service.storage.rows import Connection

INVITE_VALID = 14 * 86400.0  # spec Limits: an invitation link is valid for 14 days
INVALID_INVITE = "The invitation is not valid: unknown, already used, replaced by a resend, or expired."
INVITE_EMAIL_MISMATCH = "The invitation was sent to a different email address."
EXISTING_PERSON = ("This email address already has an account: log in as it to accept the invitation. "
                   "An invitation never sets a password.")
NOT_LINKED = ("This email address already has an account, and this identity provider account is not linked "
              "to it: log in, link the provider from your account page, then accept the invitation.")


def new_key() -> str:
    return "aak_" + secrets.token_hex(24)


def check_role(role: str) -> None:
    if role not in ROLE_IDS:
        raise Unprocessable(f"role must be one of {', '.join(ROLE_IDS)}.", {"role": role})


class InvitationHandlers(PeopleHandlers):
    """Mixed into the accounts actor (mail and base URL come from PeopleHandlers)."""

    _insert_key: Callable[..., dict[str, Any]]  # the actor's: a key row and its `api_key.created` event

    # -- invitations ---------------------------------------------------------------------------
    def _new_link(self, now: float) -> tuple[str, str, str]:
        token = "inv_" + secrets.token_hex(24)
        return token, hashlib.sha256(token.encode()).hexdigest(), iso(now + INVITE_VALID)

    def _invitation_mail(self, conn: Connection, org_id: str, email: str, role: str, token: str, now_iso: str) -> None:
        """The invitation mail with its link (a resend mails the new link; the old one is dead)."""
        org = sql.get_org(conn, org_id)
        assert org is not None  # the caller's transaction has found the organization
        self.queue_mail(conn, org_id, email, messages.invitation(org["name"], role, int(INVITE_VALID // 86400)), now_iso,
                        f"{self.base_url}/invitations/accept?token={token}")

    @on(Invite)
    async def on_Invite(self, m: Invite) -> dict[str, Any]:
        check_role(m.role)
        check_email(m.email)
        now = self.clock.now()
        now_iso = iso(now)
        invitation_id, member_id = sql.new_id(), sql.new_id()
        token, digest, expires = self._new_link(now)

        def tx(conn: Any) -> Any:
            require_org(conn, m.org_id)
            not_a_member(conn, m.org_id, m.email)
            mail_allowed(conn, m.org_id, m.email, now)
            sql.insert_invitation(conn, dict(id=invitation_id, organization_id=m.org_id, member_id=member_id,
                                             email=m.email, role=m.role, token_hash=digest, created_at=now_iso,
                                             expires_at=expires))
            emit(conn, m.org_id, "member.invited", {"member_id": member_id, "member_email": m.email,
                                                    "role": m.role}, now_iso)
            self._invitation_mail(conn, m.org_id, m.email, m.role, token, now_iso)

        await self.store.write(tx)
        return {"invitation_id": invitation_id, "member_id": member_id, "email": m.email, "role": m.role,
                "expires_at": expires, "token": token}

    @on(ResendInvite)
    async def on_ResendInvite(self, m: ResendInvite) -> dict[str, Any]:
        now = self.clock.now()
        now_iso = iso(now)
        token, digest, expires = self._new_link(now)

        def tx(conn: Any) -> Any:
            inv = sql.get_invitation(conn, m.org_id, m.invitation_id)
            if inv is None or inv["accepted_at"] is not None:
                raise NotFound("Invitation not found.")
            mail_allowed(conn, m.org_id, inv["email"], now)
            sql.set_invitation_link(conn, inv["id"], digest, expires)
            emit(conn, m.org_id, "member.invited", {"member_id": inv["member_id"], "member_email": inv["email"],
                                                    "role": inv["role"]}, now_iso)
            self._invitation_mail(conn, m.org_id, inv["email"], inv["role"], token, now_iso)
            return inv

        inv = await self.store.write(tx)
        return {"invitation_id": inv["id"], "member_id": inv["member_id"], "email": inv["email"],
                "role": inv["role"], "expires_at": expires, "token": token}

    @on(AcceptInvite)
    async def on_AcceptInvite(self, m: AcceptInvite) -> dict[str, Any]:
        """Accept once. Who accepts decides what may happen to credentials: a person who
        already exists (a membership, a password) must be signed in as themselves
        (`signed_in_email`) or come through a provider account already linked to them, and
        nothing of their credentials changes; only a brand-new address sets a password or
        links a provider, because the link itself came by mail. The operator API passes
        none of these: a membership, no credential."""
        now_iso = self.clock.iso_now()
        digest = m.token_hash or hashlib.sha256((m.token or "").encode()).hexdigest()
        key = new_key()

        def tx(conn: Any) -> Any:
            inv = sql.invitation_by_token(conn, digest)
            if inv is None or inv["accepted_at"] is not None or inv["expires_at"] <= now_iso:
                raise NotFound(INVALID_INVITE)
            email = inv["email"]
            known = identity_sql.person_known(conn, email)
            if m.signed_in_email is not None and m.signed_in_email.lower() != email.lower():
                raise Forbidden(INVITE_EMAIL_MISMATCH)
            if m.identity is not None:
                if (m.identity.email or "").lower() != email.lower():
                    raise Forbidden(INVITE_EMAIL_MISMATCH)
                linked = identity_sql.identity_person(conn, m.identity.issuer, m.identity.subject)
                if known and (linked is None or linked["email"].lower() != email.lower()):
                    raise Forbidden(NOT_LINKED)
                if linked is not None and linked["email"].lower() != email.lower():
                    raise Conflict(IDENTITY_TAKEN)
            if m.password_hash is not None and known:
                raise Conflict(EXISTING_PERSON)
            not_a_member(conn, inv["organization_id"], email)
            sql.accept_invitation(conn, inv["id"], now_iso)
            sql.insert_user(conn, inv["member_id"], inv["organization_id"], email, inv["role"], now_iso)
            self._insert_key(conn, inv["organization_id"], inv["member_id"], key, "Default key", None, None,
                             now_iso)
            emit(conn, inv["organization_id"], "member.joined",
                 {"member_id": inv["member_id"], "member_email": email, "role": inv["role"]}, now_iso)
            if m.identity is not None and not known:
                credentials.link_identity(conn, inv["member_id"], email, m.identity, now_iso, self.base_url)
            if m.password_hash is not None:
                credentials.set_password(conn, email, m.password_hash, now_iso, credentials.PASSWORD_SET,
                                         self.base_url)
            return inv

        inv = await self.store.write(tx)
        return {"user_id": inv["member_id"], "organization_id": inv["organization_id"], "api_key": key}

    @on(LinkIdentity)
    async def on_LinkIdentity(self, m: LinkIdentity) -> None:
        """Link a provider account to the person signed in as `user_id` (their session is the proof)."""
        now_iso = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            email = sql.user_email(conn, m.user_id)
            if email is None:
                raise NotFound("Member not found.")
            credentials.link_identity(conn, m.user_id, email, m.identity, now_iso, self.base_url)

        await self.store.write(tx)

    @on(UnlinkIdentity)
    async def on_UnlinkIdentity(self, m: UnlinkIdentity) -> None:
        """Unlink, unless it is the person's only way to sign in (no password, no other link)."""
        now_iso = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            credentials.unlink_identity(conn, m.email, m.issuer, now_iso, self.base_url)

        await self.store.write(tx)


def require_org(conn: Connection, org_id: str) -> None:
    if sql.get_org(conn, org_id) is None:
        raise NotFound("Organization not found.")
