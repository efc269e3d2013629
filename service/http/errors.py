"""Every exception -> response mapping of the service, in one place (spec "Errors").

Envelope: {error: {code, message, details?, request_id}}. Two flat shapes: 401/403
authentication failures ({status: false, error}) and 408 timeouts ({error, message}).
A 500 carries a generic message; the traceback goes only to the log. HTML pages refuse with
`PageError`, rendered as a page with its status.
"""

from __future__ import annotations

import logging

from quart import Quart, g, jsonify
from werkzeug.exceptions import HTTPException

from service.errors import ActorGone, ApiError, AskTimeout, RateLimited
from service.http.pages import PageError, error_page, wants_page

log = logging.getLogger("service.http")


class AuthFailure(Exception):
    """401 or 403 with the flat body; the body never says which cause."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class RouteTimeout(Exception):
    def __init__(self, seconds: int) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def error_body(code: str, message: str, request_id: str, details: dict | None = None) -> dict:
    """The envelope's object; also written outside a request context (the hook gate)."""
    err: dict[str, object] = {"code": code, "message": message}
    if details is not None:
        err["details"] = details
    err["request_id"] = request_id
    return {"error": err}


def timeout_body(seconds: float) -> dict:
    """The flat 408 object of a request (or its body) past its time."""
    return {"error": "Request timeout", "message": f"Request took longer than {seconds:g} seconds to process"}


def envelope(status: int, code: str, message: str, details: dict | None = None):
    return jsonify(error_body(code, message, g.get("request_id") or "", details)), status


def validation_failed(errors: list[dict]):
    return envelope(400, "request.validation_failed", "The request failed validation.", {"errors": errors})


INTERNAL = ("request.internal_error", "Something went wrong on our side.")  # a 500's code and message
HTTP_CODES = {
    400: ("request.bad_request", "The request is malformed."),
    404: ("request.not_found", "The requested resource was not found."),
    405: ("request.method_not_allowed", "The method is not allowed for this route."),
    413: ("request.bad_request", "The request body is too large."),
}


def install(app: Quart) -> None:
    @app.errorhandler(PageError)
    async def on_page_error(e: PageError):
        return error_page(e)

    @app.errorhandler(ApiError)
    async def on_api_error(e: ApiError):
        if wants_page() and e.status in (403, 404):  # a dashboard page: the 403 / 404 page
            return error_page(PageError(e.status, "Not allowed" if e.status == 403 else "Not found", e.message))
        response = envelope(e.status, e.code, e.message, e.details)
        if isinstance(e, RateLimited):
            body, status = response if isinstance(response, tuple) else (response, e.status)
            return body, status, {"Retry-After": str(e.retry_after)}
        return response

    @app.errorhandler(AuthFailure)
    async def on_auth(e: AuthFailure):
        return jsonify(status=False, error="Unauthorized" if e.status == 401 else "Forbidden"), e.status

    @app.errorhandler(RouteTimeout)
    async def on_timeout(e: RouteTimeout):
        return jsonify(timeout_body(e.seconds)), 408

    @app.errorhandler(UnicodeDecodeError)
    async def on_bad_encoding(e):
        return envelope(400, "request.bad_request", "The request body is not valid UTF-8.")

    async def on_actor(e):
        log.warning("actor unavailable: %r", e)
        return envelope(503, "request.service_unavailable", "The service is busy; try again shortly.")

    app.register_error_handler(ActorGone, on_actor)
    app.register_error_handler(AskTimeout, on_actor)

    @app.errorhandler(HTTPException)
    async def on_http(e: HTTPException):
        if e.code == 408:
            return await on_timeout(RouteTimeout(120))
        if wants_page() and e.code in (404, 405):
            return error_page(PageError(404, "Page not found", "There is no page at this address."))
        code, message = HTTP_CODES.get(e.code or 500, (f"request.{(e.name or 'error').lower().replace(' ', '_')}",
                                                e.description or "Request failed."))
        resp, status = envelope(e.code or 500, code, message)
        for k, v in e.get_headers():
            if k.lower() == "allow":
                resp.headers[k] = v
        if e.code == 413:  # the unread body stays on the wire: end the connection
            resp.headers["Connection"] = "close"
        return resp, status

    @app.errorhandler(Exception)
    async def on_crash(e: Exception):
        log.exception("internal error (request_id=%s)", g.get("request_id"))
        if wants_page():
            try:
                return error_page(PageError(500, "Something went wrong",
                                            "Something went wrong on our side. Try again in a moment; if it "
                                            f"keeps failing, tell the operator this reference: {g.get('request_id')}."))
            except Exception:  # the page itself failed: the JSON answer below still goes out
                log.exception("error page failed (request_id=%s)", g.get("request_id"))
        return envelope(500, *INTERNAL)
