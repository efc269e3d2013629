"""The Idempotency-Key header: its OpenAPI documentation and its syntax check."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from quart import request

from service.errors import BadRequest

DOC = (
    "Optional. A client-chosen key (1 to 255 visible ASCII characters) that makes the request "
    "safe to retry: within 24 hours, repeating the same key with the same request (route, body "
    "and X-Service-Project header) returns the original 202 answer and creates nothing new (no "
    "second job, run or credit hold). The same key with a different request answers 422 "
    "request.validation_failed. Keys are per organization. Without the header every request "
    "creates a new job or run."
)


class IdempotencyHeaders(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    idempotency_key: str | None = Field(default=None, alias="Idempotency-Key", description=DOC)


def idempotency_key() -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not 1 <= len(key) <= 255 or not all(33 <= ord(ch) <= 126 for ch in key):
        raise BadRequest("Idempotency-Key must be 1 to 255 visible ASCII characters.",
                         {"header": "Idempotency-Key"})
    return key


PREFER_DOC = (
    "Optional. `wait=N` (RFC 7240): hold the answer until the job is final or N seconds have "
    "passed (at most 60; `wait` alone: 60). Final in time: 200 with the job's status object; "
    "else the 202. `Preference-Applied: wait=N` says the node waited; without it (over an event "
    "stream limit: a wait counts as a stream) the 202 came at once. A `wait` value that is not a "
    "whole number is a 400; other preferences are ignored."
)


class SubmitHeaders(IdempotencyHeaders):
    """A submit's optional headers: Idempotency-Key and Prefer (service/http/wait.py)."""

    prefer: str | None = Field(default=None, alias="Prefer", description=PREFER_DOC)
