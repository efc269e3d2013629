"""Email addresses typed into the sign-up and reset forms: a plain shape check (one `@`, a
dotted host name, no spaces or angle brackets, RFC 5321 lengths). Whether the address really
receives mail is what the confirmation link proves."""

from __future__ import annotations

import re

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@" + _LABEL + r"(?:\." + _LABEL + r")+\Z")
BAD_ADDRESS = "Enter a valid email address, like name@example.com."


def valid_address(text: str) -> bool:
    return len(text) <= 254 and _ADDRESS.match(text) is not None and ".." not in text \
        and not text.startswith(".") and ".@" not in text
