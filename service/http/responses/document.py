"""The response side of the OpenAPI document: the error bodies, the response objects
(success shape, `X-Process-Time`, error texts), and the JSON Schema of a response shape
made from its class (service/http/openapi.py puts them together)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, get_args, get_origin

from pydantic import TypeAdapter
from typing_extensions import is_typeddict

from . import Data

STR = {"type": "string"}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


# -- component schemas -------------------------------------------------------------------------
# The error bodies (service/http/errors.py); every success shape is a class of
# service/http/responses, turned into components by `shape_schema`.
SCHEMAS: dict[str, dict] = {
    "Error": {
        "type": "object", "required": ["error"],
        "description": "The error envelope (spec \"Errors\").",
        "properties": {"error": {
            "type": "object", "required": ["code", "message", "request_id"],
            "properties": {
                "code": {"type": "string", "pattern": r"^[a-z_]+\.[a-z_]+$"},
                "message": STR,
                "details": {"type": "object"},
                "request_id": STR,
            },
        }},
    },
    "Unauthorized": {
        "type": "object", "required": ["status", "error"], "additionalProperties": False,
        "description": "Flat authentication failure (spec \"Authentication\", Failures); never says why.",
        "properties": {"status": {"const": False}, "error": {"const": "Unauthorized"}},
    },
    "Forbidden": {
        "type": "object", "required": ["status", "error"], "additionalProperties": False,
        "description": "Flat permission failure: the key's role lacks the route's permission.",
        "properties": {"status": {"const": False}, "error": {"const": "Forbidden"}},
    },
    "Timeout": {
        "type": "object", "required": ["error", "message"], "additionalProperties": False,
        "description": "Flat route time-limit body (120 s for uploads, 10 s for most routes).",
        "properties": {"error": {"const": "Request timeout"},
                       "message": {"type": "string",
                                   "pattern": "^Request took longer than [0-9]+ seconds to process$"}},
    },
}
REF = "#/components/schemas/{model}"


def _tidy(schema: Any) -> Any:
    """pydantic's schema without its noise: no titles, no `default: null` (a field that is
    sometimes absent is simply not required)."""
    if isinstance(schema, dict):
        return {k: _tidy(v) for k, v in schema.items()
                if not (k == "title" and isinstance(v, str)) and not (k == "default" and v is None)}
    if isinstance(schema, list):
        return [_tidy(v) for v in schema]
    return schema


@lru_cache(maxsize=None)
def shape_schema(shape: Any) -> tuple[dict, dict]:
    """(schema, component schemas it refers to) of a response shape: a class of
    service/http/responses, `list[...]` of one, or `Data(...)` around either."""
    if get_origin(shape) is Data:
        inner, defs = shape_schema(get_args(shape)[0])
        return {"type": "object", "properties": {"data": inner}, "required": ["data"]}, defs
    schema = TypeAdapter(shape).json_schema(ref_template=REF)
    defs = {name: _tidy(d) for name, d in schema.pop("$defs", {}).items()}
    if is_typeddict(shape):
        defs[shape.__name__] = _tidy(schema)
        return {"$ref": REF.format(model=shape.__name__)}, defs
    return _tidy(schema), defs


# -- responses -----------------------------------------------------------------------------------
PROCESS_TIME = {
    "description": "Server processing time in milliseconds (on every response).",
    "required": True,
    "schema": {"type": "string", "pattern": r"^[0-9]+\.[0-9]{2}$"},
}
ERROR_TEXT = {
    400: "Malformed request (request.bad_request) or a body that does not match the schema "
         "(request.validation_failed, with details.errors[] = {message, key, source}).",
    401: "Missing, unknown, revoked, paused or expired key (flat body).",
    402: "billing.insufficient_credits: available credits do not cover the price (details required, "
         "available); or billing.spend_limit_reached: the API key's or the project's spend limit does not "
         "(details scope, limit, spent, required); nothing created or charged.",
    403: "The key's role lacks the route's permission (flat body).",
    404: "Not found in the organization (another organization's ids answer the same), or unknown project.",
    408: "The route's time limit was exceeded (flat timeout body).",
    409: "request.conflict: archived project, slug taken, default project, closed ticket, expired top-up.",
    413: "request.bad_request: the body is too large (1 MiB; 51 MiB for uploads).",
    422: "A well-formed request that breaks a rule (request.validation_failed or a domain code).",
    429: "request.rate_limited: too many requests for this key, or (submits) too many jobs in progress for "
         "the organization; details.retry_after and the Retry-After header say when to retry.",
    503: "request.service_unavailable (model, product, payment provider or a busy service) or "
         "billing.not_configured.",
}
ERROR_SCHEMA = {401: "Unauthorized", 403: "Forbidden", 408: "Timeout"}


def json_response(description: str, schema: Any, headers: dict | None = None,
                  media: str = "application/json") -> dict:
    """`schema`: a JSON Schema dict, a response shape (see `shape_schema`), or None (no body)."""
    out: dict[str, Any] = {"description": description,
                           "headers": {"X-Process-Time": PROCESS_TIME, **(headers or {})}}
    if schema is not None and not isinstance(schema, dict):
        schema = shape_schema(schema)[0]
    if schema is not None:
        out["content"] = {media: {"schema": schema}}
    return out


def error_response(status: int, *, envelope_403: bool = False) -> dict:
    if status == 403 and envelope_403:
        schema = {"oneOf": [ref("Forbidden"), ref("Error")]}
        text = ERROR_TEXT[403] + " Also auth.forbidden (envelope): binding a role broader than the caller's."
        return json_response(text, schema)
    return json_response(ERROR_TEXT[status], ref(ERROR_SCHEMA.get(status, "Error")))


