"""Shapes of what people type that later lands in mails, logs and pages: an invited address
is one plain address (no list, no line break), an organization name has no control
characters (no forged log lines, no header tricks in a mail's subject) and a bounded length."""

from __future__ import annotations

import unicodedata

from service.errors import Unprocessable
from service.mail.addresses import valid_address

INVALID_EMAIL = "email must be one valid email address, like name@example.com."
MAX_ORG_NAME = 200


def has_control(text: str) -> bool:
    """Control, format, separator-line/paragraph or unassigned characters (newlines, tabs, NUL,
    escape, U+2028, bidi overrides)."""
    return any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") for c in text)


def check_email(email: str) -> str:
    """The address, or 422: one address, no spaces, commas, angle brackets or line breaks."""
    if not isinstance(email, str) or not valid_address(email):
        raise Unprocessable(INVALID_EMAIL, {"field": "email"})
    return email


def org_name_problem(name: str, limit: int = MAX_ORG_NAME) -> str | None:
    if has_control(name):
        return "name cannot contain line breaks or control characters."
    if not name.strip() or len(name.strip()) > limit:
        return f"name must be 1 to {limit} characters."
    return None


def check_org_name(name: str, limit: int = MAX_ORG_NAME) -> str:
    problem = org_name_problem(name, limit)
    if problem:
        raise Unprocessable(problem, {"field": "name"})
    return name.strip()
