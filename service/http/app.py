"""The Quart-Trio app factory: hooks, error mapping, OpenAPI, blueprints.

Hooks: a request id and start time per request; the body is drained before any early
response (a Hypercorn trio keep-alive hang otherwise, see DESIGN.md); the body limit is
per route (51 MiB for uploads, 1 MiB elsewhere); `X-Process-Time` on every response.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import time
import types
import uuid

from quart import g
from quart.globals import request_ctx
from quart_schema import QuartSchema
from quart_schema.openapi import OpenAPIProvider
from quart_trio import QuartTrio
from werkzeug.exceptions import RequestEntityTooLarge

from service.engines import HOOK_PATH
from service.http import browser, errors, openapi, routes
from service.http.hook_front import HookFront
from service.http.request_task import InlineHTTPConnection, ReadyRequest
from service.logs import REQUEST_ID
from service.metrics import UNMATCHED
from service.streams.limits import StreamLimits

log = logging.getLogger("service.http")

MiB = 1024 * 1024
UPLOAD_BODY_LIMIT = 51 * MiB
BODY_LIMIT = 1 * MiB
UPLOAD_PATHS = ("/v1/generation/uploads", "/assets/upload")  # the API's upload and the dashboard's


def route_modules() -> list[str]:
    """Every module under service/http/routes/ exports a blueprint `bp`."""
    return sorted(m.name for m in pkgutil.iter_modules(routes.__path__))


class Provider(OpenAPIProvider):
    """quart-schema's document, completed by `service.http.openapi`: responses per operation,
    required JSON bodies, the rules checked after parsing, plain operation ids, bearer auth.

    A route without an entry in `openapi.operations()` (or whose entry no longer fits its
    models) is still served, bare and marked `x-undocumented` with the reason, and logged;
    tests/test_schemathesis.py fails on it."""

    def schema(self):
        self._table = openapi.resolve(openapi.operations(self._app.config.get("NODE")), self._app)
        doc = super().schema()
        doc["components"] = openapi.components(doc.get("components", {}), self._table)
        return doc

    def build_request_body(self, model, source):
        body, defs = super().build_request_body(model, source)
        body["required"] = True
        return body, defs

    def build_paths(self, rule):
        paths, components = super().build_paths(rule)
        func = self._app.view_functions[rule.endpoint]
        for path, methods in paths.items():
            for method, operation in methods.items():
                key = (method.upper(), openapi.normalize(rule.rule))
                try:
                    if key not in self._table:
                        raise openapi.DocumentError(f"{key[0]} {key[1]} has no entry in service/http/openapi_table.py")
                    methods[method] = openapi.apply(*key, func, operation, self._table[key])
                except openapi.DocumentError as e:
                    log.error("OpenAPI document: %s", e)
                    methods[method] = {**operation, "x-undocumented": str(e)}
        return paths, components

    def operation_id(self, method, path, func):
        oid = super().operation_id(method, path, func)
        return oid.split("_", 1)[1] if oid and "_" in oid else oid


def plain_answers_as_they_are(app: QuartTrio) -> None:
    """quart-schema passes every answer through a pydantic TypeAdapter built anew for each
    one (about 50 µs a request, a seventh of /healthz in process: bench/README.md) only to
    copy a dict or list (and a second one for the headers). Answers that are a plain dict or
    list, with at most a status and a dict of headers that conversion would leave as they are
    (string values, no `_` in a name: quart-schema turns one into `-`), are JSON-ready, so they
    go to Quart as they are; a model left inside one is still encoded by quart-schema's JSON
    provider. Models, and any other headers, keep quart-schema's path."""
    converting = app.make_response
    plain = types.MethodType(QuartTrio.make_response, app)

    async def make_response(result):
        value, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if type(value) in (dict, list) and all(type(x) is int or _plain_headers(x) for x in rest):
            return await plain(result)
        return await converting(result)

    app.make_response = make_response  # type: ignore[method-assign]


def _plain_headers(headers) -> bool:
    """A dict of headers quart-schema's conversion would hand on unchanged."""
    return type(headers) is dict and all(type(k) is str and "_" not in k and type(v) is str
                                         for k, v in headers.items())


class App(QuartTrio):
    def ensure_async(self, func):
        """Quart asks this of every hook and view it calls (five a request at least), and its
        answer through `inspect` or `asyncio` is about 2 % of a `/healthz`. A plain
        `async def` function or method is answered from its code's flag; anything else, as
        Quart does."""
        code = getattr(func.__func__ if type(func) is types.MethodType else func, "__code__", None)
        if type(code) is types.CodeType and code.co_flags & inspect.CO_COROUTINE:
            return func
        return super().ensure_async(func)


def create_app(node) -> QuartTrio:
    app = App("genservice", static_folder=None)
    app.asgi_http_class = InlineHTTPConnection  # one task a request fewer (request_task.py)
    app.request_class = ReadyRequest
    app.config["NODE"] = node
    settings = node.settings  # how many event streams HTTP callers may hold (docs/streams.md, "Limits")
    node.streams.limits = StreamLimits(per_key=settings.max_streams_per_key, per_org=settings.max_streams_per_org,
                                       per_session=settings.max_streams_per_session)
    app.config["MAX_CONTENT_LENGTH"] = UPLOAD_BODY_LIMIT
    app.config["BODY_TIMEOUT"] = 120
    # No bound on sending a whole response (Quart's is 60 s): it cut a large file to a
    # steady but slower client mid-body (19 MB at 250 KB/s: 13 MB, then the connection
    # closed), and a chat stream longer than a minute. A client that takes too little is
    # bounded by the connection instead (service/http/connection.py, MIN_RATE), and each
    # streamed body ends by itself (an event stream at its final event or the node's stop,
    # a chat stream with its job).
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["JSON_SORT_KEYS"] = False
    app.json.sort_keys = False  # type: ignore[attr-defined]  # Quart's default provider has it
    QuartSchema(
        app,
        openapi_path="/v1/openapi.json",
        swagger_ui_path=None,
        redoc_ui_path=None,
        scalar_ui_path=None,
        info={"title": "genservice", "version": "1"},
        security_schemes={"bearer": {"type": "http", "scheme": "bearer"}},
        security=[{"bearer": []}],
        openapi_provider_class=Provider,
    )
    openapi.serve_versions(app)  # ?version=3.2: the event streams as `itemSchema`
    errors.install(app)
    plain_answers_as_they_are(app)

    @app.before_request
    async def begin():
        # the request once: every use of Quart's proxies looks it up again
        req = request_ctx.request
        g.request_id = request_id = str(uuid.uuid4())
        REQUEST_ID.set(request_id)  # JSON log lines carry it (service/logs.py)
        g.started = time.perf_counter()
        path, method = req.path, req.method
        # Only the upload route itself streams its body; any other method on its path is a
        # 405 and must drain the body like every other route (the keep-alive hang otherwise).
        upload = path in UPLOAD_PATHS and method == "POST"
        # an engine's outcome may carry its files as data URLs (Cog without an upload URL)
        big = upload or (path.startswith(HOOK_PATH + "/") and method == "POST")
        limit = UPLOAD_BODY_LIMIT if big else BODY_LIMIT
        # Quart sizes the body buffer when the request is built, from the app-wide limit;
        # tighten it per route here (a declared length over it is refused before reading).
        req.body._max_content_length = limit
        if req.content_length is not None and req.content_length > limit:
            raise RequestEntityTooLarge()
        if not upload:
            data = await req.get_data(cache=True)
            if not big:  # a JSON body's parse takes it from here: no second wait for it (schemas.body)
                g.raw_body = data

    @app.after_request
    async def finish(response):
        response = browser.after_request(response)
        started = g.get("started")
        if started is not None:
            elapsed = time.perf_counter() - started
            response.headers["X-Process-Time"] = f"{elapsed * 1000:.2f}"
            req = request_ctx.request
            route = req.url_rule.rule if req.url_rule is not None else UNMATCHED
            node.metrics.answered(route, req.method, response.status_code, elapsed)
        return response

    for name in route_modules():
        module = importlib.import_module(f"service.http.routes.{name}")
        app.register_blueprint(module.bp)
    app.asgi_app = HookFront(app.asgi_app, node)  # type: ignore[method-assign]  # hook_front.py
    return app
