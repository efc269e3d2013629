"""`GET/POST /signup` (labels "Email", "Password", "Organization"; button "Sign up") and
`GET /confirm?token=`.

A sign-up is throttled per client address and per email (the 429 page), checked (address
shape, password strength, organization name), and hashed off the event loop whether or not
the address is known; the accounts actor then creates the unconfirmed organization, or mails
the known address instead (service/actors/accounts/people.py). The answer page is the same in both
cases. `GENSERVICE_SIGNUP=closed`: both forms answer 403 (invitations only).

`GET /confirm` confirms on the GET itself (the spec's link): it is single-use and idempotent,
so a mail scanner opening it first only confirms what the mailbox's owner received.
"""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import hide

from service import passwords
from service.actors.accounts.org_rules import has_control
from service.errors import NotFound
from service.http.auth import node
from service.http.browser import csrf_protected, throttle
from service.http.pages import PageError, render
from service.mail.addresses import BAD_ADDRESS, valid_address

bp = Blueprint("signup", __name__)

MAX_ORG_NAME = 100
CLOSED = "This service takes new accounts by invitation only. Ask an organization's owner to invite you."
MISSING = "Enter your email, a password and an organization name."
LONG_NAME = f"The organization name must be at most {MAX_ORG_NAME} characters."
CONTROL_NAME = "The organization name cannot contain control characters."
SENT = ("We sent a mail to {email}. Follow its link to confirm your address; after that your organization "
        "waits for approval, and we mail you again once it is approved.")


def _open() -> None:
    if node().settings.signup != "open":
        raise PageError(403, "Sign-up is closed", CLOSED)


def signup_form(status: int = 200, error: str | None = None, email: str = "", organization: str = ""):
    return render("signup.html", status, title="Sign up", error=error, email=email, organization=organization)


@bp.get("/signup")
@hide
async def signup_page():
    _open()
    return signup_form()


@bp.post("/signup")
@hide
@csrf_protected
async def signup():
    _open()
    form = await request.form
    email = form.get("email", "").strip()
    password = form.get("password", "")
    org_name = " ".join(form.get("organization", "").split())
    throttle(email, "sign-up attempts")
    if not email or not password or not org_name:
        return signup_form(400, MISSING, email, org_name)
    if not valid_address(email):
        return signup_form(422, BAD_ADDRESS, email, org_name)
    if len(org_name) > MAX_ORG_NAME:
        return signup_form(422, LONG_NAME, email, org_name)
    if has_control(org_name):
        return signup_form(422, CONTROL_NAME, email, "")
    problem = passwords.weakness(password)
    if problem:
        return signup_form(422, problem, email, org_name)
    hashed = await passwords.hash_password(password)  # also for a known address: same time, same page
    await node().accounts.sign_up(email, org_name, hashed)
    return render("notice.html", 200, title="Check your email", message=SENT.format(email=email))


@bp.get("/confirm")
@hide
async def confirm():
    token = request.args.get("token", "")
    try:
        out = await node().accounts.confirm_email(token)
    except NotFound as e:
        raise PageError(404, "Link not valid", e.message) from None
    if out["already"]:
        return render("notice.html", 200, title="Email already confirmed",
                      message="This link was used before: your email address is already confirmed.",
                      link="/login", link_text="Log in")
    return render("notice.html", 200, title="Email confirmed",
                  message=f"Your email address is confirmed. Your organization \u201c{out['name']}\u201d now "
                          "waits for approval; we will mail you as soon as it is approved.",
                  link="/login", link_text="Log in")
