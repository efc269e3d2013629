"""The route table of the OpenAPI document: one `Op` per `/v1` route and method, and the
schema helpers it is written with. service/http/openapi.py applies it to quart-schema's
skeleton (what the table states and why: that module's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.catalog.capabilities import CAPABILITIES
from service.http.schemas import STR, UUID, nullable
from service.roles import ROLE_IDS
from service.views.shapes import JobStatus

# -- schema helpers ----------------------------------------------------------------------------
IDEMPOTENCY_KEY = {"type": "string", "pattern": r"^[!-~]{1,255}$"}


# -- the table's entries -------------------------------------------------------------------------
class _Route:
    def __repr__(self) -> str:
        return "ROUTE"


ROUTE = _Route()  # the shape is the route function's return annotation


@dataclass(frozen=True)
class Op:
    status: int                         # the success status
    schema: Any                         # its body: ROUTE (the shape the route function returns,
    #                                     `-> Data[Project]`, held by mypy), a response shape of
    #                                     service/http/responses, a JSON Schema dict (event
    #                                     streams), or None (no body)
    errors: tuple[int, ...] = ()        # beyond those derived (401, 403, 408, 400, 413)
    project_header: bool = False        # reads X-Service-Project
    # body property name -> schema from the node's live catalog (model ids, resolutions,
    # durations, top-up limits); every other body rule is stated by the body class
    # (service/http/schemas.py, `documented`)
    live_body: dict = field(default_factory=dict)
    path: dict = field(default_factory=dict)      # path parameter name -> schema
    headers: dict = field(default_factory=dict)   # success response headers
    links: dict = field(default_factory=dict)     # success response links
    encoding: dict = field(default_factory=dict)  # multipart encoding
    example: dict | None = None                   # a request body that succeeds
    path_examples: dict = field(default_factory=dict)  # path parameter name -> an existing value
    media: str = "application/json"               # the success body's media type
    description: str | None = None                # of the success response
    # other success answers: status -> (description, shape, headers); a submit's 200 after a wait
    also: dict = field(default_factory=dict)


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
    """The submit body's catalog names: examples of this node's models, resolutions, durations."""
    models = list(node.catalog.models) if node is not None else []
    if not models:
        return {}
    durations = sorted({d for m in models for d in m.durations})
    return {
        "model": nullable(known_strings([m.id for m in models], "model id")),
        "resolution": nullable(known_strings(sorted({r for m in models for r in m.resolutions}), "resolution")),
        "duration": nullable({"type": "number", "examples": durations,
                              "description": "Seconds; one the model lists (else 422)."}),
    }


SUBMIT_ERRORS = (402, 404, 409, 422, 503)
WAITED = {"Preference-Applied": {"schema": {"type": "string", "pattern": "^wait=[0-9]+$"},
                                 "description": "Present when the node waited for the job (Prefer: wait)."}}


def _submit_also() -> dict:
    """A submit's other answer: the final status after `Prefer: wait` (service/http/wait.py)."""
    return {200: ("The job ended within the `Prefer: wait` time: its final status object.", JobStatus, WAITED)}


def operations(node=None) -> dict[tuple[str, str], Op]:
    """Every `/v1` operation, keyed by (method, werkzeug rule)."""
    submit = _submit_body(node)
    slug = known_strings(_product_slugs(), "product slug")
    quote = (node.topup_quote if node is not None else None)
    credits = {"type": "integer", "minimum": quote.min_credits if quote else 100,
               "maximum": quote.max_credits if quote else 100000}
    job_links = _links(("request_status", "cancel_request"), "job_id", "$response.body#/request_id")
    run_links = _links(("get_run", "cancel_run"), "run_id", "$response.body#/data/id")
    asset_links = _links(("get_asset", "asset_content", "asset_url"), "asset_id", "$response.body#/data/id")
    return {
        # generation
        ("GET", "/v1/generation/capabilities"): Op(200, ROUTE),
        ("GET", "/v1/generation/models"): Op(200, ROUTE),
        ("POST", "/v1/generation/capabilities/<capability>"): Op(
            202, ROUTE, SUBMIT_ERRORS, True, live_body=submit, headers=WAITED, also=_submit_also(),
            path={"capability": {"type": "string", "enum": [c.id for c in CAPABILITIES]}}, links=job_links,
            path_examples={"capability": "image.generate"},
            example={"prompt": "A red fox in fresh snow", "aspect_ratio": "1:1", "resolution": "1k"}),
        ("POST", "/v1/generation/models/<model>"): Op(
            202, ROUTE, SUBMIT_ERRORS, True, live_body=submit, links=job_links, headers=WAITED, also=_submit_also(),
            path={"model": known_strings([m.id for m in node.catalog.models] if node is not None else [],
                                         "model id")},
            path_examples={"model": "proc-image"}, example={"prompt": "A lighthouse at dusk"}),
        ("POST", "/v1/generation/estimate"): Op(
            200, ROUTE, (404, 422, 503), True, live_body=submit,
            example={"capability": "image.generate", "resolution": "2k"}),
        ("GET", "/v1/generation/requests"): Op(200, ROUTE, (404,), True,),
        ("GET", "/v1/generation/requests/<job_id>/status"): Op(200, ROUTE, (404,)),
        ("POST", "/v1/generation/requests/<job_id>/cancel"): Op(200, ROUTE, (404, 503)),
        ("GET", "/v1/generation/assets"): Op(200, ROUTE, (404,), True),
        ("GET", "/v1/generation/assets/<asset_id>"): Op(200, ROUTE, (404,)),
        ("GET", "/v1/generation/assets/<asset_id>/content"): Op(
            302, None, (404,), headers={"Location": {"required": True, "description": "Signed URL of the file "
                                                     "(valid 900 s, no key needed).", "schema": STR}}),
        ("GET", "/v1/generation/assets/<asset_id>/url"): Op(
            200, ROUTE, (404,)),
        ("POST", "/v1/generation/uploads"): Op(
            201, ROUTE, (404, 409, 422, 503), True, links=asset_links),
        # products and runs
        ("GET", "/v1/workflows/products"): Op(200, ROUTE),
        ("GET", "/v1/workflows/products/<slug>"): Op(200, ROUTE, (404,), path={"slug": slug}),
        ("POST", "/v1/workflows/products/<slug>/estimate"): Op(
            200, ROUTE, (404, 422), True, path={"slug": slug},
            path_examples={"slug": "text-to-clip"},
            example={"inputs": {"prompt": "A fox at dawn", "resolution": "480p"}}),
        ("POST", "/v1/workflows/products/<slug>/runs"): Op(
            202, ROUTE, SUBMIT_ERRORS, True, links=run_links,
            path={"slug": slug},
            path_examples={"slug": "text-to-clip"}, example={"inputs": {"prompt": "A fox at dawn"}}),
        ("GET", "/v1/workflows/runs"): Op(200, ROUTE, (404,), True,),
        ("GET", "/v1/workflows/runs/<run_id>"): Op(200, ROUTE, (404,)),
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
             "run": shape_ref("ProductRun"), "reset": shape_ref("RunsPage")}, True),
        ("POST", "/v1/workflows/runs/<run_id>/cancel"): Op(200, ROUTE, (404, 503)),
        ("GET", "/v1/runs"): Op(
            200, ROUTE,
            (404, 422), True),
        # projects
        ("GET", "/v1/projects"): Op(200, ROUTE),
        ("GET", "/v1/projects/<project_id>"): Op(200, ROUTE, (404,)),
        ("POST", "/v1/projects"): Op(
            201, ROUTE, (409, 422, 503),
            example={"name": "Spring campaign", "description": "Stills and clips for the launch"},
            links=_links(("get_project", "update_project", "archive_project"), "project_id",
                         "$response.body#/data/id")),
        ("PATCH", "/v1/projects/<project_id>"): Op(
            200, ROUTE, (404, 409, 422, 503)),
        ("POST", "/v1/projects/<project_id>/archive"): Op(200, ROUTE, (404, 409, 503)),
        # billing
        ("GET", "/v1/billing/balance"): Op(200, ROUTE),
        ("GET", "/v1/billing/ledger"): Op(200, ROUTE, (503,)),
        ("GET", "/v1/billing/holds"): Op(200, ROUTE),
        ("GET", "/v1/billing/usage"): Op(200, ROUTE),
        ("GET", "/v1/billing/settings"): Op(200, ROUTE),
        ("PUT", "/v1/billing/settings"): Op(
            200, ROUTE, (422, 503), example={"low_balance_threshold": "25.00"}),
        ("GET", "/v1/billing/topups/quote"): Op(200, ROUTE),
        ("GET", "/v1/billing/topups"): Op(200, ROUTE),
        ("GET", "/v1/billing/topups/<topup_id>"): Op(200, ROUTE, (404,)),
        ("POST", "/v1/billing/topups"): Op(
            201, ROUTE, (422, 503),
            live_body={"credits": credits},
            links=_links(("get_topup",), "topup_id", "$response.body#/data/topup/id"), example={"credits": 500}),
        # API keys
        ("GET", "/v1/api-keys"): Op(200, ROUTE),
        ("GET", "/v1/api-keys/<key_id>"): Op(200, ROUTE, (404,)),
        ("POST", "/v1/api-keys"): Op(
            201, ROUTE, (422, 503),
            links=_links(("get_key", "update_key", "revoke_key"), "key_id", "$response.body#/data/id"),
            example={"name": "CI deploys", "role_id": ROLE_IDS["member"]}),
        ("PATCH", "/v1/api-keys/<key_id>"): Op(200, ROUTE, (404, 422, 503)),
        ("DELETE", "/v1/api-keys/<key_id>"): Op(204, None, (404, 503)),
        # roles
        ("GET", "/v1/roles"): Op(200, ROUTE,
                                 links=_links(("get_role", "role_users"), "role_id", "$response.body#/data/0/id")),
        ("GET", "/v1/roles/<role_id>"): Op(200, ROUTE, (404,)),
        ("GET", "/v1/roles/<role_id>/users"): Op(200, ROUTE, (404,)),
        # account webhooks
        ("GET", "/v1/webhooks"): Op(200, ROUTE),
        ("GET", "/v1/webhooks/events"): Op(200, ROUTE),
        ("GET", "/v1/webhooks/<webhook_id>"): Op(200, ROUTE, (404,)),
        ("GET", "/v1/webhooks/<webhook_id>/deliveries"): Op(
            200, ROUTE, (404,)),
        ("POST", "/v1/webhooks"): Op(
            201, ROUTE, (422, 503),
            links=_links(("get_webhook", "update_webhook", "delete_webhook", "test_webhook", "list_deliveries"),
                         "webhook_id", "$response.body#/webhook/id"),
            example={"url": "https://hooks.example.com/genservice", "events": ["api_key.created"],
                     "description": "ops"}),
        ("PATCH", "/v1/webhooks/<webhook_id>"): Op(
            200, ROUTE, (404, 422, 503)),
        ("POST", "/v1/webhooks/<webhook_id>/test"): Op(201, ROUTE, (404, 503)),
        ("DELETE", "/v1/webhooks/<webhook_id>"): Op(204, None, (404, 503)),
        # support tickets
        ("GET", "/v1/support/tickets"): Op(200, ROUTE),
        ("GET", "/v1/support/tickets/<ticket_id>"): Op(200, ROUTE, (404,)),
        ("POST", "/v1/support/tickets"): Op(
            201, ROUTE, (422, 503),
            links=_links(("get_ticket", "reply"), "ticket_id", "$response.body#/data/id"),
            example={"subject_line": "Uploads fail", "body": "A PNG upload answers 422.", "type": "bug",
                     "priority": "P3"}),
        ("POST", "/v1/support/tickets/<ticket_id>/replies"): Op(
            201, ROUTE, (404, 409, 422, 503)),
    }


def _product_slugs() -> list[str]:
    from service.catalog.products import list_products

    return [p.slug for p in list_products()]
