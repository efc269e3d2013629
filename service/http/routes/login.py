"""Login and logout pages: `GET/POST /login` (labels "Email", "Password", button "Log in"),
`POST /logout` (routes/logout.py).

A login attempt is throttled per client address and per email (token buckets on the service
clock, `service.throttle`); past either limit the answer is a 429 page with Retry-After and
nothing is checked. An unknown email and a wrong password get the same 401 page, after the
same argon2 work (a dummy hash is verified for unknown emails). A good login rotates the
session (the browser's previous session row is deleted) and redirects to `next` when it is a
path on this site, else to `HOME` (Studio); a person of several organizations goes to the switcher
first (service/http/signin.py). A hash stored under weaker argon2 parameters than the
current ones is replaced at the next good login.
"""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import hide

from service import passwords
from service.http.auth import node
from service.http.browser import HOME, csrf_protected, safe_next, throttle
from service.http.pages import render
from service.http.signin import sign_in
from service.storage import sessions as sessions_sql

bp = Blueprint("login", __name__)

BAD_LOGIN = "Email or password is incorrect."


def login_form(status: int = 200, error: str | None = None, email: str = "", next_path: str = HOME,
               headers: dict | None = None):
    providers = [(p.config.key, p.name) for p in node().oidc.values()]
    return render("login.html", status, headers, title="Log in", error=error, email=email,
                  next_path=next_path, providers=providers, signup_open=node().settings.signup == "open")


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
    stored = sessions_sql.password_hash(svc.store, email)
    if stored is None:
        await passwords.verify_dummy(password)
        return login_form(401, BAD_LOGIN, email, next_path)
    if not await passwords.verify(stored, password):
        return login_form(401, BAD_LOGIN, email, next_path)
    if passwords.needs_rehash(stored):  # parameters raised since it was stored
        await svc.sessions.rehash_password(email, stored, await passwords.hash_password(password))
    resp = await sign_in(email, next_path)
    return resp if resp is not None else login_form(401, BAD_LOGIN, email, next_path)
