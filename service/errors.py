"""The exception tree. `service.http.errors` is the only place that maps these to responses.

    ServiceError
    ├── ApiError(status, code, message, details)   a rejection the spec names; sent as the envelope
    │   ├── BadRequest        400 request.bad_request
    │   ├── NotFound          404 request.not_found (or a domain code such as api_key.not_found)
    │   ├── Conflict          409 request.conflict
    │   ├── Unprocessable     422 request.validation_failed (or a webhook.* code)
    │   ├── InsufficientCredits 402 billing.insufficient_credits
    │   ├── SpendLimitReached 402 billing.spend_limit_reached
    │   ├── Unavailable       503 request.service_unavailable (or billing.not_configured)
    │   ├── RateLimited       429 request.rate_limited (with Retry-After)
    │   └── Forbidden         403 auth.forbidden (the in-endpoint kind, in the envelope)
    ├── ActorGone             an actor past its restart limit, or stopped: 503
    └── AskTimeout            an actor did not answer in time: 503

Layers below HTTP raise these; they never build responses. A body over its size limit is
refused before any layer sees it (werkzeug's RequestEntityTooLarge, mapped to the spec's
413 request.bad_request in service/http/errors.py), so no class here stands for it.
tests/test_small_truths.py holds this tree equal to the classes below.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base of every error the service raises on purpose."""


class ApiError(ServiceError):
    status = 400
    code = "request.bad_request"

    def __init__(
        self,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status


class BadRequest(ApiError):
    status = 400
    code = "request.bad_request"


class NotFound(ApiError):
    status = 404
    code = "request.not_found"

    def __init__(self, message: str = "Not found.", details=None, **kw) -> None:
        super().__init__(message, details, **kw)


class Conflict(ApiError):
    status = 409
    code = "request.conflict"


class Unprocessable(ApiError):
    status = 422
    code = "request.validation_failed"


class InsufficientCredits(ApiError):
    status = 402
    code = "billing.insufficient_credits"


class SpendLimitReached(ApiError):
    """A project's monthly or an API key's spend limit does not cover the estimate."""

    status = 402
    code = "billing.spend_limit_reached"


class Unavailable(ApiError):
    status = 503
    code = "request.service_unavailable"


class RateLimited(ApiError):
    """429: a limit per API key or per organization; `retry_after` whole seconds (header)."""

    status = 429
    code = "request.rate_limited"

    def __init__(self, message: str, retry_after: int, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, {**(details or {}), "retry_after": retry_after})
        self.retry_after = retry_after


class Forbidden(ApiError):
    status = 403
    code = "auth.forbidden"


class ActorGone(ServiceError):
    """The actor stopped or passed its restart limit."""


class AskTimeout(ServiceError):
    """The actor did not answer in time; it may still have acted (messages carry ids)."""
