"""The sessions actor: the one owner of browser sessions and provider sign-in flows.

A session is created at login with a fresh random token (the cookie value); only its digest
is stored, and any session the browser already had is deleted in the same write, so a login
always rotates the cookie. Expiry is on the service clock: a session ends `IDLE` seconds
after its last recorded activity (recorded at most once a minute) or `ABSOLUTE` seconds
after login, whichever comes first. Sessions also end at logout, and inside the transaction
of a member removal or a password change (see `service/storage/sessions.py`).

A sign-in flow with an identity provider lives `FLOW_TTL` seconds and is used once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from service.actors.accounts import credentials
from service.actors.runtime import Actor, on
from service.clock import TOUCH_EVERY, Clock, iso
from service.storage import sessions as sql
from service.storage.accounts import new_id
from service.storage.db import Store

IDLE = 12 * 3600.0        # idle expiry: 12 hours without a request
ABSOLUTE = 7 * 86400.0    # absolute expiry: 7 days after login
FLOW_TTL = 600.0          # a provider sign-in must come back within 10 minutes


@dataclass
class StartSession:
    user_id: str
    org_id: str
    previous_token: str | None = None  # the browser's current session, ended by the rotation
    chosen: bool = True  # False: a person of several organizations who has not picked one yet


@dataclass
class EndSession:
    token: str


@dataclass
class TouchSession:
    session_id: str
    at: float


@dataclass
class SetPassword:
    """A new password for the person: every session of theirs ends, and this browser gets a
    fresh one (for `user_id` in `org_id`)."""
    email: str
    password_hash: str
    user_id: str
    org_id: str
    had_password: bool = True


@dataclass
class RehashPassword:
    email: str
    old_hash: str
    new_hash: str


@dataclass
class BeginFlow:
    provider: str
    next_path: str
    invitation_hash: str | None = None
    link_user_id: str | None = None


@dataclass
class TakeFlow:
    state: str


class SessionsActor(Actor):
    def __init__(self, store: Store, clock: Clock, base_url: str = "") -> None:
        self.store = store
        self.clock = clock
        self.base_url = base_url  # for the links of the credential-change mail
        self.touched: dict[str, float] = {}

    @on(StartSession)
    async def on_StartSession(self, m: StartSession) -> dict[str, Any]:
        now = self.clock.now()
        token = secrets.token_urlsafe(32)
        row = dict(id=new_id(), token_hash=sql.digest(token), user_id=m.user_id, organization_id=m.org_id,
                   created_at=now, last_seen_at=now, expires_at=now + ABSOLUTE, org_chosen=int(m.chosen))

        def tx(conn: Any) -> Any:
            if m.previous_token:
                sql.delete_session(conn, sql.digest(m.previous_token))
            sql.delete_expired(conn, now, IDLE)
            sql.insert_session(conn, row)

        await self.store.write(tx)
        return {"token": token, "session_id": row["id"], "expires_at": row["expires_at"]}

    @on(SetPassword)
    async def on_SetPassword(self, m: SetPassword) -> dict[str, Any]:
        now = self.clock.now()
        token = secrets.token_urlsafe(32)
        row = dict(id=new_id(), token_hash=sql.digest(token), user_id=m.user_id, organization_id=m.org_id,
                   created_at=now, last_seen_at=now, expires_at=now + ABSOLUTE)

        def tx(conn: Any) -> Any:
            credentials.set_password(conn, m.email, m.password_hash, iso(now),
                                     credentials.PASSWORD_CHANGED if m.had_password else credentials.PASSWORD_SET,
                                     self.base_url)
            sql.insert_session(conn, row)

        await self.store.write(tx)
        return {"token": token, "session_id": row["id"], "expires_at": row["expires_at"]}

    @on(RehashPassword)
    async def on_RehashPassword(self, m: RehashPassword) -> None:
        await self.store.write(lambda conn: sql.rehash_password(conn, m.email, m.old_hash, m.new_hash))

    @on(EndSession)
    async def on_EndSession(self, m: EndSession) -> None:
        await self.store.write(lambda conn: sql.delete_session(conn, sql.digest(m.token)))

    @on(TouchSession)
    async def on_TouchSession(self, m: TouchSession) -> None:
        last = self.touched.get(m.session_id)
        if last is not None and m.at - last < TOUCH_EVERY:
            return
        if len(self.touched) > 100_000:  # bound the memory: forget old marks
            self.touched = {k: v for k, v in self.touched.items() if m.at - v < TOUCH_EVERY}
        self.touched[m.session_id] = m.at
        await self.store.write(lambda conn: sql.touch_session(conn, m.session_id, m.at))

    @on(BeginFlow)
    async def on_BeginFlow(self, m: BeginFlow) -> dict[str, Any]:
        now = self.clock.now()
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        row = dict(state_hash=sql.digest(state), provider=m.provider, nonce_hash=sql.digest(nonce),
                   next_path=m.next_path, invitation_hash=m.invitation_hash, link_user_id=m.link_user_id,
                   created_at=now, expires_at=now + FLOW_TTL)
        def tx(conn: Any) -> Any:
            sql.delete_expired_flows(conn, now)  # abandoned sign-ins
            sql.insert_flow(conn, row)

        await self.store.write(tx)
        return {"state": state, "nonce": nonce}

    @on(TakeFlow)
    async def on_TakeFlow(self, m: TakeFlow) -> dict[str, Any] | None:
        now = self.clock.now()
        return await self.store.write(lambda conn: sql.take_flow(conn, sql.digest(m.state), now))
