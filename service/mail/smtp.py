"""Sending one message: stdlib smtplib in a worker thread (aiosmtplib does not run under
trio), or, without an SMTP host, a log line.

`send` classifies every failure: `Temporary` (a 4xx answer, a refused or dropped connection,
a timeout, a TLS handshake that failed) is retried later; `Permanent` (a 5xx answer) is not.
Error texts name the server's code and answer, never the login or password.
"""

from __future__ import annotations

import logging
import smtplib
import socket
import ssl
from dataclasses import dataclass
from email.message import EmailMessage

log = logging.getLogger("service.mail")

TIMEOUT = 30.0  # seconds for the whole SMTP conversation's socket operations


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


def send(config: SmtpConfig, msg: EmailMessage) -> None:
    """Deliver `msg` (blocking: run it in a worker thread). Raises Temporary or Permanent."""
    client: smtplib.SMTP
    try:
        if config.security == "tls":
            client = smtplib.SMTP_SSL(config.host, config.port, timeout=TIMEOUT,
                                      context=tls_context(config.ca_file))
        else:
            client = smtplib.SMTP(config.host, config.port, timeout=TIMEOUT)
        with client:
            if config.security == "starttls":
                client.starttls(context=tls_context(config.ca_file))
            if config.username:
                client.login(config.username, config.password or "")
            refused = client.send_message(msg)
            if refused:  # some recipients refused (we send to one): treat as that answer
                code, text = next(iter(refused.values()))
                raise _classify(code, text)
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


def log_mail(msg: EmailMessage, link: str | None) -> None:
    """No SMTP host: the mail goes to the log, with its link (the one secret a log may hold,
    so a self-hoster without mail can still finish a sign-up or reset)."""
    log.info("mail (no SMTP host set, not sent) to %s: %s%s", msg["To"], msg["Subject"],
             f" | link: {link}" if link else "")
