"""The route table of the OpenAPI document: one `Op` per `/v1` route and method, and the
schema helpers it is written with. service/http/openapi.py applies it to quart-schema's
skeleton (what the table states and why: that module's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.actors.balance.actor import MAX_UC
from service.actors.delivery import EVENT_NAMES
from service.views.run_feed import SOURCES
from service.actors.tickets import MAX_BODY, MAX_SUBJECT, PRIORITIES, STATES, TYPES
from service.catalog.capabilities import ASPECT_RATIOS, CAPABILITIES
from service.catalog.product_types import CATEGORIES
from service.http import responses as R
from service.http.responses import Data
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


def shape_ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


PROGRESS = {"type": "object", "required": ["request_id", "value", "max"], "properties": {
    "request_id": UUID, "value": {"type": "number"}, "max": {"type": "number"},
    "step": {"type": ["string", "null"]}}}


def sse_event(events: dict[str, dict]) -> dict:
    """One server-sent event as tools read it: `{event, id, data}`, `data` being the JSON
    text of the shape its event name documents (`contentMediaType` + `contentSchema`). In
    OpenAPI 3.1 a `text/event-stream` schema describes each event (3.2 names this
    `itemSchema`). Open like every response: an event name not listed here is accepted.
    The string branch is the body read whole, as generated clients (openapi-python-client)
    read a stream's answer."""
    event = {
        "type": "object", "required": ["event", "data"],
        "properties": {"event": {"type": "string", "examples": list(events)}, "id": STR, "data": STR,
                       "retry": {"type": "integer"}},
        "allOf": [{"if": {"properties": {"event": {"const": name}}, "required": ["event"]},
                   "then": {"properties": {"data": {"contentMediaType": "application/json",
                                                    "contentSchema": schema}}}}
                  for name, schema in events.items()],
    }
    return {"description": "Server-sent events.",
            "anyOf": [event, {"type": "string", "description": "The stream's text, read whole."}]}


def stream(description: str, errors: tuple[int, ...], events: dict[str, dict], project_header: bool = False,
           **kw) -> Op:
    """A `text/event-stream` answer: frames `id:`, `event:`, `data:` (one JSON object), and
    comment keep-alives every 15 seconds."""
    return Op(200, sse_event(events), errors, project_header,
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
SPEND_LIMIT = nullable({"type": "string", "pattern": r"^[0-9]{1,9}(\.[0-9]{1,2})?$",
                        "description": "Credits, at most two decimals, \"0\" or more (\"0\" stops all spending); "
                                       "null: no limit (else 400 request.validation_failed)."})


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
            "the current job status object).", (404,),
            {"status": shape_ref("JobStatus"), "progress": PROGRESS, "reset": shape_ref("JobStatus")}),
        ("GET", "/v1/workflows/runs/<run_id>/events"): stream(
            "`run` events (data: the ProductRun) whenever a step or the run changes; closed once the run "
            "is final. Resume with `Last-Event-ID`; too old: one `reset` event (data: the ProductRun).",
            (404,), {"run": shape_ref("ProductRun"), "reset": shape_ref("ProductRun")}),
        ("GET", "/v1/events"): stream(
            "Every job (`status`, `progress`) and run (`run`) change of the resolved project. Opens with a "
            "`feed` event (data: the first page of `GET /v1/runs`, `{items, total, next_cursor}`). Resume "
            "with `Last-Event-ID`; too old: one `reset` event (data: that first page).", (404,),
            {"feed": shape_ref("RunsPage"), "status": shape_ref("JobStatus"), "progress": PROGRESS,
             "run": shape_ref("ProductRun"), "reset": shape_ref("RunsPage")}, True,
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
            body={"name": non_blank(), "slug": SLUG, "description": nullable(STR),
                  "monthly_spend_limit": SPEND_LIMIT}),
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
                  "expires_at": nullable(TS), "spend_limit": SPEND_LIMIT},
            links=_links(("get_key", "update_key", "revoke_key"), "key_id", "$response.body#/data/id"),
            example={"name": "CI deploys", "role_id": ROLE_IDS["member"]}),
        ("PATCH", "/v1/api-keys/<key_id>"): Op(200, Data(R.ApiKey), (404, 422, 503),
                                               body={"name": nullable(non_blank()), "spend_limit": SPEND_LIMIT}),
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
