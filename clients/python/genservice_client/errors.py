"""Every error answer of a node as a typed exception carrying the spec's `code`, `message`,
`details` and `request_id` (spec "Errors"); the flat 401/403/408 bodies included."""

from __future__ import annotations

import json
import re

import httpx

# Retry-After in seconds, ASCII digits only: str.isdigit() takes '²' (float() then raises)
# and float() reads other scripts' digits ('١'). An HTTP date is not used (None).
SECONDS = re.compile(r"[0-9]{1,9}(\.[0-9]{1,3})?")


class GenserviceError(Exception):
    """An error answer of the node (or an answer no node gives: `response.not_json`,
    `response.too_large`)."""

    def __init__(self, status: int, code: str, message: str, details: dict | None = None,
                 request_id: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details or {}
        self.request_id, self.retry_after = request_id, retry_after


class BadRequest(GenserviceError): ...        # 400
class AuthenticationError(GenserviceError): ...  # 401
class InsufficientCredits(GenserviceError): ...  # 402
class PermissionDenied(GenserviceError): ...  # 403
class NotFound(GenserviceError): ...          # 404
class Conflict(GenserviceError): ...          # 409
class Unprocessable(GenserviceError): ...     # 422
class RateLimited(GenserviceError): ...       # 429
class ServerError(GenserviceError): ...       # 5xx, 408
class JobFailed(GenserviceError):
    """A job that ended failed, nsfw or canceled; `job` is its final status (a JobStatus),
    `code` `job.<status>`, `message` the job's error."""

    def __init__(self, job) -> None:
        super().__init__(200, f"job.{job.status}", job.error or f"The job ended {job.status}.",
                         {"job": job.model_dump(mode="json")}, job.request_id)
        self.job = job


BY_STATUS: dict[int, type[GenserviceError]] = {400: BadRequest, 401: AuthenticationError, 402: InsufficientCredits,
                                               403: PermissionDenied, 404: NotFound, 409: Conflict,
                                               413: BadRequest, 422: Unprocessable, 429: RateLimited}


def from_response(r: httpx.Response, content: bytes | None = None) -> GenserviceError:
    """`r`'s error; `content` is its body when the caller read it (to a bound) itself."""
    try:
        body = r.json() if content is None else json.loads(content)
    except ValueError:
        body = {}
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        code, message = err.get("code", "request.error"), err.get("message", r.reason_phrase)
        details, rid = err.get("details"), err.get("request_id")
    else:  # the flat shapes: {status: false, error: "Unauthorized"} and {error, message} (408)
        code = {401: "auth.unauthorized", 403: "auth.forbidden", 408: "request.timeout"}.get(r.status_code,
                                                                                         "request.error")
        message = (body.get("message") or err) if isinstance(body, dict) else None
        details, rid = None, None
    retry = r.headers.get("Retry-After")
    cls = BY_STATUS.get(r.status_code, ServerError if r.status_code >= 500 or r.status_code == 408 else GenserviceError)
    return cls(r.status_code, code, message or r.reason_phrase, details, rid,
               float(retry) if retry and SECONDS.fullmatch(retry) else None)
