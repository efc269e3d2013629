"""Account webhook signatures (spec "Account webhooks"): `X-Service-Signature: sha256=<hex>`,
the HMAC-SHA256 of the raw body keyed with the secret's UTF-8 bytes. Job webhooks carry
no signature: re-fetch the job's status with your key instead."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping


def verify_webhook(secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    """Whether an account webhook delivery was signed with `secret` (constant time)."""
    given = next((v for k, v in headers.items() if k.lower() == "x-service-signature"), None)
    if not given:
        return False
    expected = "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(given.encode(), expected.encode())
