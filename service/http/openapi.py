"""The OpenAPI 3.1 document of `/v1` (served at `GET /v1/openapi.json`).

quart-schema builds the skeleton from the routes: paths, path parameters, and the request
body and query models that `service.http.schemas.body` / `query` record. This module adds
what the models cannot say, from one table (`operations()` in service/http/openapi_table.py,
beside the schema helpers it is written with; one entry per `/v1` route and method; a route
without an entry is served bare, marked `x-undocumented`, and fails
tests/test_schemathesis.py::test_routes_match_openapi):

- the responses of every operation: the success status with its shape, a class of
  service/http/responses: the route function's return annotation (`-> Data[Project]`:
  mypy holds the route and the builders it calls to that shape; every `/v1` JSON answer
  is declared so), and
  every error the route can give: 400 (envelope), 401 and 403 (flat `{status: false,
  error}`), 404, 408 (flat timeout body), 409, 413, 422, 402, as the route can answer
  them, and 503 on every operation (any route can answer "busy");
- the rules the server checks after parsing (422, not 400), written as JSON Schema where
  they can be stated exactly, so generated "valid" requests are valid and "invalid" ones
  invalid. A body's rules are stated on its class (non-blank names with Python's
  whitespace spelled out, slugs, enums of event names, roles, capabilities, aspect ratios,
  ticket types: `documented` in service/http/schemas.py); the table adds the query rules
  (int64 integers, enums) and only what the node's live catalog decides (`live_body`:
  model ids, resolutions, durations, top-up limits). Names from the live catalog (also
  product slugs) are strings with examples, not enums: a client generated on one node must
  be able to name a model added later. Rules that cannot be stated exactly (URLs checked after
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
import inspect
import re
from dataclasses import replace
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from quart import current_app, request
from quart_schema import hide

from service.http.errors import envelope
from service.http.openapi_table import IDEMPOTENCY_KEY, ROUTE, Op, operations
from service.http.responses.document import SCHEMAS, error_response, json_response, shape_schema

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
        if p["in"] == "path" and p["name"] in op.path:
            p["schema"] = op.path[p["name"]]
        if p["in"] == "path" and p["name"] in op.path_examples:
            p["example"] = op.path_examples[p["name"]]
        if p["in"] == "header" and p["name"].lower() == "idempotency-key":
            p["schema"] = IDEMPOTENCY_KEY
        params.append(p)
    names = {(p["in"], p["name"]) for p in params}
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
        for name, patch in op.live_body.items():
            if name not in props:
                raise DocumentError(f"{where}: body field {name!r} is not in the route's model")
            keep = {k: v for k, v in props[name].items() if k == "description" or (k == "default" and v is not None)}
            props[name] = {**patch, **keep}
        schema["additionalProperties"] = False
        content["schema"] = schema
        # The server reads a missing body as `{}`: the body is required exactly when `{}` is invalid.
        request_body["required"] = bool(schema.get("required") or schema.get("anyOf"))
        if op.encoding:
            content["encoding"] = op.encoding
        if op.example is not None:
            content["example"] = op.example
    elif op.live_body or op.example is not None:
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

    if op.schema is ROUTE:
        raise DocumentError(f"{where}: the table says ROUTE and the route function has no return annotation")
    success = json_response(op.description or "Success.", op.schema, op.headers, op.media)
    if op.links:
        success["links"] = op.links
    responses: dict[str, dict] = {str(op.status): success}
    for status, (text, shape, headers) in op.also.items():
        responses[str(status)] = json_response(text, shape, headers)
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
        if op.schema is not None and op.schema is not ROUTE and not isinstance(op.schema, dict):
            shapes.update(shape_schema(op.schema)[1])
        for _text, shape, _headers in op.also.values():
            shapes.update(shape_schema(shape)[1])
    out = dict(existing)
    out["schemas"] = {**existing.get("schemas", {}), **SCHEMAS, **dict(sorted(shapes.items()))}
    return out


def route_shape(func) -> Any:
    """The success body a route function declares: its return annotation (the body of a
    `(body, status)` tuple; of a union of answers, the first: a submit's 202 before the 200
    of a wait, which the table's `also` declares); ROUTE when it has none (`apply` refuses it)."""
    shape = get_type_hints(inspect.unwrap(func), include_extras=True).get("return", ROUTE)
    if get_origin(shape) in (Union, UnionType):
        shape = get_args(shape)[0]
    return get_args(shape)[0] if get_origin(shape) is tuple else shape


def resolve(table: dict[tuple[str, str], Op], app) -> dict[tuple[str, str], Op]:
    """The table with each ROUTE shape read from its route function."""
    funcs = {(method, normalize(rule.rule)): app.view_functions[rule.endpoint]
             for rule in app.url_map.iter_rules() for method in rule.methods or ()}
    return {key: replace(op, schema=route_shape(funcs[key])) if op.schema is ROUTE and key in funcs else op
            for key, op in table.items()}


PATH_PARAM = re.compile(r"<(?:[^:<>]*:)?([^<>]+)>")


def normalize(rule: str) -> str:
    """A werkzeug rule without converter names: `/v1/x/<conv:name>` -> `/v1/x/<name>`."""
    return PATH_PARAM.sub(r"<\1>", rule)


# -- the same document as OpenAPI 3.2 (`GET /v1/openapi.json?version=3.2`) -----------------------
VERSIONS = ("3.1", "3.2")


def as_3_2(doc: dict) -> dict:
    """`doc` (3.1) as OpenAPI 3.2: each `text/event-stream` answer's event, which 3.1 can only
    put in `schema`, becomes the media type's `itemSchema` (one server-sent event: `event`,
    `id`, `retry`, `data` with its JSON shape per event name). The 3.1 document stays the
    default: openapi-python-client and most tools refuse 3.2 today."""
    out = copy.deepcopy(doc)
    out["openapi"] = "3.2.0"
    for ops in out.get("paths", {}).values():
        for op in ops.values():
            if not isinstance(op, dict):
                continue
            for answer in op.get("responses", {}).values():
                media = answer.get("content", {}).get("text/event-stream")
                if media is None or "schema" not in media:
                    continue
                schema = media.pop("schema")
                events = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "object"]
                if len(events) != 1:
                    raise DocumentError("a text/event-stream schema without its one event object")
                media["itemSchema"] = {"description": schema.get("description", "One server-sent event."),
                                       **events[0]}
    return out


def serve_versions(app) -> None:
    """`GET /v1/openapi.json` answers 3.1, or 3.2 with `?version=3.2`; another version is a 400."""
    provider = app.extensions["QUART_SCHEMA"].openapi_provider

    @hide
    async def document():
        version = request.args.get("version", "3.1")
        if version not in VERSIONS:
            return envelope(400, "request.bad_request",
                            f"Unknown OpenAPI version {version!r}: this node serves 3.1 (the default) and 3.2.")
        doc = provider.schema()
        return current_app.json.response(as_3_2(doc) if version == "3.2" else doc)

    app.view_functions["openapi"] = document
