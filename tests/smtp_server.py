"""A real SMTP server for the mail tests: aiosmtpd on a free loopback port, STARTTLS required
with a trustme certificate (the node trusts the test CA through GENSERVICE_SMTP_CA_FILE),
AUTH LOGIN/PLAIN required with a fixed login. It runs in its own thread and event loop
(aiosmtpd's Controller), once per test run (the `smtp` fixture in conftest.py).

Tests share it, so each uses its own recipient addresses: `messages(to)` returns what that
address received (parsed MIME messages), and `refuse(to, answers)` makes the next DATA
commands for that address answer the given SMTP replies ("451 ..." or "550 ...") in turn.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import socket
import ssl
import threading
import weakref
from email.message import EmailMessage
from pathlib import Path

import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

import waiting

USERNAME = "mailer"
PASSWORD = "smtp-pass-0f3c9e7d2b"  # tests check it never reaches a log


def free_port() -> int:
    """aiosmtpd's readiness probe connects to the port it was given, so port 0 cannot work."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Handler:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: dict[str, list[EmailMessage]] = {}
        self.answers: dict[str, list[str]] = {}
        self.refused: dict[str, int] = {}
        self.logins: list[tuple[str, bool]] = []  # (login, over TLS)

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            for rcpt in envelope.rcpt_tos:
                planned = self.answers.get(rcpt.lower())
                if planned:
                    self.refused[rcpt.lower()] = self.refused.get(rcpt.lower(), 0) + 1
                    return planned.pop(0)
            msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
            for rcpt in envelope.rcpt_tos:
                self.received.setdefault(rcpt.lower(), []).append(msg)
        return "250 2.0.0 OK: queued"


def authenticator(handler: Handler):
    def check(server, session, envelope, mechanism, auth_data):
        ok = (isinstance(auth_data, LoginPassword) and auth_data.login == USERNAME.encode()
              and auth_data.password == PASSWORD.encode())
        handler.logins.append((auth_data.login.decode() if isinstance(auth_data, LoginPassword) else "?",
                               session.ssl is not None))
        return AuthResult(success=ok, handled=False)  # handled=False: the server answers 535

    return check


class ClosingController(Controller):
    """aiosmtpd's Controller, whose `stop` first closes every connection still open and
    lets their closes run. aiosmtpd's own stop cancels the sessions and closes its loop at
    once: a TLS connection still open then (or one whose TLS close waits for the client's
    close_notify) keeps its socket unclosed, and the GC warns of it later, in whichever test
    is running (tests/test_smtp_server.py)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sessions: weakref.WeakSet = weakref.WeakSet()

    def factory(self):
        smtp = super().factory()
        self.sessions.add(smtp)
        return smtp

    def stop(self, no_assert: bool = False) -> None:
        if self._thread is not None and self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self._close_sessions(), self.loop).result(timeout=10)
        super().stop(no_assert)

    async def _close_sessions(self) -> None:
        for smtp in list(self.sessions):
            if smtp.transport is not None:
                smtp.transport.abort()  # a TLS one: its socket too, without waiting for the client
        for _ in range(3):  # the closes run as the loop's next callbacks
            await asyncio.sleep(0)


class SmtpServer:
    """`security`: "starttls" (STARTTLS and AUTH required: the shared server), "tls" (implicit
    TLS from the first byte, AUTH required) or "none" (plain text, no AUTH)."""

    def __init__(self, workdir: Path, security: str = "starttls") -> None:
        self.security = security
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = str(workdir / "smtp-ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(tls)
        self.handler = Handler()
        self.port = free_port()
        if security == "starttls":
            kw = dict(tls_context=tls, require_starttls=True, auth_required=True,
                      authenticator=authenticator(self.handler))
        elif security == "tls":
            # aiosmtpd advertises AUTH only after its own STARTTLS unless told the link is safe
            # (AUTH offered, not enforced: aiosmtpd warns on "required" without its STARTTLS;
            # the test checks the node logged in)
            kw = dict(ssl_context=tls, auth_require_tls=False, authenticator=authenticator(self.handler))
        else:
            kw = {}
        self.controller = ClosingController(self.handler, hostname="127.0.0.1", port=self.port, **kw)

    def start(self) -> "SmtpServer":
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    def settings(self, **extra) -> dict:
        """Node settings for this server (STARTTLS, login, the test CA)."""
        login = {"smtp_username": USERNAME, "smtp_password": PASSWORD} if self.security != "none" else {}
        return {"smtp_host": "127.0.0.1", "smtp_port": self.port, "smtp_security": self.security,
                "smtp_ca_file": self.ca_file, "mail_from": "genservice@mail.test", **login, **extra}

    def messages(self, to: str) -> list[EmailMessage]:
        with self.handler.lock:
            return list(self.handler.received.get(to.lower(), []))

    def refuse(self, to: str, answers: list[str]) -> None:
        with self.handler.lock:
            self.handler.answers[to.lower()] = list(answers)

    def refused(self, to: str) -> int:
        with self.handler.lock:
            return self.handler.refused.get(to.lower(), 0)

    async def wait_for(self, to: str, count: int = 1, timeout: float = 20.0) -> list[EmailMessage]:
        """The messages of `to` once there are `count` (real time: the SMTP thread's pace)."""
        def arrived() -> list[EmailMessage]:
            got = self.messages(to)
            return got if len(got) >= count else []

        return await waiting.wait_until(arrived, timeout, 0.02, real_time=True)


async def wait_until(check, timeout: float = 20.0) -> None:
    """A condition of the node's mail, in real time whatever trio clock the test runs on
    (mail goes out in threads)."""
    await waiting.wait_until(check, timeout, 0.02, real_time=True)


def text_part(msg: EmailMessage) -> str:
    return msg.get_body(("plain",)).get_content()


def html_part(msg: EmailMessage) -> str:
    return msg.get_body(("html",)).get_content()


def link_in(msg: EmailMessage, prefix: str) -> str:
    """The link starting with `prefix` in the plain-text part."""
    for word in text_part(msg).split():
        if word.startswith(prefix):
            return word
    raise AssertionError(f"no {prefix} link in: {text_part(msg)!r}")
