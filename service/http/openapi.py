"""The OpenAPI 3.1 document of `/v1` (served at `GET /v1/openapi.json`).

quart-schema builds the skeleton from the routes: paths, path parameters, and the request
body and query models that `service.http.schemas.body` / `query` record. This module adds
what the models cannot say, from one table (`operations()`, one entry per `/v1` route and
method; a route without an entry is served bare, marked `x-undocumented`, and fails
tests/test_schemathesis.py::test_routes_match_openapi):

- the responses of every operation: the success status with its shape, a class of
  service/http/responses (the same class checks every real answer in test mode), and
  every error the route can give: 400 (envelope), 401 and 403 (flat `{status: false,
  error}`), 404, 408 (flat timeout body), 409, 413, 422, 402, as the route can answer
  them, and 503 on every operation (any route can answer "busy");
- the rules the server checks after parsing (422, not 400), written as JSON Schema where
  they can be stated exactly, so generated "valid" requests are valid and "invalid" ones
  invalid: non-blank names (Python's whitespace, spelled out), slugs, enums of event names,
  roles, capabilities, aspect ratios, ticket types, top-up limits, int64 query integers.
  Names from the node's live catalog (model ids, resolutions, durations, product slugs)
  are strings with examples, not enums: a client generated on one node must be able to
  name a model added later. Rules that cannot be stated exactly (URLs checked after
  parsing, a model's resolutions, a product's inputs, "in the future") stay in
  descriptions; the schemathesis run accepts their documented 422 (tests/test_schemathesis.py);
- the optional `X-Service-Project` header of project-scoped routes;
- OpenAPI links from create answers to the operations on the created resource.

Response objects are open (`additionalProperties` allowed: the spec's additive changes),
and so are their enumerations: a status, event name or role is a string whose known values
(from their owner: service/machines.py, the catalog, the actors) are listed as `examples`.
Request bodies are closed (`additionalProperties: false`, the server refuses unknown
fields). Routes outside `/v1` (operator API, /files, /checkout, /webhooks/stripe,
/healthz) are hidden from the document.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any


from service.actors.balance import MAX_UC
from service.actors.delivery import EVENT_NAMES
from service.views.run_feed import SOURCES
from service.actors.tickets import MAX_BODY, MAX_SUBJECT, PRIORITIES, STATES, TYPES
from service.catalog.capabilities import ASPECT_RATIOS, CAPABILITIES
from service.catalog.product_types import CATEGORIES
from service.http import responses as R
from service.http.responses import Data
from service.http.responses.document import SCHEMAS, error_response, json_response, shape_schema
from service.http.responses.types import sorted_states
from service.machines import HOLD
from service.money import UC
from service.roles import ROLE_IDS

# -- schema helpers ----------------------------------------------------------------------------
STR = {"type": "string"}
UUID = {"type": "string", "format": "uuid"}
TS = {"type": "string", "format": "date-time"}
HOLD_STATUSES = sorted_states(HOLD)
MAX_THRESHOLD = MAX_UC // UC  # the largest low_balance_threshold, in credits


def nullable(schema: dict) -> dict:
    t = schema.get("type")
    if isinstance(t, str) and "$ref" not in schema and "enum" not in schema and "const" not in schema:
        return {**schema, "type": [t, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


# Python's whitespace (str.isspace), spelled out: the service strips with str.strip(), and a
# pattern's \s means something else in ECMA-262 (no \x1c-\x1f or \x85; \ufeff is in).
WS = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def non_blank(max_chars: int | None = None) -> dict:
    """A string whose stripped text is non-empty (and at most `max_chars` characters)."""
    if max_chars is None:
        return {"type": "string", "pattern": f"[^{WS}]"}
    return {"type": "string", "pattern": f"^[{WS}]*[^{WS}](?:[\\s\\S]{{0,{max_chars - 2}}}[^{WS}])?[{WS}]*$"}


SLUG = {"type": "string", "pattern": r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$",
        "description": "1 to 64 lowercase letters, digits and hyphens; no hyphen at either end."}
INT64 = {"type": "integer", "minimum": -(2 ** 63), "maximum": 2 ** 63 - 1,
         "description": "Query integers outside SQLite's 64-bit range are 400."}
IDEMPOTENCY_KEY = {"type": "string", "pattern": r"^[!-~]{1,255}$"}

# -- component schemas ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    status: int                         # the success status
    schema: Any                         # its body: a response shape (service/http/responses), a
    #                                     JSON Schema dict (event streams), or None (no body)
    errors: tuple[int, ...] = ()        # beyond those derived (401, 403, 408, 400, 413)
    project_header: bool = False        # reads X-Service-Project
    body: dict = field(default_factory=dict)      # property name -> schema (replaces the model's)
    required: tuple[str, ...] | None = None       # body `required`, when it differs from the model's
    body_extra: dict = field(default_factory=dict)  # more body keywords (anyOf, ...)
    query: dict = field(default_factory=dict)     # query parameter name -> schema
    path: dict = field(default_factory=dict)      # path parameter name -> schema
    headers: dict = field(default_factory=dict)   # success response headers
    links: dict = field(default_factory=dict)     # success response links
    encoding: dict = field(default_factory=dict)  # multipart encoding
    example: dict | None = None                   # a request body that succeeds
    path_examples: dict = field(default_factory=dict)  # path parameter name -> an existing value
    media: str = "application/json"               # the success body's media type
    description: str | None = None                # of the success response


def stream(description: str, errors: tuple[int, ...], project_header: bool = False, **kw) -> Op:
    """A `text/event-stream` answer: frames `id:`, `event:`, `data:` (one JSON object), and
    comment keep-alives every 15 seconds."""
    return Op(200, {"type": "string", "description": "Server-sent events."}, errors, project_header,
              media="text/event-stream", description=description,
              headers={"Cache-Control": {"schema": STR, "description": "no-cache"}}, **kw)


def _links(op_ids: tuple[str, ...], param: str, expr: str) -> dict:
    return {f"{oid}": {"operationId": oid, "parameters": {param: expr}} for oid in op_ids}


def known_strings(values, what: str) -> dict:
    """A string naming something of the node's live catalog (a model, a resolution, a product):
    its values today are examples, not an enum, so a client generated on one node can name one
    added later. An unknown one is the route's documented 404 or 422."""
    return {"type": "string", "examples": list(values),
            "description": f"A {what} of this node's catalog (GET /v1/generation/capabilities, "
                           "/v1/workflows/products); unknown: the route's 404 or 422."}


def _submit_body(node) -> dict:
    models = list(node.catalog.models) if node is not None else []
    body = {
        "aspect_ratio": nullable({"enum": list(ASPECT_RATIOS)}),
        "webhook_url": nullable({"type": "string", "description": "Job webhook URL; only https URLs are "
                                 "called (any other string is stored and never called)."}),
        "project_id": nullable(STR),
    }
    if models:
        body["model"] = nullable(known_strings([m.id for m in models], "model id"))
        body["resolution"] = nullable(known_strings(sorted({r for m in models for r in m.resolutions}),
                                                    "resolution"))
        durations = sorted({d for m in models for d in m.durations})
        body["duration"] = nullable({"type": "number", "examples": durations,
                                     "description": "Seconds; one the model lists (else 422)."})
    return body


SUBMIT_ERRORS = (402, 404, 409, 422, 503)
PROJECT_BODY = {"name": non_blank(), "slug": nullable(SLUG), "description": nullable(STR)}


def operations(node=None) -> dict[tuple[str, str], Op]:
    """Every `/v1` operation, keyed by (method, werkzeug rule)."""
    submit = _submit_body(node)
    slug = known_strings(_product_slugs(), "product slug")
    quote = (node.topup_quote if node is not None else None)
    credits = {"type": "integer", "minimum": quote.min_credits if quote else 100,
               "maximum": quote.max_credits if quote else 100000}
    webhook_events = {"type": "array", "items": {"enum": list(EVENT_NAMES)}, "minItems": 1}
    limit = {**INT64, "description": "Clamped to the route's range."}
    offset = {**INT64, "description": "Negative values count as 0."}
    job_links = _links(("request_status", "cancel_request"), "job_id", "$response.body#/request_id")
    run_links = _links(("get_run", "cancel_run"), "run_id", "$response.body#/data/id")
    asset_links = _links(("get_asset", "asset_content", "asset_url"), "asset_id", "$response.body#/data/id")
    return {
        # generation
        ("GET", "/v1/generation/capabilities"): Op(200, Data(list[R.Capability])),
        ("GET", "/v1/generation/models"): Op(200, Data(list[R.Model])),
        ("POST", "/v1/generation/capabilities/<capability>"): Op(
            202, R.SubmitAccepted, SUBMIT_ERRORS, True, body=submit,
            path={"capability": {"type": "string", "enum": [c.id for c in CAPABILITIES]}}, links=job_links,
            path_examples={"capability": "image.generate"},
            example={"prompt": "A red fox in fresh snow", "aspect_ratio": "1:1", "resolution": "1k"}),
        ("POST", "/v1/generation/models/<model>"): Op(
            202, R.SubmitAccepted, SUBMIT_ERRORS, True, body=submit, links=job_links,
            path={"model": known_strings([m.id for m in node.catalog.models] if node is not None else [],
                                         "model id")},
            path_examples={"model": "proc-image"}, example={"prompt": "A lighthouse at dusk"}),
        ("POST", "/v1/generation/estimate"): Op(
            200, Data(R.Estimate), (404, 422, 503), True,
            body={**submit, "capability": nullable({"enum": [c.id for c in CAPABILITIES],
                                                    "description": "Capability id; or give `model` "
                                                                   "(neither: 422)."})},
            example={"capability": "image.generate", "resolution": "2k"}),
        ("GET", "/v1/generation/requests"): Op(200, Data(list[R.JobStatus]), (404,), True,
                                               query={"limit": limit}),
        ("GET", "/v1/generation/requests/<job_id>/status"): Op(200, R.JobStatus, (404,)),
        ("POST", "/v1/generation/requests/<job_id>/cancel"): Op(200, R.JobStatus, (404, 503)),
        ("GET", "/v1/generation/assets"): Op(200, Data(list[R.Asset]), (404,), True, query={"limit": limit}),
        ("GET", "/v1/generation/assets/<asset_id>"): Op(200, Data(R.Asset), (404,)),
        ("GET", "/v1/generation/assets/<asset_id>/content"): Op(
            302, None, (404,), headers={"Location": {"required": True, "description": "Signed URL of the file "
                                                     "(valid 900 s, no key needed).", "schema": STR}}),
        ("GET", "/v1/generation/assets/<asset_id>/url"): Op(
            200, Data(R.AssetUrl), (404,)),
        ("POST", "/v1/generation/uploads"): Op(
            201, Data(R.Asset), (404, 409, 422, 503), True, links=asset_links,
            body={"project_id": {"type": "string", "maxLength": 200}}),
        # products and runs
        ("GET", "/v1/workflows/products"): Op(200, Data(list[R.Product]), query={
            "category": {"enum": list(CATEGORIES)}}),
        ("GET", "/v1/workflows/products/<slug>"): Op(200, Data(R.Product), (404,),
                                                     path={"slug": slug}),
        ("POST", "/v1/workflows/products/<slug>/estimate"): Op(
            200, Data(R.Product), (404, 422), True, path={"slug": slug},
            body={"project_id": nullable(STR)}, path_examples={"slug": "text-to-clip"},
            example={"inputs": {"prompt": "A fox at dawn", "resolution": "480p"}}),
        ("POST", "/v1/workflows/products/<slug>/runs"): Op(
            202, Data(R.ProductRun), SUBMIT_ERRORS, True, links=run_links,
            path={"slug": slug}, body={"project_id": nullable(STR)},
            path_examples={"slug": "text-to-clip"}, example={"inputs": {"prompt": "A fox at dawn"}}),
        ("GET", "/v1/workflows/runs"): Op(200, Data(list[R.ProductRun]), (404,), True,
                                          query={"limit": limit}),
        ("GET", "/v1/workflows/runs/<run_id>"): Op(200, Data(R.ProductRun), (404,)),
        # event streams (docs/streams.md)
        ("GET", "/v1/generation/requests/<job_id>/events"): stream(
            "`status` events (data: the job status object) whenever it changes, `progress` events "
            "(data: `{request_id, value, max, step}`, at most about 4 per second); closed after the final "
            "status. Resume with `Last-Event-ID`; a resume point too old gets one `reset` event (data: "
            "the current job status object).", (404,)),
        ("GET", "/v1/workflows/runs/<run_id>/events"): stream(
            "`run` events (data: the ProductRun) whenever a step or the run changes; closed once the run "
            "is final. Resume with `Last-Event-ID`; too old: one `reset` event (data: the ProductRun).",
            (404,)),
        ("GET", "/v1/events"): stream(
            "Every job (`status`, `progress`) and run (`run`) change of the resolved project. Opens with a "
            "`feed` event (data: the first page of `GET /v1/runs`, `{items, total, next_cursor}`). Resume "
            "with `Last-Event-ID`; too old: one `reset` event (data: that first page).", (404,), True,
            query={"source": {"enum": list(SOURCES)}}),
        ("POST", "/v1/workflows/runs/<run_id>/cancel"): Op(200, Data(R.ProductRun), (404, 503)),
        ("GET", "/v1/runs"): Op(
            200, Data(R.RunsPage),
            (404, 422), True, query={"limit": limit, "source": {"enum": list(SOURCES)}}),
        # projects
        ("GET", "/v1/projects"): Op(200, Data(list[R.Project])),
        ("GET", "/v1/projects/<project_id>"): Op(200, Data(R.Project), (404,)),
        ("POST", "/v1/projects"): Op(
            201, Data(R.Project), (409, 422, 503), body=PROJECT_BODY, required=("name",),
            example={"name": "Spring campaign", "description": "Stills and clips for the launch"},
            links=_links(("get_project", "update_project", "archive_project"), "project_id",
                         "$response.body#/data/id")),
        ("PATCH", "/v1/projects/<project_id>"): Op(
            200, Data(R.Project), (404, 409, 422, 503),
            body={"name": non_blank(), "slug": SLUG, "description": nullable(STR)}),
        ("POST", "/v1/projects/<project_id>/archive"): Op(200, Data(R.Project), (404, 409, 503)),
        # billing
        ("GET", "/v1/billing/balance"): Op(200, Data(R.Balance)),
        ("GET", "/v1/billing/ledger"): Op(
            200, R.LedgerPage, (503,),
            query={"project_id": UUID, "since": TS, "until": TS, "limit": limit, "offset": offset}),
        ("GET", "/v1/billing/holds"): Op(200, Data(list[R.Hold]),
                                         query={"status": {"enum": list(HOLD_STATUSES)}, "limit": limit}),
        ("GET", "/v1/billing/usage"): Op(200, Data(list[R.UsageRow]), query={"since": TS}),
        ("GET", "/v1/billing/settings"): Op(200, Data(R.BillingSettings)),
        ("PUT", "/v1/billing/settings"): Op(
            200, Data(R.BillingSettings), (422, 503),
            body={"low_balance_threshold": {
                "description": "Credits, zero or more with at most two decimal places, as a JSON number "
                               "or a decimal string; null turns the warning off. Out of range, more "
                               "places or a string that is not a number: 422.",
                "anyOf": [{"type": "number", "minimum": 0, "maximum": MAX_THRESHOLD},
                          {"type": "string"}, {"type": "null"}]}},
            example={"low_balance_threshold": "25.00"}),
        ("GET", "/v1/billing/topups/quote"): Op(200, Data(R.TopupQuote)),
        ("GET", "/v1/billing/topups"): Op(200, Data(list[R.Topup]), query={"limit": limit}),
        ("GET", "/v1/billing/topups/<topup_id>"): Op(200, Data(R.Topup), (404,)),
        ("POST", "/v1/billing/topups"): Op(
            201, Data(R.TopupCreated), (422, 503),
            body={"credits": credits},
            links=_links(("get_topup",), "topup_id", "$response.body#/data/topup/id"), example={"credits": 500}),
        # API keys
        ("GET", "/v1/api-keys"): Op(200, Data(list[R.ApiKey])),
        ("GET", "/v1/api-keys/<key_id>"): Op(200, Data(R.ApiKey), (404,)),
        ("POST", "/v1/api-keys"): Op(
            201, Data(R.ApiKeyCreated), (422, 503),
            body={"name": non_blank(), "role_id": nullable({"enum": list(ROLE_IDS.values())}),
                  "expires_at": nullable(TS)},
            links=_links(("get_key", "update_key", "revoke_key"), "key_id", "$response.body#/data/id"),
            example={"name": "CI deploys", "role_id": ROLE_IDS["member"]}),
        ("PATCH", "/v1/api-keys/<key_id>"): Op(200, Data(R.ApiKey), (404, 422, 503),
                                               body={"name": nullable(non_blank())}),
        ("DELETE", "/v1/api-keys/<key_id>"): Op(204, None, (404, 503)),
        # roles
        ("GET", "/v1/roles"): Op(200, Data(list[R.Role]),
                                 links=_links(("get_role", "role_users"), "role_id", "$response.body#/data/0/id")),
        ("GET", "/v1/roles/<role_id>"): Op(200, Data(R.Role), (404,)),
        ("GET", "/v1/roles/<role_id>/users"): Op(200, Data(list[R.RoleUser]), (404,)),
        # account webhooks
        ("GET", "/v1/webhooks"): Op(200, R.WebhookList,
                                    query={"limit": limit, "offset": offset}),
        ("GET", "/v1/webhooks/events"): Op(200, R.EventList),
        ("GET", "/v1/webhooks/<webhook_id>"): Op(200, R.WebhookOne, (404,)),
        ("GET", "/v1/webhooks/<webhook_id>/deliveries"): Op(
            200, R.DeliveryList, (404,), query={"limit": limit}),
        ("POST", "/v1/webhooks"): Op(
            201, R.WebhookCreatedOne, (422, 503),
            body={"events": webhook_events},
            links=_links(("get_webhook", "update_webhook", "delete_webhook", "test_webhook", "list_deliveries"),
                         "webhook_id", "$response.body#/webhook/id"),
            example={"url": "https://hooks.example.com/genservice", "events": ["api_key.created"],
                     "description": "ops"}),
        ("PATCH", "/v1/webhooks/<webhook_id>"): Op(
            200, R.WebhookOne, (404, 422, 503),
            body={"events": nullable(webhook_events)}),
        ("POST", "/v1/webhooks/<webhook_id>/test"): Op(201, R.WebhookTestResult, (404, 503)),
        ("DELETE", "/v1/webhooks/<webhook_id>"): Op(204, None, (404, 503)),
        # support tickets
        ("GET", "/v1/support/tickets"): Op(200, Data(list[R.Ticket]),
                                           query={"limit": limit, "state": {"enum": list(STATES)}}),
        ("GET", "/v1/support/tickets/<ticket_id>"): Op(200, Data(R.TicketWithReplies), (404,)),
        ("POST", "/v1/support/tickets"): Op(
            201, Data(R.TicketWithReplies), (422, 503),
            body={"subject_line": non_blank(MAX_SUBJECT), "body": non_blank(MAX_BODY),
                  "type": {"enum": list(TYPES)}, "priority": {"enum": list(PRIORITIES)}},
            links=_links(("get_ticket", "reply"), "ticket_id", "$response.body#/data/id"),
            example={"subject_line": "Uploads fail", "body": "A PNG upload answers 422.", "type": "bug",
                     "priority": "P3"}),
        ("POST", "/v1/support/tickets/<ticket_id>/replies"): Op(
            201, Data(R.TicketWithReplies), (404, 409, 422, 503), body={"body": non_blank(MAX_BODY)}),
    }


def _product_slugs() -> list[str]:
    from service.catalog.products import list_products

    return [p.slug for p in list_products()]


# -- applying the table to quart-schema's operation objects ----------------------------------------
PROJECT_HEADER = {
    "name": "X-Service-Project", "in": "header", "required": False,
    "description": "Project id or slug; used when the body or query names no project (else the "
                   "organization's default project). Unknown: 404.",
    "schema": {"type": "string"},
}


class DocumentError(Exception):
    """The route table and the app disagree (a route without an entry, a patched field the model lacks)."""


def _clean(schema: dict) -> dict:
    """A parameter schema without pydantic's noise: `anyOf [X, null]` -> X, no title, no null default."""
    schema = {k: v for k, v in schema.items() if k != "title" and not (k == "default" and v is None)}
    any_of = schema.get("anyOf")
    if isinstance(any_of, list):
        rest = [s for s in any_of if s != {"type": "null"}]
        if len(rest) == 1:
            del schema["anyOf"]
            schema = {**rest[0], **schema}
    return schema


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items()
                if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def apply(method: str, rule: str, func, operation: dict, op: Op) -> dict:
    """The operation object for one route and method, completed from `op`."""
    where = f"{method} {rule}"
    operation = copy.deepcopy(operation)
    params = []
    for p in operation.get("parameters", []):
        p = dict(p)
        p["schema"] = _clean(p.get("schema", {}))
        if p["in"] == "query" and p["name"] in op.query:
            p["schema"] = {**op.query[p["name"]], **({"description": p["schema"]["description"]}
                                                      if "description" in p["schema"] else {})}
        if p["in"] == "path" and p["name"] in op.path:
            p["schema"] = op.path[p["name"]]
        if p["in"] == "path" and p["name"] in op.path_examples:
            p["example"] = op.path_examples[p["name"]]
        if p["in"] == "header" and p["name"].lower() == "idempotency-key":
            p["schema"] = IDEMPOTENCY_KEY
        params.append(p)
    names = {(p["in"], p["name"]) for p in params}
    for name in op.query:
        if ("query", name) not in names:
            raise DocumentError(f"{where}: query parameter {name!r} is not in the route's model")
    for name in op.path:
        if ("path", name) not in names:
            raise DocumentError(f"{where}: path parameter {name!r} is not in the rule")
    if op.project_header:
        params.append(dict(PROJECT_HEADER))
    operation["parameters"] = params

    request_body = operation.get("requestBody")
    if request_body is not None:
        (media, content), = request_body["content"].items()
        schema = _strip_titles(content["schema"])
        props = schema.setdefault("properties", {})
        for name, patch in op.body.items():
            if name not in props:
                raise DocumentError(f"{where}: body field {name!r} is not in the route's model")
            keep = {k: v for k, v in props[name].items() if k == "description" or (k == "default" and v is not None)}
            props[name] = {**patch, **keep}
        if op.required is not None:
            schema["required"] = list(op.required)
        schema.update(op.body_extra)
        schema["additionalProperties"] = False
        content["schema"] = schema
        # The server reads a missing body as `{}`: the body is required exactly when `{}` is invalid.
        request_body["required"] = bool(schema.get("required") or schema.get("anyOf"))
        if op.encoding:
            content["encoding"] = op.encoding
        if op.example is not None:
            content["example"] = op.example
    elif op.body or op.example is not None:
        raise DocumentError(f"{where}: body patches or an example for a route without a body model")
    for name in op.path_examples:
        if ("path", name) not in names:
            raise DocumentError(f"{where}: path example for {name!r}, not a path parameter")

    has_input = request_body is not None or any(p["in"] in ("query",) for p in params) or any(
        p["in"] == "header" and p["name"].lower() == "idempotency-key" for p in params)
    permission = getattr(func, "permission", "missing")
    if permission == "missing":
        raise DocumentError(f"{where}: the view is not wrapped in @requires")
    # 503: any route can answer "busy" (an actor's mailbox full, the writer behind)
    statuses = {401, 408, 429, 503, *op.errors}
    if permission is not None:
        statuses.add(403)
    if has_input:
        statuses.add(400)
    if request_body is not None:
        statuses.add(413)

    success = json_response(op.description or "Success.", op.schema, op.headers, op.media)
    if op.links:
        success["links"] = op.links
    responses: dict[str, dict] = {str(op.status): success}
    for status in sorted(statuses):
        responses[str(status)] = error_response(status, envelope_403=(method, rule) == ("POST", "/v1/api-keys"))
    operation["responses"] = responses
    operation["security"] = [{"bearer": []}]
    if permission is not None:
        operation["x-permission"] = permission
    return operation


def components(existing: dict, table: dict[tuple[str, str], Op] | None = None) -> dict:
    """quart-schema's components, the error bodies and every response shape of `table`."""
    shapes: dict[str, dict] = {}
    for op in (operations() if table is None else table).values():
        if op.schema is not None and not isinstance(op.schema, dict):
            shapes.update(shape_schema(op.schema)[1])
    out = dict(existing)
    out["schemas"] = {**existing.get("schemas", {}), **SCHEMAS, **dict(sorted(shapes.items()))}
    return out


PATH_PARAM = re.compile(r"<(?:[^:<>]*:)?([^<>]+)>")


def normalize(rule: str) -> str:
    """A werkzeug rule without converter names: `/v1/x/<conv:name>` -> `/v1/x/<name>`."""
    return PATH_PARAM.sub(r"<\1>", rule)
