"""Typed facades over the actor registries the HTTP layer reaches.

Each class is the registry itself plus one method per message: the method builds the message and
asks (or tells). Routes call these methods only, so no route constructs an actor message or names
a mailbox key; actors and tests may still ask a registry directly. The facades decide nothing.
"""

from __future__ import annotations

from typing import Any

from service.actors.accounts.messages import (
    AcceptInvite,
    AddMember,
    ApproveOrg,
    ArchiveProject,
    ChangeRole,
    CreateKey,
    CreateOrg,
    CreateProject,
    Invite,
    LinkIdentity,
    RemoveMember,
    RenameOrg,
    ResendInvite,
    RevokeKey,
    TouchKey,
    UnlinkIdentity,
    UpdateKey,
    UpdateProject,
)
from service.actors.accounts.actor import AccountsActor
from service.actors.balance.actor import BalanceActor, signup_grant
from service.actors.balance.messages import Grant, LimitPut, SettingsPut, Sync
from service.actors.delivery import (
    CreateWebhook,
    DeleteWebhook,
    DeliveryRegistry,
    RotateNodeKey,
    SendTest,
    UpdateWebhook,
)
from service.actors.accounts.member_rules import Identity
from service.actors.accounts.people import (
    ConfirmEmail,
    OperatorReset,
    RequestReset,
    ResetPassword,
    SignUp,
)
from service.actors.runtime import ASK_TIMEOUT, Registry
from service.actors.sessions import (
    BeginFlow,
    SessionsActor,
    EndSession,
    RehashPassword,
    SetPassword,
    StartSession,
    TakeFlow,
    TouchSession,
)
from service.actors.tickets import TicketsActor, CustomerReply, OpenTicket, SetState, SupportReply

KEY_ACCOUNTS = "accounts"
KEY_SESSIONS = "sessions"


class Accounts(Registry[AccountsActor]):
    """The one accounts actor: organizations, members, invitations, keys, projects, people."""

    def touch_key(self, key_id: str, at: float) -> None:
        """Records a key's last use without waiting (a lost touch only ages `last_used_at`)."""
        self.tell(KEY_ACCOUNTS, TouchKey(key_id, at))

    async def create_org(
        self,
        name: str,
        owner_email: str,
        approved: bool = True,
        identity: Identity | None = None,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(KEY_ACCOUNTS, CreateOrg(name, owner_email, approved=approved, identity=identity), timeout)

    async def approve_org(self, org_id: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, ApproveOrg(org_id), timeout)

    async def rename_org(self, org_id: str, name: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, RenameOrg(org_id, name), timeout)

    async def add_member(self, org_id: str, email: str, role: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, AddMember(org_id, email, role), timeout)

    async def change_role(
        self, org_id: str, user_id: str, role: str, caller_role: str | None = None, timeout: float = ASK_TIMEOUT
    ) -> Any:
        return await self.ask(KEY_ACCOUNTS, ChangeRole(org_id, user_id, role, caller_role=caller_role), timeout)

    async def remove_member(
        self, org_id: str, user_id: str, caller_role: str | None = None, timeout: float = ASK_TIMEOUT
    ) -> Any:
        return await self.ask(KEY_ACCOUNTS, RemoveMember(org_id, user_id, caller_role=caller_role), timeout)

    async def invite(self, org_id: str, email: str, role: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, Invite(org_id, email, role), timeout)

    async def resend_invite(self, org_id: str, invitation_id: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, ResendInvite(org_id, invitation_id), timeout)

    async def accept_invite(
        self,
        token: str | None = None,
        token_hash: str | None = None,
        identity: Identity | None = None,
        password_hash: str | None = None,
        signed_in_email: str | None = None,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(
            KEY_ACCOUNTS,
            AcceptInvite(token=token, token_hash=token_hash, identity=identity, password_hash=password_hash,
                         signed_in_email=signed_in_email),
            timeout,
        )

    async def link_identity(self, user_id: str, identity: Identity, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, LinkIdentity(user_id, identity), timeout)

    async def unlink_identity(self, email: str, issuer: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, UnlinkIdentity(email, issuer), timeout)

    async def create_key(
        self,
        org_id: str,
        user_id: str,
        caller_role: str,
        name: str,
        role_id: str | None = None,
        expires_at: str | None = None,
        caller_user_role: str | None = None,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(
            KEY_ACCOUNTS,
            CreateKey(
                org_id,
                user_id,
                caller_role,
                name,
                role_id=role_id,
                expires_at=expires_at,
                caller_user_role=caller_user_role,
            ),
            timeout,
        )

    async def update_key(self, org_id: str, key_id: str, fields: dict[str, Any], timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, UpdateKey(org_id, key_id, fields=fields), timeout)

    async def revoke_key(self, org_id: str, key_id: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, RevokeKey(org_id, key_id), timeout)

    async def create_project(
        self,
        org_id: str,
        user_id: str,
        name: str,
        slug: str | None = None,
        description: str | None = None,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(
            KEY_ACCOUNTS, CreateProject(org_id, user_id, name, slug=slug, description=description), timeout
        )

    async def update_project(self, org_id: str, project_ref: str, fields: dict[str, Any], timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, UpdateProject(org_id, project_ref, fields=fields), timeout)

    async def archive_project(self, org_id: str, project_ref: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, ArchiveProject(org_id, project_ref), timeout)

    async def sign_up(self, email: str, org_name: str, password_hash: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, SignUp(email, org_name, password_hash), timeout)

    async def confirm_email(self, token: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, ConfirmEmail(token), timeout)

    async def request_reset(self, email: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, RequestReset(email), timeout)

    def request_reset_later(self, email: str) -> None:
        """A reset mail to `email` if it has an account, looked up after the page is answered:
        the page does the same work for every address (probe L6: its time told them apart)."""
        self.tell(KEY_ACCOUNTS, RequestReset(email))

    async def operator_reset(self, email: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_ACCOUNTS, OperatorReset(email), timeout)

    async def reset_password(
        self, token: str, password_hash: str, revoke_keys: bool = False, timeout: float = ASK_TIMEOUT
    ) -> Any:
        return await self.ask(KEY_ACCOUNTS, ResetPassword(token, password_hash, revoke_keys), timeout)


class Sessions(Registry[SessionsActor]):
    """The one sessions actor: browser sessions, passwords and provider sign-in flows."""

    def touch_session(self, session_id: str, at: float) -> None:
        """Slides a session's idle deadline without waiting for the write."""
        self.tell(KEY_SESSIONS, TouchSession(session_id, at))

    async def start_session(
        self, user_id: str, org_id: str, previous_token: str | None = None, chosen: bool = True,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(KEY_SESSIONS, StartSession(user_id, org_id, previous_token=previous_token,
                                                         chosen=chosen), timeout)

    async def end_session(self, token: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_SESSIONS, EndSession(token), timeout)

    async def set_password(
        self, email: str, password_hash: str, user_id: str, org_id: str, had_password: bool = True,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(KEY_SESSIONS, SetPassword(email, password_hash, user_id, org_id, had_password),
                              timeout)

    async def rehash_password(self, email: str, old_hash: str, new_hash: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_SESSIONS, RehashPassword(email, old_hash, new_hash), timeout)

    async def begin_flow(
        self,
        provider: str,
        next_path: str,
        invitation_hash: str | None = None,
        link_user_id: str | None = None,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(
            KEY_SESSIONS,
            BeginFlow(provider, next_path, invitation_hash=invitation_hash, link_user_id=link_user_id),
            timeout,
        )

    async def take_flow(self, state: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(KEY_SESSIONS, TakeFlow(state), timeout)


class Tickets(Registry[TicketsActor]):
    """One tickets actor per organization, keyed by the organization id."""

    async def open_ticket(
        self,
        org_id: str,
        user_id: str,
        subject_line: str,
        type: str,
        priority: str,
        body: str,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(org_id, OpenTicket(org_id, user_id, subject_line, type, priority, body), timeout)

    async def customer_reply(
        self, org_id: str, ticket_id: str, user_id: str, body: str, timeout: float = ASK_TIMEOUT
    ) -> Any:
        return await self.ask(org_id, CustomerReply(org_id, ticket_id, user_id, body), timeout)

    async def support_reply(
        self, org_id: str, ticket_id: str, author: str, body: str, timeout: float = ASK_TIMEOUT
    ) -> Any:
        return await self.ask(org_id, SupportReply(org_id, ticket_id, author, body), timeout)

    async def set_state(self, org_id: str, ticket_id: str, state: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(org_id, SetState(org_id, ticket_id, state), timeout)


class Balances(Registry[BalanceActor]):
    """One balance actor per organization, keyed by the organization id."""

    async def grant(
        self,
        org_id: str,
        grant_id: str,
        amount_uc: int,
        source: str = "promo",
        expires_at: float | None = None,
        reason: str | None = None,
        timeout: float = ASK_TIMEOUT,
    ) -> Any:
        return await self.ask(
            org_id, Grant(grant_id, amount_uc, source=source, expires_at=expires_at, reason=reason), timeout
        )

    async def settings_put(
        self, org_id: str, low_balance_threshold_uc: int | None, timeout: float = ASK_TIMEOUT
    ) -> Any:
        return await self.ask(org_id, SettingsPut(low_balance_threshold_uc), timeout)

    async def sync(self, org_id: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask(org_id, Sync(), timeout)

    async def on_approved(self, org_id: str) -> None:
        """An organization was created approved or approved later: the 200-credit signup
        lot, once per organization (idempotent on its grant id)."""
        await self.ask(org_id, signup_grant(org_id, self.clock.now()))

    async def limit_put(self, org_id: str, scope: str, scope_id: str, limit_uc: int | None,
                        timeout: float = ASK_TIMEOUT) -> Any:
        """A project's monthly or an API key's spend limit (service.credits.limits)."""
        return await self.ask(org_id, LimitPut(scope, scope_id, limit_uc), timeout)


class Webhooks(DeliveryRegistry):
    """The one account-webhook delivery actor: webhook settings, test sends, the node key."""

    async def create_webhook(
        self, org_id: str, url: str, events: list[str], description: str | None = None, timeout: float = ASK_TIMEOUT
    ) -> Any:
        return await self.ask_actor(CreateWebhook(org_id, url, events, description=description), timeout)

    async def update_webhook(self, org_id: str, webhook_id: str, fields: dict[str, Any], timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask_actor(UpdateWebhook(org_id, webhook_id, fields=fields), timeout)

    async def delete_webhook(self, org_id: str, webhook_id: str, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask_actor(DeleteWebhook(org_id, webhook_id), timeout)

    async def send_test(self, org_id: str, webhook_id: str, reply: Any, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask_actor(SendTest(org_id, webhook_id, reply), timeout)

    async def rotate_node_key(self, timeout: float = ASK_TIMEOUT) -> Any:
        return await self.ask_actor(RotateNodeKey(), timeout)
