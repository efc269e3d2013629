"""HTML pages: one Jinja environment over service/http/templates, and the page-error shape.

The public pages share `public.html` (the sign-in pages its `auth.html` card), the dashboard
`dash.html`, the operator console `operator_base.html`. A page that refuses (forged form, too many attempts, a sign-in
that cannot finish) raises `PageError`; `service.http.errors` renders it with its status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from quart import Response

from service.machines import JOB, RUN

# Every page's scripts and styles are files under /static (no inline script, style element or
# style attribute; tests/test_csp.py checks the templates). `form-action` is left out on
# purpose: browsers apply it to the redirect after a post, and the provider sign-in and
# Stripe checkout forms redirect to other sites.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self'; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")

_env = Environment(loader=PackageLoader("service.http", "templates"), autoescape=select_autoescape(),
                   trim_blocks=True, lstrip_blocks=True)


def when(value: str | None, empty: str = "—") -> Markup:
    """An ISO time as `<time>`: minutes in UTC without microseconds, put in the reader's own
    time zone by the page script (static/dash-2.js) where script runs."""
    if not value:
        return Markup(empty)
    shown = value[:16].replace("T", " ") + " UTC"
    return Markup('<time datetime="{}">{}</time>').format(value, shown)


_env.filters["when"] = when
# The statuses after which a job or a run changes no more, from their state machines: the
# page script (static/dash-2.js) reads them from its own <script data-final> (dash.html)
# rather than restating them.
_env.globals["final_statuses"] = " ".join(sorted(JOB.final | RUN.final))


class PageError(Exception):
    def __init__(self, status: int, title: str, message: str, headers: dict | None = None) -> None:
        super().__init__(title)
        self.status = status
        self.title = title
        self.message = message
        self.headers = headers or {}


# What every page is rendered with besides its own values: the visitor's session and the
# form token. service/http/browser.py owns both and hands them over when it is loaded
# (`page_context`), so this module, which the error handlers need, imports nothing that
# needs them back (the http import circle auth -> errors -> pages -> browser -> auth).
_page_context: list[Callable[[], dict[str, Any]]] = []


def page_context(provider: Callable[[], dict[str, Any]]) -> None:
    """Set what `render` puts in every page's context unless the page gives it."""
    _page_context[:] = [provider]


def render(template: str, status: int = 200, headers: dict | None = None, **ctx) -> Response:
    if not _page_context:
        raise RuntimeError("no page context: service.http.browser is not loaded")
    for k, v in _page_context[0]().items():
        ctx.setdefault(k, v)
    html = _env.get_template(template).render(**ctx)
    resp = Response(html, status=status, content_type="text/html; charset=utf-8")
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["Content-Security-Policy"] = CSP
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


# `/webhooks/stripe` only: the rest of `/webhooks/` is the dashboard's webhook pages
API_PREFIXES = ("/v1/", "/operator/", "/webhooks/stripe", "/files/", "/healthz", "/metrics", "/engine-hooks/",
                "/checkout/")


def wants_page() -> bool:
    """Whether an error should be answered as an HTML page: a browser (Accept names text/html)
    asking for a path outside the API. API clients keep the JSON envelope."""
    from quart import request

    return not request.path.startswith(API_PREFIXES) and "text/html" in request.headers.get("Accept", "")


def error_page(e: PageError) -> Response:
    return render("error.html", e.status, e.headers, title=e.title, message=e.message)
