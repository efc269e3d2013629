"""Login and logout pages: `GET/POST /login` (labels "Email", "Password", button "Log in"),
`POST /logout` (routes/logout.py).

A login attempt is throttled per client address and per email (token buckets on the service
clock, `service.throttle`); past either limit the answer is a 429 page with Retry-After and
nothing is checked. An unknown email and a wrong password get the same 401 page, after the
same argon2 work (a dummy hash is verified for unknown emails). A good login rotates the
session (the browser's previous session row is deleted) and redirects to `next` when it is a
path on this site, else to `HOME`.
"""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.http.auth import node
from service.http.browser import HOME, safe_next
from service.http.pages import PageError, render

bp = Blueprint("login", __name__)

BAD_LOGIN = "Email or password is incorrect."
UNCONFIRMED = "Confirm your email address first: follow the link in the mail we sent you."


def login_form(status: int = 200, error: str | None = None, email: str = "", next_path: str = HOME,
               headers: dict | None = None):
    providers = [(p.config.key, p.name) for p in node().oidc.values()]
    return render("login.html", status, headers, title="Log in", error=error, email=email,
                  next_path=next_path, providers=providers)


def too_many(seconds: int):
    raise PageError(429, "Too many attempts",
                    f"Too many login attempts. Wait {seconds} seconds and try again.",
                    {"Retry-After": str(seconds)})


@bp.get("/login")
@hide
async def login_page():
    return login_form(next_path=safe_next(request.args.get("next")))
