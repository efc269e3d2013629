"""The mail dispatcher: sends the `emails` outbox over SMTP (or to the log without a host).

Shaped like the job-webhook dispatcher (service/actors/job_webhooks.py): rows are written by
the change that causes them, in its transaction (service.storage.mail.enqueue); the write
wakes this task (no polling: between wakes it sleeps until the earliest retry is due); a row
is committed `sending` before the SMTP conversation starts; the outcome is committed after.

Retries: a temporary failure (4xx answer, connection refused or dropped, timeout, TLS
failure) is tried again after BACKOFF[attempt] seconds of service time, at most
MAX_ATTEMPTS times in all (about 14 hours), then recorded `failed`. A permanent failure (5xx)
is recorded `failed` at once, with the server's answer.

Delivery guarantee: **at most once**. A row found `sending` when the node starts may have
reached the server before the stop, so it becomes `unknown` and is never sent again; a lost
confirmation or reset mail is recovered by asking again (a second sign-up with an unconfirmed
address mails a fresh confirmation link), while a duplicate could not be taken back.
"""

from __future__ import annotations

import logging
import math
from urllib.parse import urlsplit

import trio

from service.clock import Clock
from service.config import Settings
from service.crash import crashpoint
from service.mail import smtp
from service.mail.messages import build
from service.sealing import NodeKey, SealError
from service.storage import mail as sql
from service.storage.db import Store

log = logging.getLogger("service.mail")

BACKOFF = (60, 300, 900, 1800, 3600, 7200, 14400, 21600)  # seconds before attempt 2, 3, ...
MAX_ATTEMPTS = len(BACKOFF) + 1
CONCURRENCY = 4  # SMTP conversations at once (worker threads)


def smtp_config(settings: Settings) -> smtp.SmtpConfig | None:
    if not settings.smtp_host:
        return None
    password = settings.smtp_password.get_secret_value() if settings.smtp_password else None
    return smtp.SmtpConfig(settings.smtp_host, settings.smtp_port, settings.smtp_security,
                           settings.smtp_username, password, settings.smtp_ca_file)


def sender_address(settings: Settings) -> str:
    """GENSERVICE_MAIL_FROM, else genservice@ the base URL's host name (GENSERVICE_HOST unless
    a base URL names the public one)."""
    return settings.mail_from or f"genservice@{urlsplit(settings.public_base_url).hostname or settings.host}"


def backoff(attempts: int) -> float:
    """Seconds to wait after the `attempts`-th attempt failed for a temporary reason."""
    return float(BACKOFF[min(attempts, len(BACKOFF)) - 1])


class MailOutbox:
    def __init__(self, store: Store, clock: Clock, settings: Settings, node_key: NodeKey) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.node_key = node_key
        self.smtp = smtp_config(settings)
        self.sender = sender_address(settings)
        self._wake = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._limiter = trio.CapacityLimiter(CONCURRENCY)
        self._inflight: set[str] = set()
        self.sent = 0

    # -- what writers use ---------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.settings.public_base_url

    def seal(self, link: str) -> str:
        return self.node_key.seal(link)

    def wake(self) -> None:
        """Safe from any thread (the writer may commit in a worker thread)."""
        if self._token is not None:
            try:
                self._token.run_sync_soon(self._set)
            except trio.RunFinishedError:
                pass

    def _set(self) -> None:
        self._wake.set()

    # -- the dispatcher -----------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        sql.on_enqueue(self.store.conn, self.wake)
        unwatch = self.clock.watch(self.wake)  # the test clock moved: retries may be due
        try:
            now_iso = self.clock.iso_now()
            unknown = await self.store.write(lambda c: sql.recover(c, now_iso))
            if unknown:
                log.warning("mail: %d mails were being sent at the last stop; recorded unknown, not resent",
                            unknown)
            if self.smtp is None:
                log.info("mail: GENSERVICE_SMTP_HOST is not set; mails are written to the log, not sent")
            task_status.started()
            async with trio.open_nursery() as nursery:
                await self._loop(nursery)
        finally:
            unwatch()
            sql.on_enqueue(self.store.conn, None)

    async def _loop(self, nursery: trio.Nursery) -> None:
        while True:
            self._wake = trio.Event()
            free = CONCURRENCY - len(self._inflight)
            rows: list[dict] = []
            if free > 0:
                now = self.clock.now()
                rows = await self.store.write(lambda c: sql.claim_due(c, now, free))
            if rows:
                crashpoint("mail_sending")  # rows committed `sending`, nothing said to the server yet
            for row in rows:
                self._inflight.add(row["id"])
                nursery.start_soon(self._send, row)
            if rows and len(rows) == free:
                continue  # maybe more due: take them as slots free up (each send wakes us)
            # with every slot busy, only the end of a send (which wakes us) can start another
            due = sql.next_due(self.store) if len(self._inflight) < CONCURRENCY else None
            deadline = math.inf if due is None else self.clock.trio_time(due)
            with trio.move_on_at(deadline):
                await self._wake.wait()

    async def _send(self, row: dict) -> None:
        try:
            outcome = await self._attempt(row)
            now = self.clock.now()
            iso_now = self.clock.iso_now()
            if outcome is None:
                await self.store.write(lambda c: sql.mark_sent(c, row["id"], iso_now))
                self.sent += 1
            elif outcome.temporary and row["attempts"] < MAX_ATTEMPTS:
                at = now + backoff(row["attempts"])
                log.info("mail %s to %s: attempt %d failed (%s); next try in %d s", row["id"], row["to_address"],
                         row["attempts"], outcome, at - now)
                await self.store.write(lambda c: sql.mark_retry(c, row["id"], at, str(outcome)))
            else:
                error = str(outcome) if not outcome.temporary else \
                    f"gave up after {row['attempts']} attempts: {outcome}"
                log.warning("mail %s to %s failed: %s", row["id"], row["to_address"], error)
                await self.store.write(lambda c: sql.mark_failed(c, row["id"], iso_now, error))
        finally:
            self._inflight.discard(row["id"])
            self._wake.set()

    async def _attempt(self, row: dict) -> smtp.SendFailure | None:
        try:
            link = self.node_key.open(row["link"]) if row["link"] else None
        except SealError:
            return smtp.Permanent("the mail's link was sealed with a node key this node no longer has")
        msg = build(row, link, self.sender, self.clock.now())
        if self.smtp is None:
            smtp.log_mail(msg, link)
            return None
        try:
            # abandoned at shutdown: the row stays `sending`, so the next start records it `unknown`
            await trio.to_thread.run_sync(smtp.send, self.smtp, msg, limiter=self._limiter, abandon_on_cancel=True)
        except smtp.SendFailure as e:
            return e
        except Exception as e:  # noqa: BLE001 - a bug here must not stop the dispatcher
            log.exception("mail %s: sender failed", row["id"])
            return smtp.Permanent(f"internal error: {type(e).__name__}")
        return None
