"""Every change of how a person signs in goes through here, inside the transaction of the
change: the new password (every session of the person ends, every reset link issued before
stops working; a reset also unlinks every identity-provider account), a linked or unlinked
identity-provider account, and a mail to the person saying so.

Who may call these is the callers' rule (docs/security-identity.md): someone who proved
control of the mailbox with a link sent only by mail, or who is signed in as that person.
"""

from __future__ import annotations


from service.actors.accounts.member_rules import Identity
from service.errors import Conflict, NotFound
from service.actors.accounts.member_rules import link_identity as link_on_subject
from service.mail import messages
from service.storage import accounts as accounts_sql
from service.storage import identity as identity_sql
from service.storage import mail as mail_sql
from service.storage import sessions as sessions_sql
from service.storage.events import emit
from service.storage.rows import Connection

PASSWORD_SET = "a password was set"
PASSWORD_CHANGED = "the password was changed"
PASSWORD_RESET = "the password was reset with a link sent to this address"


def notify(conn: Connection, email: str, change: str, now_iso: str, base_url: str) -> None:
    mail = messages.credential_changed(change, base_url)
    mail_sql.enqueue(conn, None, email, mail.kind, mail.subject, mail.text, mail.html, now_iso)


def set_password(conn: Connection, email: str, hashed: str, now_iso: str, change: str | None, base_url: str) -> None:
    """`change` None only for the password a sign-up chose, set by following that sign-up's
    own confirmation mail: that mail already told the mailbox what the sign-up does."""
    sessions_sql.set_password(conn, email, hashed, now_iso)  # also ends every session of the person
    identity_sql.spend_reset_links(conn, email, now_iso)
    if change is not None:
        notify(conn, email, change, now_iso, base_url)


def reset_password(conn: Connection, email: str, hashed: str, now_iso: str, base_url: str) -> list[str]:
    """A reset proves control of the mailbox and nothing more: every other way in that someone
    else may have set up ends with it. Sessions and reset links as for any new password, and
    the linked identity-provider accounts too: someone who held the account for a while (a
    sign-up's password confirmed by a mail scanner, a stolen password) could have linked
    theirs, and it would outlive the reset. Returns the issuers unlinked."""
    issuers = sorted({r["issuer"] for r in identity_sql.identities_of_person(conn, email)})
    for issuer in issuers:
        identity_sql.delete_identities(conn, email, issuer)
    change = PASSWORD_RESET if not issuers else (
        f"{PASSWORD_RESET}, and the identity-provider accounts linked to it ({', '.join(issuers)}) were "
        "unlinked (link yours again on your account page)")
    set_password(conn, email, hashed, now_iso, change, base_url)
    return issuers


def link_identity(conn: Connection, user_id: str, person_email: str, identity: Identity, now_iso: str,
                  base_url: str) -> None:
    link_on_subject(conn, user_id, identity, now_iso)
    notify(conn, person_email, f"an identity-provider account ({identity.issuer}) was linked", now_iso, base_url)


NOT_LINKED_HERE = "This identity provider is not linked to your account."
ONLY_WAY_IN = "This is your only way to sign in: set a password first, then unlink it."


def unlink_identity(conn: Connection, email: str, issuer: str, now_iso: str, base_url: str) -> None:
    linked = identity_sql.identities_of_person(conn, email)
    if not any(r["issuer"] == issuer for r in linked):
        raise NotFound(NOT_LINKED_HERE)
    others = [r for r in linked if r["issuer"] != issuer]
    if not others and sessions_sql.password_hash(conn, email) is None:
        raise Conflict(ONLY_WAY_IN)
    identity_sql.delete_identities(conn, email, issuer)
    notify(conn, email, f"an identity-provider account ({issuer}) was unlinked", now_iso, base_url)


def revoke_keys(conn: Connection, email: str, now_iso: str) -> int:
    """Revoke every live API key the person created, in every organization (each with its
    `api_key.revoked` event). Returns how many."""
    rows = identity_sql.live_keys_of(conn, email)
    for k in rows:
        accounts_sql.revoke_key(conn, k["id"], now_iso)
        data = {f: k[f] for f in ("name", "key_prefix", "user_id", "role_id", "expires_at")} | {"key_id": k["id"]}
        emit(conn, k["organization_id"], "api_key.revoked", data, now_iso)
    return len(rows)
