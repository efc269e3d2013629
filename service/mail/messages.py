"""Every mail the node sends: subject, plain text and HTML, and the MIME message built from an
outbox row.

A mail that carries a one-time link (confirmation, password reset, invitation) is queued with
`LINK` where the link goes; the link itself is stored sealed beside the row and put in only
when the message is built for sending, so the outbox never holds a usable link in clear.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate

LINK = "\u27e6link\u27e7"  # where a mail's link goes (replaced at send time)


@dataclass(frozen=True)
class Mail:
    kind: str
    subject: str
    text: str
    html: str


def _mail(kind: str, subject: str, paragraphs: list[str], link_label: str | None = None) -> Mail:
    """Plain text and HTML from the same paragraphs (escaped for HTML); `link_label` adds the
    link as its own paragraph (a button-like anchor in HTML, the bare URL in text)."""
    text = "\n\n".join(paragraphs)
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    if link_label is not None:
        text += f"\n\n{link_label}:\n{LINK}"
        body += f'<p><a href="{LINK}">{html.escape(link_label)}</a></p><p>{LINK}</p>'
    text += "\n\n-- \ngenservice\n"
    return Mail(kind, subject, text, f"<!doctype html><html><body>{body}</body></html>")


def confirmation(org_name: str, days: int) -> Mail:
    return _mail("confirm", "Confirm your email address", [
        f"Thanks for signing up for genservice with the organization \u201c{org_name}\u201d.",
        f"Confirm your email address with the link below (valid {days} days). After that your "
        "organization waits for approval; we mail you again once it is approved.",
        "If you did not sign up, ignore this mail."], "Confirm your email address")


def signup_exists(base_url: str) -> Mail:
    return _mail("signup_exists", "Someone tried to sign up with your email address", [
        "Someone tried to sign up for genservice with this email address, which already has an account. "
        "No new account was made.",
        f"If this was you, log in at {base_url}/login. If you forgot your password, reset it at "
        f"{base_url}/forgot-password.",
        "If it was not you, you can ignore this mail."])


def welcome(org_name: str, base_url: str, credits: str, days: int) -> Mail:
    return _mail("welcome", "Your genservice organization is approved", [
        f"Your organization \u201c{org_name}\u201d has been approved.",
        f"It has {credits} sign-up credits to try the service, valid for {days} days.",
        f"Log in at {base_url}/login to create API keys and start generating."])


def invitation(org_name: str, role: str, days: int) -> Mail:
    return _mail("invitation", f"You are invited to join {org_name} on genservice", [
        f"You are invited to join the organization \u201c{org_name}\u201d on genservice as {role}.",
        f"Accept the invitation with the link below (valid {days} days). A newer invitation "
        "replaces this link."], "Accept the invitation")


def password_reset(minutes: int) -> Mail:
    return _mail("password_reset", "Reset your genservice password", [
        "Someone (probably you) asked to reset the password of this email address.",
        f"Choose a new password with the link below. It works once and for {minutes} minutes; "
        "using it logs you out everywhere else.",
        "If you did not ask for this, ignore this mail: your password stays as it is."],
        "Choose a new password")


def credential_changed(change: str, base_url: str) -> Mail:
    """To the person after any change of how they sign in (`change` says what, in a few
    words): a change they did not make is then noticed, and the mail says what to do."""
    return _mail("credential_changed", "Your genservice sign-in was changed", [
        f"This is a notice that {change} for the genservice account of this email address.",
        f"If this was you, there is nothing to do. If it was not, reset your password at "
        f"{base_url}/forgot-password right away: a reset logs you out everywhere and can revoke your API keys."])


def low_balance(org_name: str, available: str, threshold: str) -> Mail:
    return _mail("low_balance", "Your credit balance is low", [
        f"The available credits of \u201c{org_name}\u201d ({available}) fell below your low-balance "
        f"threshold ({threshold}).",
        "Top up on the dashboard's Billing page to keep your jobs running. This warning comes once per "
        "crossing; saving the low-balance settings arms it again."])


def spend_limit_reached(scope: str, name: str, limit: str, spent: str) -> Mail:
    if scope == "project":
        what, period = f"project \u201c{name}\u201d", "this month"
        where = "Raise it on the project's settings page, or wait for the next month."
    else:
        what, period = f"API key \u201c{name}\u201d", "in total"
        where = "Raise it on the dashboard's API keys page."
    return _mail("spend_limit_reached", f"Spend limit reached: {name}", [
        f"Work submitted for the {what} was refused: it has spent {spent} of its {limit} credit limit "
        f"{period}.", where,
        "This warning comes once per limit per period; setting the limit again arms it again."])


def support_reply(number: int, subject_line: str, author: str, body: str) -> Mail:
    return _mail("support_reply", f"Re: [#{number}] {subject_line}", [
        f"{author} replied to your support ticket #{number} \u201c{subject_line}\u201d:", body,
        "Reply from the dashboard or through the API (POST /v1/support/tickets/{id}/replies)."])


# -- the MIME message ---------------------------------------------------------------------
def one_line(text: str) -> str:
    """A header value on one line: every line break (CR, LF, U+2028, ... anything
    str.splitlines splits on) becomes a space. Subjects carry text people typed (a ticket
    subject, a project or key name); a break there would otherwise fail the mail for good."""
    return " ".join(part.strip() for part in text.splitlines()) if text else text


def build(row: dict, link: str | None, sender: str, sent_at: float) -> EmailMessage:
    """The message of an outbox row: plain text and HTML alternatives, Date (send time),
    Message-ID (from the row id, so a retried mail keeps its id), From, To, Subject."""
    text, body = row["body"], row["html"]
    if link is not None:
        text = text.replace(LINK, link)
        body = body.replace(LINK, html.escape(link, quote=True)) if body else body
    msg = EmailMessage()
    msg["Subject"] = one_line(row["subject"])
    msg["From"] = sender
    msg["To"] = row["to_address"]
    msg["Date"] = formatdate(sent_at, usegmt=True)
    domain = sender.rpartition("@")[2].strip(">") or "genservice.invalid"
    msg["Message-ID"] = f"<{row['id']}@{domain}>"
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(text)
    if body:
        msg.add_alternative(body, subtype="html")
    return msg
