"""Who may use the operator console, its CSRF tokens and its audit entries.

An operator is either a browser signed in on /operator/login with the operator token (its
own cookie `gs_operator`, Path=/operator, SameSite=Strict, a session of `service.console`),
or a person logged in through /login (the organizations' session, read through
`browser.current_session`) whose email is in GENSERVICE_OPERATOR_EMAILS. Nobody signed in:
every console page redirects to /operator/login. A person who is not listed: 403.

Every form of the console carries a CSRF token signed over the operator's session (salt of
its own, so an organization page's token is no good here) and must come from this site
(Origin, else Referer). Every action is written to the audit log with who, what, on what
and from which address (`audit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import wraps
from typing import Callable
from urllib.parse import quote

from itsdangerous import BadSignature, URLSafeSerializer
from quart import g, redirect, request

from service.errors import ApiError
from service.http.auth import node
from service.http.browser import current_session, forged, same_site_origin, secure_cookies
from service.http.clientaddr import client_address
from service.http.pages import PageError, render

OPERATOR_COOKIE = "gs_operator"
COOKIE_PATH = "/operator"
NOT_OPERATOR = "This account is not an operator of this node. Sign in with the operator token instead."


@dataclass(frozen=True)
class Operator:
    who: str        # "operator token" or the person's email
    binding: str    # what the CSRF token is bound to: the console session or the person's


def current_operator() -> Operator | None:
    """The request's operator, or None (cached for the request)."""
    if "operator" in g:
        return g.operator
    g.operator = None
    token = request.cookies.get(OPERATOR_COOKIE)
    row = node().console.session(token, node().settings.operator_token or "") if token else None
    if row is not None:
        g.operator = Operator(row["who"], "o:" + row["id"])
        return g.operator
    person = current_session()
    if person is not None and node().console.is_operator_email(person.email):
        g.operator = Operator(person.email, "p:" + person.id)
    return g.operator


def address() -> str:
    return client_address(node().settings.trusted_proxies)


def _serializer() -> URLSafeSerializer:
    return URLSafeSerializer(node().page_secret, salt="operator-csrf")


def csrf_token() -> str:
    """The token of this operator's forms (signed once per request: a list has one per row)."""
    if "operator_csrf" not in g:
        op = current_operator()
        g.operator_csrf = _serializer().dumps(op.binding if op else "-")
    return g.operator_csrf


async def check_csrf() -> None:
    op = current_operator()
    form = await request.form
    if op is None or not same_site_origin():
        raise forged()
    try:
        bound = _serializer().loads(form.get("csrf_token", ""))
    except BadSignature:
        raise forged() from None
    if bound != op.binding:
        raise forged()


def console_page(func: Callable) -> Callable:
    """An operator page or form: sign-in required, CSRF checked on every unsafe method."""

    @wraps(func)
    async def wrapper(*args, **kwargs):
        op = current_operator()
        if op is None:
            if current_session() is not None:
                return refusal(PageError(403, "Not an operator", NOT_OPERATOR))
            target = request.full_path.rstrip("?") if request.method == "GET" else "/operator"
            return redirect("/operator/login?next=" + quote(target, safe="/"), 303)
        try:
            if request.method not in ("GET", "HEAD", "OPTIONS"):
                await check_csrf()
            return await func(*args, **kwargs)
        except PageError as e:
            return refusal(e)
        except ApiError as e:  # a facade's refusal (unknown organization, closed ticket, ...)
            if e.status >= 500:
                raise
            title = {404: "Not found", 409: "Conflict", 403: "Not allowed"}.get(e.status, "Not possible")
            return refusal(PageError(e.status, title, e.message))

    return wrapper


def refusal(e: PageError):
    return show("operator_error.html", e.status, headers=e.headers, title=e.title, message=e.message)


def show(template: str, status: int = 200, **ctx):
    """A console page: the operator's CSRF tokens and who is signed in."""
    headers = ctx.pop("headers", None)
    return render(template, status, headers, csrf_token=csrf_token, operator=current_operator(), here=request.path,
                  **ctx)


async def audit(action: str, target: str | None = None, detail: str | None = None) -> None:
    op = current_operator()
    await node().console.audit(op.who if op else "unknown", address(), action, target, detail)


def set_operator_cookie(resp, token: str, max_age: int) -> None:
    resp.set_cookie(OPERATOR_COOKIE, token, max_age=max_age, path=COOKIE_PATH, httponly=True, samesite="Strict",
                    secure=secure_cookies())


def clear_operator_cookie(resp) -> None:
    resp.delete_cookie(OPERATOR_COOKIE, path=COOKIE_PATH, httponly=True, samesite="Strict", secure=secure_cookies())
