"""The mail outbox: the `emails` table sent over SMTP (or to the log without a host), by the
shared outbox dispatcher (service/outbox.py) that also sends job webhooks.

Rows are written by the change that causes them, in its transaction
(service.storage.mail.enqueue); the store wakes the dispatcher after that commit (no polling:
between wakes it sleeps until the earliest retry is due); a row is committed `sending` before the SMTP
conversation starts; the outcome is committed after.

Retries: a temporary failure (4xx answer, connection refused or dropped, timeout, no end
within smtp.DEADLINE, TLS failure) is tried again after BACKOFF[attempt] seconds of service time, at most
MAX_ATTEMPTS times in all (about 14 hours), then recorded `failed`. A permanent failure (5xx)
is recorded `failed` at once, with the server's answer.

Delivery guarantee: **at most once**. A row found `sending` when the node starts may have
reached the server before the stop, so it becomes `unknown` and is never sent again; a lost
confirmation or reset mail is recovered by asking again (a second sign-up with an unconfirmed
address mails a fresh confirmation link), while a duplicate could not be taken back.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import trio

from service.clock import Clock
from service.config import Settings
from service.mail import smtp
from service.mail.messages import build
from service.outbox import Dispatcher
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


class MailSource:
    """The `emails` table and the SMTP sender, for the shared dispatcher."""

    name = "mail"
    crashpoint = "mail_sending"
    concurrency = CONCURRENCY
    watch: tuple[str, str, str | int] = ("emails", "state", "pending")

    def __init__(self, store: Store, clock: Clock, settings: Settings, node_key: NodeKey) -> None:
        self.store = store
        self.clock = clock
        self.node_key = node_key
        self.smtp = smtp_config(settings)
        self.sender = sender_address(settings)
        self._limiter = trio.CapacityLimiter(CONCURRENCY)

    def paused(self) -> bool:
        return False

    async def recover(self, store: Store, now_iso: str) -> str | None:
        unknown = await store.write(lambda conn: sql.recover(conn, now_iso))
        if unknown:
            log.warning("mail: %d mails were being sent at the last stop; recorded unknown, not resent", unknown)
        if self.smtp is None:
            return "GENSERVICE_SMTP_HOST is not set; mails are written to the log, not sent"
        return None

    async def claim(self, store: Store, now: float, now_iso: str, limit: int) -> list[dict]:
        return await store.write(lambda conn: sql.claim_due(conn, now, limit))

    def next_due(self) -> float | None:
        return sql.next_due(self.store)

    async def deliver(self, row: dict) -> smtp.SendFailure | None:
        try:
            link = self.node_key.open(row["link"]) if row["link"] else None
        except SealError:
            return smtp.Permanent("the mail's link was sealed with a node key this node no longer has")
        msg = build(row, link, self.sender, self.clock.now())
        if self.smtp is None:
            smtp.log_mail(msg, link)
            return None
        try:
            # cut off at shutdown: the row stays `sending`, so the next start records it `unknown`
            await smtp.deliver(self.smtp, msg, self._limiter)
        except smtp.SendFailure as e:
            return e
        return None

    def crashed(self, row: dict, error: Exception) -> smtp.SendFailure:
        log.error("mail %s: sender failed", row["id"], exc_info=error)
        return smtp.Permanent(f"internal error: {type(error).__name__}")

    async def record(self, store: Store, row: dict, outcome: smtp.SendFailure | None, now: float,
                     now_iso: str) -> None:
        if outcome is None:
            await store.write(lambda conn: sql.mark_sent(conn, row["id"], now_iso))
        elif outcome.temporary and row["attempts"] < MAX_ATTEMPTS:
            at = now + backoff(row["attempts"])
            log.info("mail %s to %s: attempt %d failed (%s); next try in %d s", row["id"], row["to_address"],
                     row["attempts"], outcome, at - now)
            await store.write(lambda conn: sql.mark_retry(conn, row["id"], at, str(outcome)))
        else:
            error = str(outcome) if not outcome.temporary else f"gave up after {row['attempts']} attempts: {outcome}"
            log.warning("mail %s to %s failed: %s", row["id"], row["to_address"], error)
            await store.write(lambda conn: sql.mark_failed(conn, row["id"], now_iso, error))


class MailOutbox(Dispatcher):
    """The dispatcher of the mail outbox, and what writers of mails need: `seal` for a mail's
    link and `base_url` for building it. The store wakes it after a commit that queued mail."""

    def __init__(self, store: Store, clock: Clock, settings: Settings, node_key: NodeKey) -> None:
        self.mail = MailSource(store, clock, settings, node_key)
        super().__init__(store, clock, self.mail)
        self.settings = settings
        self.node_key = node_key
        self.smtp = self.mail.smtp
        self.sender = self.mail.sender

    @property
    def base_url(self) -> str:
        return self.settings.public_base_url

    def seal(self, link: str) -> str:
        return self.node_key.seal(link)
