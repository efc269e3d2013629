"""Sending one message: stdlib smtplib in a worker thread (aiosmtplib does not run under
trio), or, without an SMTP host, a log line.

`send` classifies every failure: `Temporary` (a 4xx answer, a refused or dropped connection,
a timeout, a TLS handshake that failed) is retried later; `Permanent` (a 5xx answer) is not.
Error texts name the server's code and answer, never the login or password.

`deliver` gives one send an overall `DEADLINE`: the socket timeout (`TIMEOUT`) bounds each
operation only, so a server trickling a byte at a time would hold a mail slot (a worker
thread of the outbox's limiter) for ever. At the deadline trio stops waiting and shuts the
conversation's socket down under the thread, which then ends at once and frees its slot.
"""

from __future__ import annotations

import logging
import smtplib
import socket
import ssl
import threading
from dataclasses import dataclass
from email.message import EmailMessage

import trio

log = logging.getLogger("service.mail")

TIMEOUT = 30.0  # seconds for each socket operation of the SMTP conversation
DEADLINE = 60.0  # seconds for one whole send, connect to QUIT; then a temporary failure


class SendFailure(Exception):
    temporary = True


class Temporary(SendFailure):
    temporary = True


class Permanent(SendFailure):
    temporary = False


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int = 587
    security: str = "starttls"  # none | starttls | tls
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None

    def __repr__(self) -> str:  # never show the password
        return f"SmtpConfig(host={self.host!r}, port={self.port}, security={self.security!r})"


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if ca_file:
        ctx.load_verify_locations(ca_file)
    return ctx


def _answer(code: int, text) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return f"SMTP {code}: {' '.join(str(text).split())[:300]}"


def _classify(code: int, text) -> SendFailure:
    cls = Temporary if 400 <= code < 500 else Permanent
    return cls(_answer(code, text))


class Conversation:
    """The sockets of one send, so that trio can cut it off from outside its worker thread.

    Each socket is kept as a duplicate (same connection, own descriptor), taken before its
    connect: shutting it down ends a blocked connect, read or write of the original, TLS or
    not, and only the thread closes it, so a cut never hits a reused descriptor number.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.cut = False
        self.accepted = False  # the server took the message (only QUIT was left)

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        """`socket.create_connection`, each socket registered before its connect."""
        error: OSError | None = None
        for family, kind, proto, _name, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            try:
                with self._lock:
                    if self.cut:
                        raise TimeoutError("cut off at the deadline")
                    self._socks.append(sock.dup())
                sock.settimeout(timeout)
                sock.connect(address)
                if self.cut:
                    raise TimeoutError("cut off at the deadline")
                return sock
            except OSError as e:
                sock.close()
                error = e
                if self.cut:
                    break
        raise error or OSError(f"no address for {host}")

    def cut_off(self) -> None:
        """From the trio thread: end the conversation now."""
        with self._lock:
            self.cut = True
            for sock in self._socks:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """From the worker thread, when the send is over."""
        with self._lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            sock.close()


class _SMTP(smtplib.SMTP):
    def __init__(self, conversation: Conversation, *args, **kwargs) -> None:
        self.conversation = conversation
        super().__init__(*args, **kwargs)

    def _get_socket(self, host, port, timeout):
        return self.conversation.connect(host, port, timeout)


class _SMTP_SSL(smtplib.SMTP_SSL):
    def __init__(self, conversation: Conversation, *args, **kwargs) -> None:
        self.conversation = conversation
        super().__init__(*args, **kwargs)

    def _get_socket(self, host, port, timeout):
        sock = self.conversation.connect(host, port, timeout)
        return self.context.wrap_socket(sock, server_hostname=self._host)  # type: ignore[attr-defined]


async def deliver(config: SmtpConfig, msg: EmailMessage, limiter: trio.CapacityLimiter) -> None:
    """`send` in a worker thread of `limiter`, within DEADLINE seconds. Raises Temporary or
    Permanent. Cancelled (node stop), the thread is cut off as at the deadline."""
    conversation = Conversation()
    try:
        with trio.move_on_after(DEADLINE):
            await trio.to_thread.run_sync(send, config, msg, conversation, limiter=limiter, abandon_on_cancel=True)
            return
    finally:
        conversation.cut_off()  # nothing left to cut once the thread has returned
    if conversation.accepted:
        return  # cut during QUIT: the server has the message, sending it again would duplicate it
    raise Temporary(f"no complete answer from {config.host}:{config.port} within {DEADLINE:g} s")


def send(config: SmtpConfig, msg: EmailMessage, conversation: Conversation | None = None) -> None:
    """Deliver `msg` (blocking: run it in a worker thread, or through `deliver`). Raises
    Temporary or Permanent."""
    conversation = conversation or Conversation()
    client: smtplib.SMTP
    try:
        if config.security == "tls":
            client = _SMTP_SSL(conversation, config.host, config.port, timeout=TIMEOUT,
                               context=tls_context(config.ca_file))
        else:
            client = _SMTP(conversation, config.host, config.port, timeout=TIMEOUT)
        with client:
            if config.security == "starttls":
                client.starttls(context=tls_context(config.ca_file))
            if config.username:
                client.login(config.username, config.password or "")
            refused = client.send_message(msg)
            if refused:  # some recipients refused (we send to one): treat as that answer
                code, text = next(iter(refused.values()))
                raise _classify(code, text)
            conversation.accepted = True
    except SendFailure:
        raise
    except smtplib.SMTPRecipientsRefused as e:
        code, text = next(iter(e.recipients.values()))
        raise _classify(code, text) from None
    except smtplib.SMTPNotSupportedError as e:
        raise Permanent(f"SMTP server does not support this: {e}") from None
    except smtplib.SMTPResponseException as e:
        raise _classify(e.smtp_code, e.smtp_error) from None
    except smtplib.SMTPServerDisconnected:
        raise Temporary("SMTP server closed the connection") from None
    except (ssl.SSLError, ssl.CertificateError) as e:
        raise Temporary(f"TLS with the SMTP server failed: {type(e).__name__}: {e.args[-1] if e.args else ''}") \
            from None
    except ConnectionRefusedError:
        raise Temporary(f"connection refused by {config.host}:{config.port}") from None
    except (socket.timeout, TimeoutError):
        raise Temporary(f"no answer from {config.host}:{config.port} within {TIMEOUT:g} s") from None
    except OSError as e:
        raise Temporary(f"cannot reach {config.host}:{config.port}: {e.strerror or type(e).__name__}") from None
    except smtplib.SMTPException as e:
        raise Temporary(f"SMTP error: {type(e).__name__}") from None
    finally:
        conversation.close()


def log_mail(msg: EmailMessage, link: str | None) -> None:
    """No SMTP host: the mail goes to the log, with its link (the one secret a log may hold,
    so a self-hoster without mail can still finish a sign-up or reset)."""
    log.info("mail (no SMTP host set, not sent) to %s: %s%s", msg["To"], msg["Subject"],
             f" | link: {link}" if link else "")
