"""Sign-up, email confirmation and password reset: handlers of the accounts actor (mixed into
`AccountsActor`, the one owner of organizations and members).

Every mail is queued in the transaction of the change that causes it (service.storage.mail);
a mail's one-time link is sealed with the node key in the outbox row until it is sent, and the
token itself is kept only as a SHA-256 digest (`mail_tokens`).

- A sign-up makes an organization (Default project, the person as `owner`) that is
  `unconfirmed` and not approved, holds its password aside (`signup_passwords`) and mails a
  confirmation link bound to that organization (valid CONFIRM_DAYS). An unconfirmed sign-up
  sets no credential and blocks nothing: a later sign-up with the same address is made and
  mailed the same way (pre-account hijack, M4). A sign-up for an address with a confirmed
  membership makes nothing and answers the same page; that address gets a note that
  someone tried (no account enumeration).
- Confirming moves that one organization to `pending` (waiting for the operator's approval)
  and, when the address belongs to no one yet (no password, no membership of a confirmed
  organization), sets the one its sign-up chose. A sign-up never gives a password to a person
  who exists: whoever chose it proved nothing, and a mail scanner may follow the link. A used link
  answers "already confirmed"; an unknown or expired one is refused.
- A reset link (valid RESET_VALID seconds) is mailed only when the address is known; the
  answer is the same either way. Using it sets the password, unlinks every identity-provider
  account (`credentials.reset_password`), spends every reset link of the
  address, ends all the person's sessions in the same transaction and, when asked, revokes
  every API key they created. It confirms no sign-up: only a sign-up's own link does.
"""

from __future__ import annotations


import secrets
from dataclasses import dataclass
from typing import Any

from service.actors.runtime import on
from service.actors.accounts import credentials
from service.clock import Clock, iso
from service.errors import NotFound
from service.mail import messages
from service.storage import accounts as sql
from service.storage import identity as identity_sql
from service.storage import mail as mail_sql
from service.storage.db import Store
from service.storage.rows import Connection

CONFIRM_DAYS = 7
CONFIRM_VALID = CONFIRM_DAYS * 86400.0
RESET_VALID = 3600.0  # one hour on the service clock
INVALID_CONFIRM = "This confirmation link is not valid: it is unknown or has expired. Sign up again to get a new one."
INVALID_RESET = ("This password reset link is not valid: it is unknown, already used, replaced by a newer "
                 "one, or expired. Ask for a new one.")
UNKNOWN_EMAIL = "No account has this email address."


@dataclass
class SignUp:
    email: str
    org_name: str
    password_hash: str


@dataclass
class ConfirmEmail:
    token: str


@dataclass
class RequestReset:
    email: str


@dataclass
class OperatorReset:
    """A reset link answered to the operator (no mail): for nodes without SMTP."""
    email: str


@dataclass
class ResetPassword:
    token: str
    password_hash: str
    revoke_keys: bool = False


def _at(t: float) -> str:
    out = iso(t)
    assert out is not None
    return out


class PeopleHandlers:
    """Mixed into the accounts actor, which sets these three."""

    store: Store
    clock: Clock
    mail: Any  # service.mail.outbox.MailOutbox, or None (mails then carry no link)

    def queue_mail(self, conn: Connection, org_id: str | None, to: str, mail: messages.Mail, now_iso: str,
                   link: str | None = None) -> None:
        sealed = self.mail.seal(link) if link is not None and self.mail is not None else None
        mail_sql.enqueue(conn, org_id, to, mail.kind, mail.subject, mail.text, mail.html, now_iso, sealed)

    @property
    def base_url(self) -> str:
        return self.mail.base_url if self.mail is not None else ""

    def _link(self, conn: Connection, purpose: str, email: str, org_id: str | None, now: float, valid: float,
              path: str) -> str:
        token = secrets.token_urlsafe(32)
        mail_sql.insert_token(conn, token, purpose, email, org_id, _at(now), _at(now + valid))
        return f"{self.base_url}{path}?token={token}"

    @on(SignUp)
    async def on_SignUp(self, m: SignUp) -> str | None:
        """The new organization's id, or None when the address was known (mailed instead)."""
        now = self.clock.now()
        now_iso = iso(now)
        org_id, user_id, project_id = sql.new_id(), sql.new_id(), sql.new_id()

        def tx(conn: Any) -> Any:
            if identity_sql.has_confirmed_membership(conn, m.email):
                self.queue_mail(conn, None, m.email, messages.signup_exists(self.base_url), now_iso)
                return None
            sql.insert_org(conn, org_id, m.org_name, now_iso, False)
            mail_sql.mark_unconfirmed(conn, org_id)
            sql.insert_user(conn, user_id, org_id, m.email, "owner", now_iso)
            sql.insert_project(conn, dict(id=project_id, organization_id=org_id, name="Default", slug="default",
                                          is_default=1, created_by=user_id, created_at=now_iso))
            identity_sql.drop_stale_signup_passwords(conn, _at(now - CONFIRM_VALID))
            identity_sql.hold_signup_password(conn, org_id, m.email, m.password_hash, now_iso)
            link = self._link(conn, "confirm", m.email, org_id, now, CONFIRM_VALID, "/confirm")
            self.queue_mail(conn, org_id, m.email, messages.confirmation(m.org_name, CONFIRM_DAYS), now_iso, link)
            return org_id

        return await self.store.write(tx)

    @on(ConfirmEmail)
    async def on_ConfirmEmail(self, m: ConfirmEmail) -> dict[str, Any]:
        """{organization_id, name, already}: `already` when the link was used before."""
        now_iso = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            row = mail_sql.get_token(conn, mail_sql.digest(m.token), "confirm") if m.token else None
            if row is None or (row["used_at"] is None and row["expires_at"] <= now_iso):
                raise NotFound(INVALID_CONFIRM)
            org = mail_sql.org_row(conn, row["organization_id"])
            if org is None:
                raise NotFound(INVALID_CONFIRM)
            already = row["used_at"] is not None or not org["unconfirmed"]
            if row["used_at"] is None:  # this link confirms its own sign-up, and nothing else
                # whoever chose the held password proved nothing: it may only start a new person,
                # never become the password of one who exists (a password, other memberships)
                known = identity_sql.person_known(conn, row["email"])
                identity_sql.use_token(conn, row["token_hash"], now_iso)
                mail_sql.confirm_org(conn, org["id"], now_iso)
                held = identity_sql.take_signup_password(conn, org["id"])
                if held is not None and not known:
                    credentials.set_password(conn, row["email"], held["password_hash"], now_iso, None,
                                             self.base_url)
            return {"organization_id": org["id"], "name": org["name"], "already": already}

        return await self.store.write(tx)

    @on(RequestReset)
    async def on_RequestReset(self, m: RequestReset) -> None:
        now = self.clock.now()
        now_iso = iso(now)

        def tx(conn: Any) -> Any:
            if not mail_sql.email_known(conn, m.email):
                return
            member = mail_sql.first_membership(conn, m.email)
            org_id = member["organization_id"] if member else None
            link = self._link(conn, "reset", m.email, org_id, now, RESET_VALID, "/reset-password")
            self.queue_mail(conn, org_id, m.email, messages.password_reset(int(RESET_VALID // 60)), now_iso, link)

        await self.store.write(tx)

    @on(OperatorReset)
    async def on_OperatorReset(self, m: OperatorReset) -> dict[str, Any]:
        now = self.clock.now()

        def tx(conn: Any) -> Any:
            if not mail_sql.email_known(conn, m.email):
                raise NotFound(UNKNOWN_EMAIL, {"email": m.email})
            member = mail_sql.first_membership(conn, m.email)
            return self._link(conn, "reset", m.email, member["organization_id"] if member else None, now,
                              RESET_VALID, "/reset-password")

        url = await self.store.write(tx)
        return {"email": m.email, "reset_url": url, "expires_at": iso(now + RESET_VALID)}

    @on(ResetPassword)
    async def on_ResetPassword(self, m: ResetPassword) -> dict[str, Any]:
        """{email, keys_revoked}. Every session of the person ends; with `revoke_keys`,
        every API key they created too (what someone who knew the old password minted)."""
        now_iso = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            row = mail_sql.get_token(conn, mail_sql.digest(m.token), "reset") if m.token else None
            if row is None or row["used_at"] is not None or row["expires_at"] <= now_iso:
                raise NotFound(INVALID_RESET)
            # ends every session, spends every reset link, unlinks every identity provider
            credentials.reset_password(conn, row["email"], m.password_hash, now_iso, self.base_url)
            revoked = credentials.revoke_keys(conn, row["email"], now_iso) if m.revoke_keys else 0
            return {"email": row["email"], "keys_revoked": revoked}

        return await self.store.write(tx)
