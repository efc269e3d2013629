"""The billing warnings' mails, composed here (the mail layer) and queued in the balance
actor's own write, beside the batch that fired them: the low-balance warning to every active
owner and admin once per crossing, and the spend-limit warning once per limit per period.

Storage only reads the names and addresses and inserts the outbox rows; what the mails say is
service/mail/messages.py's.
"""

from __future__ import annotations

from service.mail.messages import Mail, low_balance, spend_limit_reached
from service.storage import mail as mail_sql
from service.storage import spend as spend_sql
from service.storage.billing import Writes
from service.storage.rows import Connection


def queue_warnings(conn: Connection, org_id: str, w: Writes) -> None:
    """The mails of the warnings in `w` (its events are `billing.persist`'s)."""
    for left, threshold, now_iso in w.notices:
        _to_managers(conn, org_id, low_balance(mail_sql.org_name(conn, org_id), left, threshold), now_iso)
    for scope, scope_id, limit, spent, now_iso in w.warnings:
        name = spend_sql.scope_name(conn, scope, scope_id) or scope_id
        _to_managers(conn, org_id, spend_limit_reached(scope, name, limit, spent), now_iso)


def _to_managers(conn: Connection, org_id: str, mail: Mail, now_iso: str) -> None:
    for to in mail_sql.managers(conn, org_id):
        mail_sql.enqueue(conn, org_id, to, mail.kind, mail.subject, mail.text, mail.html, now_iso)
