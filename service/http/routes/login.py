"""Login and logout pages: `GET/POST /login` (labels "Email", "Password", button "Log in"),
`POST /logout` (routes/logout.py).

A login attempt is throttled per client address and per email (token buckets on the service
clock, `service.throttle`); past either limit the answer is a 429 page with Retry-After and
nothing is checked. An unknown email and a wrong password get the same 401 page, after the
same argon2 work (a dummy hash is verified for unknown emails). A good login rotates the
session (the browser's previous session row is deleted) and redirects to `next` when it is a
path on this site, else to `HOME`. A hash stored under weaker argon2 parameters than the
current ones is replaced at the next good login.
"""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service import passwords
from service.actors.sessions import ABSOLUTE
from service.http.auth import node
from service.http.browser import (HOME, SESSION_COOKIE, csrf_protected, safe_next, session_token, set_cookie,
                                  throttle)
from service.http.pages import render
from service.storage.logins import login_row

bp = Blueprint("login", __name__)

BAD_LOGIN = "Email or password is incorrect."


def login_form(status: int = 200, error: str | None = None, email: str = "", next_path: str = HOME,
               headers: dict | None = None):
    providers = [(p.config.key, p.name) for p in node().oidc.values()]
    return render("login.html", status, headers, title="Log in", error=error, email=email,
                  next_path=next_path, providers=providers)


@bp.get("/login")
@hide
async def login_page():
    return login_form(next_path=safe_next(request.args.get("next")))


@bp.post("/login")
@hide
@csrf_protected
async def login():
    form = await request.form
    email = form.get("email", "").strip()
    password = form.get("password", "")
    next_path = safe_next(form.get("next"))
    svc = node()
    throttle(email)
    if not email or not password:
        return login_form(400, "Enter your email and password.", email, next_path)
    person = login_row(svc.store, email)
    if person is None:
        await passwords.verify_dummy(password)
        return login_form(401, BAD_LOGIN, email, next_path)
    if not await passwords.verify(person["password_hash"], password) or person["user_id"] is None:
        return login_form(401, BAD_LOGIN, email, next_path)
    if passwords.needs_rehash(person["password_hash"]):  # parameters raised since it was stored
        await svc.sessions.rehash_password(email, person["password_hash"],
                                           await passwords.hash_password(password))
    out = await svc.sessions.start_session(person["user_id"], person["organization_id"],
                                           session_token())
    resp = redirect(next_path, 303)
    set_cookie(resp, SESSION_COOKIE, out["token"], int(ABSOLUTE))
    return resp
