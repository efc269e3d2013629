"""The operator console's state: its sign-in sessions and the audit log (one owner for both,
writing through the store), plus the last catalog reload's outcome (memory).

A console session comes from the operator token typed on /operator/login; only its digest
is stored. It ends `IDLE` seconds after its last request (recorded at most once a minute) or
`ABSOLUTE` seconds after sign-in, whichever comes first, at sign-out, and when the
operator token is rotated (the digest is keyed with it). People listed in
GENSERVICE_OPERATOR_EMAILS need no console session: their own login is checked each request.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field

import trio

from service.clock import TOUCH_EVERY, Clock, iso
from service.storage import console as sql
from service.storage.db import Store

IDLE = 3600.0            # an hour without a request
ABSOLUTE = 12 * 3600.0   # twelve hours after sign-in


@dataclass
class ReloadOutcome:
    at: str
    ok: bool
    models: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    who: str = ""


class Console:
    def __init__(self, store: Store, clock: Clock, operator_emails: str | None) -> None:
        self.store = store
        self.clock = clock
        self.emails = {e.strip().lower() for e in (operator_emails or "").split(",") if e.strip()}
        self.last_reload: ReloadOutcome | None = None
        self.reloading = trio.Lock()  # catalog reloads, one at a time (service.reload)

    def is_operator_email(self, email: str) -> bool:
        return email.strip().lower() in self.emails

    async def start_session(self, who: str, address: str, previous_token: str | None, key: str) -> str:
        """A new console session (the token is the cookie's value); the browser's previous
        one, if any, ends in the same write. `key`: the operator token now in force."""
        token = secrets.token_urlsafe(32)
        now = self.clock.now()
        row = {"id": str(uuid.uuid4()), "token_hash": sql.digest(token, key), "who": who, "address": address,
               "created_at": now, "last_seen_at": now, "expires_at": now + ABSOLUTE}

        def write(conn) -> None:
            if previous_token:
                sql.delete_session(conn, sql.digest(previous_token, key))
            sql.insert_session(conn, row)

        await self.store.write(write)
        return token

    def session(self, token: str, key: str) -> dict | None:
        """The live session of `token` under the operator token `key`, or None; its activity
        is recorded at most once a minute."""
        row = sql.session(self.store, sql.digest(token, key))
        now = self.clock.now()
        if row is None or now >= row["expires_at"] or now >= row["last_seen_at"] + IDLE:
            return None
        if now - row["last_seen_at"] >= TOUCH_EVERY:
            self.store.submit(lambda conn: sql.touch_session(conn, row["id"], now))
        return row

    async def end_session(self, token: str, key: str) -> None:
        await self.store.write(lambda conn: sql.delete_session(conn, sql.digest(token, key)))

    async def audit(self, who: str, address: str, action: str, target: str | None = None,
                    detail: str | None = None) -> None:
        at = iso(self.clock.now())
        await self.store.write(lambda conn: sql.insert_audit(conn, at, who, address, action, target, detail))

    async def retry_mail(self, mail_id: str) -> bool:
        now = self.clock.now()
        return await self.store.write(lambda conn: sql.retry_mail(conn, mail_id, now))
