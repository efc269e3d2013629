"""Browser sessions and CSRF for the HTML pages.

The session cookie (`SESSION_COOKIE`) holds a random token; the server keeps only its digest
(`service.actors.sessions`). It is HttpOnly, SameSite=Lax, Path=/, and Secure whenever the
request came over https or the public base URL is https (a node behind an https proxy).

`@page(permission)` is the pages' counterpart of the API's `@requires`: no live session
redirects to /login?next=<this path>; a session whose person has not picked one of their
organizations yet goes to the switcher (/organizations, service/http/signin.py); an organization still waiting for approval (or an
unconfirmed email) sees the waiting page (403); otherwise the person acts as a `Principal`
with their member role, checked against the same role table as API keys (service/roles.py),
and `service.http.auth.principal()` / `resolve_project()` work unchanged. A browser session
never holds an API key (`Principal.key_id` is None).

CSRF: every form post carries `csrf_token`, an itsdangerous signature over the session's id
(or, before login, over the digest of a random `gs_anon` cookie). `@csrf_protected` checks
that token and that `Origin` (else `Referer`), when the browser sends one, is this site.
A refusal is a 403 page. Forms put `{{ csrf_token() }}` in a hidden field named csrf_token.

`throttle(email)`: one attempt from the client address's token bucket and from the bucket of
that email from that address, or the 429 page; every form that checks a password or mails an
address calls it first.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from functools import wraps
from typing import Any, Callable
from urllib.parse import quote, urlsplit

import trio
from itsdangerous import BadSignature, URLSafeSerializer
from quart import Response, g, redirect, request
from werkzeug.wrappers.response import Response as WerkzeugResponse

from service.actors.sessions import IDLE
from service.clock import TOUCH_EVERY
from service.errors import RateLimited
from service.http.auth import TARPIT_S, Principal, node
from service.http.clientaddr import client_address
from service.http.pages import PageError, page_context, render
from service.roles import allows
from service.storage import sessions as sql

HOME = "/studio"  # where a login, a reset, an invitation lands without a `next`: the dashboard's Studio
SESSION_COOKIE = "gs_session"
ANON_COOKIE = "gs_anon"
CSRF_FIELD = "csrf_token"
FORGED = ("This form was not sent from this site, or the page was open too long. "
          "Go back, reload the page and try again.")


def forged() -> PageError:
    return PageError(403, "Request refused", FORGED)


@dataclass(frozen=True)
class BrowserSession:
    id: str
    user_id: str
    org_id: str
    email: str
    role: str
    org_name: str
    approved: bool
    confirmed: bool
    chosen: bool = True  # False until a person of several organizations picks one


def secure_cookies() -> bool:
    return request.scheme == "https" or node().settings.public_base_url.startswith("https://")


def set_cookie(resp: Response | WerkzeugResponse, name: str, value: str, max_age: int | None) -> None:
    resp.set_cookie(name, value, max_age=max_age, path="/", httponly=True, samesite="Lax",
                    secure=secure_cookies())


def current_session() -> BrowserSession | None:
    """The request's live session, or None (cached for the request)."""
    if "browser_session" in g:
        return g.browser_session
    g.browser_session = None
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    svc = node()
    row = sql.session_for_auth(svc.store, sql.digest(token))
    now = svc.clock.now()
    if row is None or not row["user_active"] or now >= row["expires_at"] or now >= row["last_seen_at"] + IDLE:
        return None
    if now - row["last_seen_at"] >= TOUCH_EVERY:
        svc.sessions.touch_session(row["id"], now)
    g.browser_session = BrowserSession(
        row["id"], row["user_id"], row["organization_id"], row["email"], row["role"], row["org_name"],
        approved=bool(row["approved_at"]), confirmed=not row["unconfirmed"], chosen=bool(row["org_chosen"]))
    return g.browser_session


def session_token() -> str | None:
    return request.cookies.get(SESSION_COOKIE)


def safe_next(value: str | None) -> str:
    """`next` only when it is a path on this site (no scheme, no host, no `//` or `\\` tricks)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return HOME
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or any(ord(c) < 32 for c in value):
        return HOME
    return value


def login_redirect() -> WerkzeugResponse:
    """To the login page, then back: to this page, or for a form sent after the session ended,
    to the page the form was on (its Referer, when on this site)."""
    target = request.full_path.rstrip("?") if request.method == "GET" else request.path
    if request.method != "GET" and same_site_origin():
        ref = urlsplit(request.headers.get("Referer", ""))
        if ref.path.startswith("/"):
            target = ref.path + (f"?{ref.query}" if ref.query else "")
    return redirect("/login?next=" + quote(target, safe="/"), 303)


def page_session() -> BrowserSession:
    """The session `page()` checked for this request: inside a page handler it is never None
    (outside one, asking for it is a programming error, not a visitor's)."""
    s = g.get("page_session")
    if s is None:
        raise RuntimeError("page_session() is for handlers behind @page()")
    return s


def page(permission: str | None = None, *, waiting_ok: bool = False) -> Callable:
    """Require a live session (and `permission` from the role table) for an HTML page."""

    def deco(func: Callable) -> Callable:
        @wraps(func)
        async def wrapper(*args, **kwargs):
            s = current_session()
            if s is None:
                return login_redirect()
            if not s.chosen:  # several organizations: the person picks one first
                return redirect("/organizations?next=" + quote(request.path, safe="/"), 303)
            if not (s.approved and s.confirmed) and not waiting_ok:
                return render("waiting.html", 403, title="Waiting for approval")
            if permission is not None and not allows(s.role, permission):
                raise PageError(403, "Not allowed", f"Your role ({s.role}) does not allow this.")
            await take_request(s)
            g.principal = Principal(s.org_id, s.user_id, None, s.role)
            g.page_session = s
            return await func(*args, **kwargs)

        wrapper.permission = permission  # type: ignore[attr-defined]  # read by the page matrix test
        return wrapper

    return deco


async def take_request(s: BrowserSession) -> None:
    """The request rate limit of API keys, per browser session (the same bucket sizes and the
    same pause before the refusal): a dashboard session cannot out-request a key (probe H1).
    The 429 page carries Retry-After."""
    try:
        node().key_buckets.take("session:" + s.id)
    except RateLimited as e:
        await trio.sleep(min(TARPIT_S, e.retry_after) * random.uniform(0.5, 1.0))
        raise PageError(429, "Too many requests", e.message.replace("this API key", "this session"),
                        {"Retry-After": str(e.retry_after)}) from None


def too_many(seconds: int, what: str):
    raise PageError(429, "Too many attempts",
                    f"Too many {what}. Wait {seconds} seconds and try again.",
                    {"Retry-After": str(seconds)})


def throttle(email: str, what: str = "login attempts") -> None:
    """Take one attempt from the client address's bucket and from the bucket of this email
    *from this address*, or refuse with the 429 page (and Retry-After). For every form that
    checks a password or sends a mail to an address (login, sign-up, password reset,
    invitation acceptance, password change).

    Never a bucket of the email alone: attempts from elsewhere would then lock its person
    out of login, reset and sign-up (probe L7: one wrong login a minute did). Guessing one
    person's password from many addresses is met by the password rules (12 characters, no
    common password) and argon2's cost instead."""
    svc = node()
    address = client_address(svc.settings.trusted_proxies)
    address_key, account_key = "ip:" + address, f"email:{email.lower()}|ip:{address}"
    wait = max(svc.login_by_address.retry_after(address_key), svc.login_by_account.retry_after(account_key))
    if wait:
        too_many(wait, what)
    svc.login_by_address.take(address_key)
    svc.login_by_account.take(account_key)


# -- CSRF -------------------------------------------------------------------------------------
def _serializer() -> URLSafeSerializer:
    return URLSafeSerializer(node().page_secret, salt="csrf")


def _binding() -> str:
    s = current_session()
    if s is not None:
        return "s:" + s.id
    anon = request.cookies.get(ANON_COOKIE) or g.get("new_anon")
    if not anon:
        anon = g.new_anon = secrets.token_urlsafe(24)
    return "a:" + sql.digest(anon)


def csrf_token() -> str:
    """The token for a form on this page (bound to the session, or the anonymous cookie)."""
    return _serializer().dumps(_binding())


def same_site_origin() -> bool:
    """Origin, else Referer, when present, must be this site (the base URL or the request's host)."""
    value = request.headers.get("Origin") or request.headers.get("Referer")
    if value is None:
        return True
    parts = urlsplit(value)
    if not parts.scheme or not parts.netloc:
        return False
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    base = urlsplit(node().settings.public_base_url)
    allowed = {f"{base.scheme}://{base.netloc}".lower(), f"{request.scheme}://{request.host}".lower()}
    return origin in allowed


def check_csrf_value(token: str) -> bool:
    """Whether `token` is this session's (or anonymous browser's) CSRF token."""
    try:
        bound = _serializer().loads(token)
    except BadSignature:
        return False
    return secrets.compare_digest(str(bound), _binding())


async def check_csrf() -> None:
    if not same_site_origin():
        raise forged()
    form = await request.form
    if not check_csrf_value(form.get(CSRF_FIELD, "")):
        raise forged()


def csrf_protected(func: Callable) -> Callable:
    """Refuse a POST (any unsafe method) whose CSRF token or origin is not this site's: 403 page."""

    @wraps(func)
    async def wrapper(*args, **kwargs):
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            await check_csrf()
        return await func(*args, **kwargs)

    return wrapper


def after_request(resp: Response) -> Response:
    """Set the anonymous CSRF cookie when a page issued a token without one."""
    anon = g.get("new_anon")
    if anon and ANON_COOKIE not in request.cookies:
        set_cookie(resp, ANON_COOKIE, anon, None)
    return resp


def _page_values() -> dict[str, Any]:
    """Every page's session (None before login) and its form-token function."""
    return {"session": current_session(), "csrf_token": csrf_token}


page_context(_page_values)
