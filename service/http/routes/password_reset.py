"""`GET/POST /forgot-password` and `GET/POST /reset-password?token=` (password reset by mail).

Asking for a link is throttled per client address and per email from that address (the 429
page) and answers the same page, after the same work, whether or not the address has an
account: the address is looked up, and the mail queued for a known one, after the answer.
A link works once, for one hour on the service clock, and dies with any later change of the
password; setting the password ends every session of the person in the same transaction
(and, with the form's checkbox, revokes every API key they created), then this browser
gets a new one.
"""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import hide

from service import passwords
from service.actors.accounts.people import INVALID_RESET
from service.errors import NotFound
from service.http.auth import node
from service.http.browser import HOME, csrf_protected, throttle
from service.http.pages import PageError, render
from service.http.signin import sign_in
from service.mail.addresses import BAD_ADDRESS, valid_address
from service.storage import mail as mail_sql

bp = Blueprint("password_reset", __name__)
# The page's URL carries the token: no Referer leaves this site (`same-origin`). Not
# `no-referrer`: Chromium then posts the page's form with `Origin: null`, which the CSRF check
# rightly refuses, and no reset could finish (probe, "password reset fails in every browser").
SAME_ORIGIN_REFERRER = {"Referrer-Policy": "same-origin"}

SENT = ("If an account exists for {email}, we sent it a link to choose a new password. The link works once, "
        "for one hour.")


def forgot_form(status: int = 200, error: str | None = None, email: str = ""):
    return render("forgot_password.html", status, title="Forgot your password?", error=error, email=email)


@bp.get("/forgot-password")
@hide
async def forgot_page():
    return forgot_form()


@bp.post("/forgot-password")
@hide
@csrf_protected
async def forgot():
    email = (await request.form).get("email", "").strip()
    throttle(email, "password reset requests")
    if not email:
        return forgot_form(400, "Enter your email address.", email)
    if not valid_address(email):
        return forgot_form(422, BAD_ADDRESS, email)
    node().accounts.request_reset_later(email)  # known or not: looked up off the request
    return render("notice.html", 200, title="Check your email", message=SENT.format(email=email))


def live_link(token: str) -> dict:
    """The reset link's row while it can be used, else the 404 page."""
    svc = node()
    row = mail_sql.get_token(svc.store, mail_sql.digest(token), "reset") if token else None
    if row is None or row["used_at"] is not None or row["expires_at"] <= svc.clock.iso_now():
        raise PageError(404, "Link not valid", INVALID_RESET)
    return row


def reset_form(row: dict, token: str, status: int = 200, error: str | None = None):
    return render("reset_password.html", status, SAME_ORIGIN_REFERRER, title="Choose a new password",
                  email=row["email"], token=token, error=error)


@bp.get("/reset-password")
@hide
async def reset_page():
    token = request.args.get("token", "")
    return reset_form(live_link(token), token)


@bp.post("/reset-password")
@hide
@csrf_protected
async def reset():
    form = await request.form
    token, password = form.get("token", ""), form.get("password", "")
    row = live_link(token)
    throttle(row["email"], "password reset attempts")
    problem = passwords.weakness(password)
    if problem:
        return reset_form(row, token, 422, problem)
    hashed = await passwords.hash_password(password)
    svc = node()
    try:
        out = await svc.accounts.reset_password(token, hashed, revoke_keys=form.get("revoke_keys") == "1")
    except NotFound as e:  # used or expired while the password was being hashed
        raise PageError(404, "Link not valid", e.message) from None
    resp = await sign_in(out["email"], HOME)
    if resp is None:
        return render("notice.html", 200, title="Password changed",
                      message="Your password is changed. You have no active membership to log in to.")
    return resp
